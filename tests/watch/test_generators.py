"""Two watchers with different configurations on one output directory: the full rescan of one
leaves the other's specs in place."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cdi_plugin.scan.watcher import Watcher
from cdi_plugin.scan.watchoptions import WatchOptions
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import WORKSTATION
from tests.watch.helpers import device_names, running, watch_options, write_host

FUSE_TUN = """classes:
  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}
  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}
"""
KVM = """classes:
  - {vendor: cdi-plugin.io, class: kvm, match: {subsystem: misc, kernel: kvm}}
"""


def generators(tmp_path: Path, out: Path) -> Callable[[str], WatchOptions]:
    """The options of watcher "a" (fuse and tun) and "b" (kvm), each with its own configuration
    and recorded host, both writing into ``out``."""
    for name, text in (("a", FUSE_TUN), ("b", KVM)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(text)
        write_host(tmp_path / name / "host.json", WORKSTATION)
    return lambda name: watch_options(
        out, tmp_path / name / "config.yaml", source=f"fixture:{tmp_path / name / 'host.json'}"
    )


def test_a_full_rescan_leaves_the_specs_of_another_configuration(tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = generators(tmp_path, out)
    kvm = out / "cdi-plugin.io-kvm.json"

    async def scenario() -> None:
        async with running(Watcher(options("a"))), running(Watcher(options("b"))):
            # b's first scan, a full one, left a's specs
            assert device_names(out / "cdi-plugin.io-tun.json") == {"tun"}
            assert device_names(kvm) == {"kvm"}
            before = os.stat(kvm)
            # a's host changes: a rescans every class of its own, and removes tun's spec (after
            # kvm's, had it counted kvm's as its own: files are removed in name order)
            write_host(tmp_path / "a" / "host.json", [d for d in WORKSTATION if d.sys_name != "tun"])
            await eventually(lambda: not (out / "cdi-plugin.io-tun.json").exists(), "tun's spec removed")
            after = os.stat(kvm)
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "kvm's untouched"
            assert device_names(out / "cdi-plugin.io-fuse.json") == {"fuse"}

    run(scenario())


def test_a_rescan_that_meets_a_foreign_spec_still_leaves_the_other_configuration_s(tmp_path: Path) -> None:
    """A full rescan refused for one kind (its spec edited by hand) writes the rest of its own
    kinds: those of its classes and of the files it wrote, never another configuration's."""
    out = tmp_path / "out"
    options = generators(tmp_path, out)
    kvm, fuse = out / "cdi-plugin.io-kvm.json", out / "cdi-plugin.io-fuse.json"

    async def scenario() -> None:
        async with running(Watcher(options("a"))), running(Watcher(options("b"))):
            assert device_names(out / "cdi-plugin.io-tun.json") == {"tun"}
            before = os.stat(kvm)
            fuse.write_bytes(fuse.read_bytes().replace(b'"fuse"', b'"mine"'))
            write_host(tmp_path / "a" / "host.json", [d for d in WORKSTATION if d.sys_name != "tun"])
            await eventually(lambda: not (out / "cdi-plugin.io-tun.json").exists(), "tun's spec removed")
            after = os.stat(kvm)
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "kvm's untouched"
            assert device_names(fuse) == {"mine"}, "the edited spec is left as it is"

    run(scenario())


def test_the_specs_of_another_configuration_are_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A watcher's full rescans (here every 0.05 s) warn of another configuration's specs once."""
    out = tmp_path / "out"
    options = generators(tmp_path, out)
    caplog.set_level(logging.DEBUG, "cdi_plugin")

    def rescans() -> int:
        return sum(r.getMessage().startswith("rescanned every class") for r in caplog.records)

    async def scenario() -> None:
        async with running(Watcher(options("a"))):
            pass
        async with running(Watcher(dataclasses.replace(options("b"), resync=0.05))):
            await eventually(lambda: rescans() >= 3, "three full rescans after the first scan")

    run(scenario())
    warned = [r.getMessage() for r in caplog.records if "another configuration" in r.getMessage()]
    assert warned == [
        f"{out}: 2 specs (cdi-plugin.io-fuse.json, cdi-plugin.io-tun.json) were written by another "
        "configuration (kinds cdi-plugin.io/fuse, cdi-plugin.io/tun), which shares no kind with this "
        "one; left in place as another generator's: delete them if no generator uses that "
        "configuration any more"
    ]
    assert device_names(out / "cdi-plugin.io-tun.json") == {"tun"}


def test_each_rescan_removing_a_spec_of_a_configuration_sharing_a_kind_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two generators sharing a kind remove each other's specs: the watcher's log says so at each
    full rescan that removes one (in the same words each time), and not at one that removes none."""
    out = tmp_path / "out"
    options = generators(tmp_path, out)
    (tmp_path / "b" / "config.yaml").write_text(
        KVM + "  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}\n"
    )
    tun = out / "cdi-plugin.io-tun.json"
    caplog.set_level(logging.DEBUG, "cdi_plugin")

    def rescans() -> int:
        return sum(r.getMessage().startswith("rescanned every class") for r in caplog.records)

    def warned() -> list[str]:  # by b, which removes tun's spec (a removes kvm's)
        return [r.getMessage() for r in caplog.records if "spec (cdi-plugin.io-tun.json)" in r.getMessage()]

    async def rescan_b() -> None:
        done = rescans()
        write_host(tmp_path / "b" / "host.json", WORKSTATION)
        await eventually(lambda: rescans() > done, "b's full rescan")

    async def scenario() -> None:
        async with running(Watcher(options("a"))):
            pass
        async with running(Watcher(options("b"))):
            assert not tun.exists()
            assert len(warned()) == 1
            async with running(Watcher(options("a"))):  # a writes tun's spec again
                pass
            assert tun.exists()
            await rescan_b()
            assert not tun.exists()
            assert len(warned()) == 2
            await rescan_b()
            assert len(warned()) == 2, "a rescan that removes nothing says nothing"

    run(scenario())
    assert warned() == 2 * [
        f"{out}: removed 1 spec (cdi-plugin.io-tun.json) written by another configuration (kinds "
        "cdi-plugin.io/fuse, cdi-plugin.io/tun), which shares kind cdi-plugin.io/fuse with this one: "
        "nothing to do if this one replaced it; if another generator still uses it, the two remove "
        "each other's specs at every scan: give each its own kinds or its own output directory"
    ]
