"""The node's pool as ResourceSlices, every slice checked against the API server's rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.dra.inventory import ServedDevice, UdevFacts
from cdi_plugin.dra.slices import (
    GENERATION_MAX,
    PCI_BUS_ID,
    Plan,
    Pool,
    build_pool,
    legacy_slice_name,
    plan,
    slice_name,
    taint_key,
)
from cdi_plugin.inventory import SpecInventory
from cdi_plugin.inventory.health import Rdev
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.rules import pool_problems, slice_problems
from tests.dra.specinventory import refresh, spec_inventory


def _valid(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert pool_problems(slices) == []
    return slices


def _stored(objs: list[dict[str, Any]] | tuple[dict[str, Any], ...], rv: int = 1) -> list[dict[str, Any]]:
    """Objects as the API server stores them: with a resourceVersion."""
    return [{**o, "metadata": {**o["metadata"], "resourceVersion": str(rv)}} for o in objs]


def _inventory(spec_dir: Path, host_nodes: Path, count: int, missing: int = 0) -> SpecInventory:
    nodes = {}
    for i in range(count):
        path = host_nodes / f"fuse{i}"
        if i >= missing:
            make_node(path)
        nodes[f"fuse{i}"] = str(path)
    write_spec(spec_dir, "cdi-plugin.io/fuse", nodes)
    return spec_inventory([spec_dir])


def test_attributes_from_the_inventory(spec_dir: Path, host_nodes: Path) -> None:
    make_node(host_nodes / "card0", os.makedev(226, 0))
    sysfs = host_nodes.parent / "sys"
    (sysfs / "dev" / "char" / "226:0").mkdir(parents=True)
    (sysfs / "dev" / "char" / "226:0" / "numa_node").write_text("1\n")
    write_spec(spec_dir, "cdi-plugin.io/gpu", {"card0": str(host_nodes / "card0")})
    facts = UdevFacts(
        subsystem="drm", driver="amdgpu", vendor_id="0x1002", model_id="0x73bf",
        serial="s" * 65, pci_address="0000:3b:00.0",
    )  # fmt: skip
    inv = spec_inventory([spec_dir], {Rdev(False, 226, 0): facts}, sysfs=sysfs)
    [obj] = _valid(build_pool(DRIVER, NODE, inv.devices(), taints=True).slices(0))
    [device] = obj["spec"]["devices"]
    assert device["name"] == "gpu-card0"
    assert device["attributes"] == {
        "kind": {"string": "cdi-plugin.io/gpu"},
        "vendor": {"string": "cdi-plugin.io"},
        "class": {"string": "gpu"},
        "subsystem": {"string": "drm"},
        "driver": {"string": "amdgpu"},
        "vendorID": {"string": "0x1002"},
        "modelID": {"string": "0x73bf"},
        PCI_BUS_ID: {"string": "0000:3b:00.0"},
        "numaNode": {"int": 1},
    }  # the 65-character serial is left out, not cut
    assert obj["spec"]["nodeName"] == NODE
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}


def test_an_empty_pool_is_still_one_slice() -> None:
    slices = _valid(build_pool(DRIVER, NODE, {}, taints=True).slices(0))
    assert [s["spec"]["devices"] for s in slices] == [[]]


@pytest.mark.parametrize(
    ("case", "sizes"),
    [
        ((128, 0, True), [128]),
        ((129, 0, True), [128, 1]),
        ((300, 0, False), [128, 128, 44]),
        ((200, 1, True), [64, 128, 8]),  # the chunk with the tainted device holds at most 64
        ((130, 130, True), [64, 64, 2]),
        ((130, 2, False), [128]),  # without taints the unhealthy devices are withdrawn
    ],
)
def test_split_at_the_api_limits(
    spec_dir: Path, host_nodes: Path, case: tuple[int, int, bool], sizes: list[int]
) -> None:
    count, missing, taints = case
    inv = _inventory(spec_dir, host_nodes, count, missing)
    slices = _valid(build_pool(DRIVER, NODE, inv.devices(), taints=taints).slices(7))
    assert [len(s["spec"]["devices"]) for s in slices] == sizes
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(sizes)}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}


def test_unhealthy_devices_get_a_noschedule_taint(spec_dir: Path, host_nodes: Path) -> None:
    inv = _inventory(spec_dir, host_nodes, 3, missing=1)
    [obj] = _valid(build_pool(DRIVER, NODE, inv.devices(), taints=True).slices(0))
    tainted = {d["name"]: d.get("taints") for d in obj["spec"]["devices"]}
    assert tainted == {
        "fuse-fuse0": [{"key": taint_key(DRIVER), "effect": "NoSchedule"}],
        "fuse-fuse1": None,
        "fuse-fuse2": None,
    }


def test_validator_is_strict() -> None:
    """The rules used above reject what the API server rejects."""
    good = build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0]
    bad_device = {
        "name": "Bad_Name",
        "attributes": {"x" * 33: {"string": "a" * 65}, "two": {"int": 1, "bool": True}},
    }
    bad = {**good, "spec": {**good["spec"], "devices": [bad_device, bad_device]}}
    problems = "\n".join(slice_problems(bad))
    for part in ("not a DNS label", "C identifier", "longer than 64", "exactly one of", "duplicated"):
        assert part in problems
    too_many = [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)]
    assert slice_problems({**good, "spec": {**good["spec"], "devices": too_many}}) == [
        "spec.devices: 65 devices, at most 64"
    ]


def test_plan_first_publish_then_nothing_then_a_new_generation(spec_dir: Path, host_nodes: Path) -> None:
    inv = _inventory(spec_dir, host_nodes, 200)
    pool = build_pool(DRIVER, NODE, inv.devices(), taints=True)
    first = plan(pool, [])
    assert first.generation == 0
    assert (len(first.create), first.update, first.delete) == (2, (), ())
    stored = _stored(first.create)
    assert plan(pool, stored) == Plan(0)

    (host_nodes / "fuse0").unlink()  # unhealthy: tainted, so its chunk holds at most 64
    refresh(inv)
    second = plan(build_pool(DRIVER, NODE, inv.devices(), taints=True), stored)
    assert second.generation == 1
    assert [o["metadata"]["name"] for o in second.update] == [slice_name(DRIVER, NODE, i) for i in (0, 1)]
    assert all(o["metadata"]["resourceVersion"] == "1" for o in second.update)
    assert [o["metadata"]["name"] for o in second.create] == [slice_name(DRIVER, NODE, 2)]
    _valid([*second.update, *second.create])

    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse1": str(host_nodes / "fuse1")})  # hot-unplug of 129
    refresh(inv)
    third = plan(
        build_pool(DRIVER, NODE, inv.devices(), taints=True), _stored([*second.update, *second.create])
    )
    assert third.generation == 2
    assert [o["metadata"]["name"] for o in third.delete] == [slice_name(DRIVER, NODE, i) for i in (1, 2)]
    _valid(list(third.update))


def test_older_generations_left_over_are_deleted_and_the_latest_kept_when_it_is_the_pool() -> None:
    """What a write that failed after the new generation was complete leaves (the publisher deletes
    last): readers already see the pool, so nothing else is written."""
    pool = build_pool(DRIVER, NODE, {"a.io/bb=c": ServedDevice(cdi_name="a.io/bb=c")}, taints=True)
    stored = _stored(pool.slices(4))
    stale = _stored(build_pool(DRIVER, NODE, {}, taints=True).slices(3))
    stale[0]["metadata"]["name"] = slice_name(DRIVER, NODE, 1)
    assert plan(pool, [*stored, *stale]) == Plan(4, delete=tuple(stale))


def test_a_latest_generation_that_is_not_the_pool_is_rewritten() -> None:
    pool = build_pool(DRIVER, NODE, {"a.io/bb=c": ServedDevice(cdi_name="a.io/bb=c")}, taints=True)
    [newer] = _stored(build_pool(DRIVER, NODE, {}, taints=True).slices(5))
    newer["metadata"]["name"] = slice_name(DRIVER, NODE, 1)
    older = _stored(pool.slices(4))
    result = plan(pool, [*older, newer])
    assert result.generation == 6
    assert [o["metadata"]["name"] for o in result.update] == [slice_name(DRIVER, NODE, 0)]
    assert result.delete == (newer,)


def test_a_generation_at_the_apis_largest_starts_again_at_zero() -> None:
    """A stored slice at the largest int64 generation: one more is a number the API server refuses,
    and the pool would never be written again."""
    pool = build_pool(DRIVER, NODE, {"a.io/bb=c": ServedDevice(cdi_name="a.io/bb=c")}, taints=True)
    stored = _stored(build_pool(DRIVER, NODE, {}, taints=True).slices(GENERATION_MAX))
    stored[0]["metadata"]["name"] = legacy_slice_name(DRIVER, NODE, 1)  # not a name the pool keeps
    first = plan(pool, stored)
    assert first.generation == 0
    assert [o["spec"]["pool"]["generation"] for o in first.create] == [0]
    assert first.delete == tuple(stored)
    assert plan(pool, _apply(stored, first, 10)).empty


#: Pools of 0, 5, 130 and 300 devices (1, 1, 2 and 3 slices), built once.
POOLS = {
    n: build_pool(
        DRIVER, NODE, {f"a.io/bb=d{i}": ServedDevice(cdi_name=f"a.io/bb=d{i}") for i in range(n)}, taints=True
    )
    for n in (0, 5, 130, 300)
}
#: Each index's name in this release and the earlier one, and a name of neither.
NAMES = [f(DRIVER, NODE, i) for i in range(4) for f in (slice_name, legacy_slice_name)] + ["other"]
STORED = st.dictionaries(
    st.sampled_from(NAMES),
    st.tuples(st.sampled_from(sorted(POOLS)), st.integers(0, 2), st.integers(0, 3)),
    max_size=len(NAMES),
)


def _apply(stored: list[dict[str, Any]], changes: Plan, rv: int) -> list[dict[str, Any]]:
    by_name = {o["metadata"]["name"]: o for o in stored}
    for obj in _stored([*changes.update, *changes.create], rv):
        by_name[obj["metadata"]["name"]] = obj
    for obj in changes.delete:
        del by_name[obj["metadata"]["name"]]
    return list(by_name.values())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(POOLS)), STORED)
def test_one_pass_leaves_the_pool_whole_in_one_generation_and_nothing_to_do(
    size: int, stored: dict[str, tuple[int, int, int]]
) -> None:
    """Whatever is stored (either name of a slice, both, slices of other contents, counts and
    generations, a name of neither), the slices one plan leaves are the pool in one generation,
    and the next plan sends nothing: no pass follows another."""
    pool: Pool = POOLS[size]
    existing = []
    for name, (other, index, generation) in stored.items():
        slices = POOLS[other].slices(generation)
        obj = slices[min(index, len(slices) - 1)]
        existing += _stored([{**obj, "metadata": {"name": name}}])
    after = _apply(existing, plan(pool, existing), 2)
    assert plan(pool, after).empty
    assert len({o["spec"]["pool"]["generation"] for o in after}) == 1
    assert _valid(sorted(after, key=lambda o: str(o["metadata"]["name"])))
    devices = [d["name"] for o in after for d in o["spec"]["devices"]]
    assert sorted(devices) == sorted(e["name"] for chunk in pool.chunks for e in chunk)
