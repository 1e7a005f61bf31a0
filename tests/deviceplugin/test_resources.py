"""Kinds to resources, devices to kubelet device IDs (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdi_plugin.cdi.names import validate_device_name
from cdi_plugin.deviceplugin.resources import (
    MAX_DEVICE_ID,
    build_catalog,
    replica_ids,
    resource_name_problem,
)
from cdi_plugin.inventory.record import ServedDevice
from tests.deviceplugin.fake_kubelet import is_extended_resource_name

VALID = [
    "cdi-plugin.io/fuse",
    "vendor.example/foo_bar.1",
    "a1.b2/C",
    "x" * 63 + ".example/" + "y" * 63,
    "d" * 240 + ".io/z",
]
INVALID = [
    ("nodomain", "no '/'"),
    ("Vendor.com/x", "lowercase DNS subdomain"),
    ("ven_dor.com/x", "lowercase DNS subdomain"),
    ("kubernetes.io/x", "kubernetes.io/"),
    ("foo.kubernetes.io/x", "kubernetes.io/"),
    ("requests.foo/x", "requests."),
    ("d" * 245 + "/z", "at most 244"),
    ("vendor.io/" + "y" * 64, "at most 63"),
    ("vendor.io/a/b", "more than one '/'"),
    ("vendor.io/_x", "start and end"),
    ("-vendor.io/x", "lowercase DNS subdomain"),
]


@pytest.mark.parametrize("name", VALID)
def test_valid_extended_resource_names(name: str) -> None:
    assert resource_name_problem(name) is None
    assert is_extended_resource_name(name)


@pytest.mark.parametrize(("name", "why"), INVALID)
def test_invalid_extended_resource_names_say_why(name: str, why: str) -> None:
    problem = resource_name_problem(name)
    assert problem is not None
    assert why in problem
    assert not is_extended_resource_name(name)


def test_unshared_device_id_is_the_device_name() -> None:
    assert replica_ids("gpu0", 1) == ["gpu0"]


def test_replica_ids_are_numbered() -> None:
    assert replica_ids("gpu0", 3) == ["gpu0#0", "gpu0#1", "gpu0#2"]


def test_long_names_are_cut_and_tagged_but_stay_unique_and_stable() -> None:
    long_a = "a" * 60 + "x1"
    long_b = "a" * 60 + "x2"
    ids_a, ids_b = replica_ids(long_a, 12), replica_ids(long_b, 12)
    assert all(len(i) <= MAX_DEVICE_ID for i in ids_a + ids_b)
    assert len(set(ids_a) | set(ids_b)) == 24
    assert ids_a == replica_ids(long_a, 12)
    assert ids_a[11].endswith("#11")
    assert "~" in ids_a[0]


_device_names = st.from_regex(re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,61}[A-Za-z0-9])?"), fullmatch=True)


@given(st.lists(_device_names, min_size=1, max_size=5, unique=True), st.integers(1, 40))
def test_replica_ids_are_short_unique_and_never_a_device_name(names: list[str], replicas: int) -> None:
    ids = [i for n in names for i in replica_ids(n, replicas)]
    assert len(ids) == len(set(ids)) == len(names) * replicas
    assert all(len(i) <= MAX_DEVICE_ID for i in ids)
    if replicas > 1:
        for device_id in ids:
            with pytest.raises(ValueError, match="invalid device name"):
                validate_device_name(device_id)


def _served(kind: str, *names: str) -> list[ServedDevice]:
    return [ServedDevice(cdi_name=f"{kind}={n}") for n in names]


def test_catalog_skips_aggregates_long_names_and_invalid_resource_names() -> None:
    devices = [
        *_served("cdi-plugin.io/fuse", "dev10", "dev2", "all", "n" * 64),
        *_served("Bad.Vendor/xy", "a"),
    ]
    catalog = build_catalog(devices, lambda kind: 2)
    assert list(catalog.resources) == ["cdi-plugin.io/fuse"]
    fuse = catalog.resources["cdi-plugin.io/fuse"]
    assert [d.id for d in fuse.devices] == ["dev2#0", "dev2#1", "dev10#0", "dev10#1"]
    assert {d.qualified_name for d in fuse.devices} == {"cdi-plugin.io/fuse=dev2", "cdi-plugin.io/fuse=dev10"}
    assert [d.replica for d in fuse.devices] == [0, 1, 0, 1]
    notes = " | ".join(n.message for n in catalog.notes)
    assert "not advertising cdi-plugin.io/fuse=all" in notes
    assert "64 characters long" in notes
    assert "skipping kind Bad.Vendor/xy: not a valid extended resource name" in notes
