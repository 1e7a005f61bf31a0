"""Devices udevd has not set up yet (no database entry): left out where udevd runs, since it
announces them once it is done, and reported as the kernel describes them where it does not.

Each run is a private mount namespace whose /run holds the simulated udev database and, to
simulate a running udevd, its control socket's path (see simhost.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdi_plugin.discovery.model import Discovery, Query
from tests.cli.conftest import CDI_GEN
from tests.discovery.simhost import IS_ROOT, binder_umockdev, discover, umockdev_run

pytestmark = [
    pytest.mark.umockdev,
    pytest.mark.root,
    pytest.mark.skipif(not IS_ROOT, reason="needs root (CI runs as root)"),
]

#: binder0 (10:1000) is set up by udev; binder1 (10:1001) is not yet.
DB = {"c10:1000": b"I:1700000000\nE:ID_SET_UP=yes\n"}
UDEVD_RUNS = "touch /run/udev/control"
CONFIG = """classes:
  - vendor: cdi-plugin.io
    class: binder
    match: {subsystem: misc, kernel: "binder*"}
    naming: [kernel]
"""


@pytest.fixture
def binders(tmp_path: Path) -> Path:
    path = tmp_path / "binders.umockdev"
    path.write_text(binder_umockdev(2))
    return path


def found(binders: Path, prepare: str) -> Discovery:
    result = discover([binders], {"misc": Query(subsystems=frozenset({"misc"}))}, udev_db=DB, prepare=prepare)
    misc = result["misc"]
    assert isinstance(misc, Discovery), misc
    return misc


def test_where_udevd_runs_a_device_it_has_not_set_up_is_left_out(binders: Path) -> None:
    misc = found(binders, UDEVD_RUNS)
    assert [(d.sys_name, d.properties.get("ID_SET_UP")) for d in misc.devices] == [("binder0", "yes")]
    assert [w for w in misc.warnings if "set up" in w] == [
        "misc: 1 device not set up by udev yet (binder1): left out until it is"
    ]


def test_devices_udevd_has_not_set_up_get_one_warning_per_subsystem(tmp_path: Path) -> None:
    """At boot many devices await udevd: one line for them all, counted, naming the first few."""
    path = tmp_path / "binders.umockdev"
    path.write_text(binder_umockdev(6))
    misc = found(path, UDEVD_RUNS)
    assert [d.sys_name for d in misc.devices] == ["binder0"]
    assert [w for w in misc.warnings if "set up" in w] == [
        "misc: 5 devices not set up by udev yet (binder1, binder2, binder3, ...): left out until they are"
    ]


def test_without_udevd_every_device_is_reported(binders: Path) -> None:
    misc = found(binders, "")
    assert [d.sys_name for d in misc.devices] == ["binder0", "binder1"]
    assert not [w for w in misc.warnings if "set up" in w]


def test_scan_writes_only_the_devices_udev_has_set_up_and_says_why(binders: Path, tmp_path: Path) -> None:
    config, out = tmp_path / "config.yaml", tmp_path / "out"
    config.write_text(CONFIG)
    argv = [
        str(CDI_GEN),
        "scan",
        "--config",
        str(config),
        "--output-dir",
        str(out),
        "--spec-dir",
        str(out),
        "--json",
    ]
    done = umockdev_run([binders], argv, udev_db=DB, prepare=UDEVD_RUNS)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    spec = json.loads((out / "cdi-plugin.io-binder.json").read_text())
    assert [d["name"] for d in spec["devices"]] == ["binder0"]
    assert [w for w in report["warnings"] if "set up" in w] == [
        "misc: 1 device not set up by udev yet (binder1): left out until it is"
    ], report


def test_a_device_udevd_keeps_no_entry_for_is_not_waited_for(tmp_path: Path) -> None:
    # udevd writes no database entry for a device without a number, network interface or
    # anything to store: such a device is set up without one, and never announced again.
    path = tmp_path / "platform.umockdev"
    path.write_text("P: /devices/platform/gadget.0\nE: SUBSYSTEM=platform\nE: MODALIAS=platform:gadget\n\n")
    query = {"p": Query(subsystems=frozenset({"platform"}))}
    result = discover([path], query, udev_db=DB, prepare=UDEVD_RUNS)
    platform = result["p"]
    assert isinstance(platform, Discovery), platform
    assert [d.sys_name for d in platform.devices] == ["gadget.0"]
    assert not [w for w in platform.warnings if "set up" in w]
