"""Two watchers with different configurations on one output directory: the full rescan of one
leaves the other's specs in place."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_a_full_rescan_leaves_the_specs_of_another_configuration(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name, text in (("a", FUSE_TUN), ("b", KVM)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(text)
        write_host(tmp_path / name / "host.json", WORKSTATION)
    kvm = out / "cdi-plugin.io-kvm.json"

    def options(name: str) -> WatchOptions:
        return watch_options(
            out, tmp_path / name / "config.yaml", source=f"fixture:{tmp_path / name / 'host.json'}"
        )

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
