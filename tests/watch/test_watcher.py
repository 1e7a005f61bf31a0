"""The watcher on recorded hosts: fixture edits, configuration edits, a vanished output directory,
failures and retries. (Real uevents: test_hotplug.py; simulated ones: test_umockdev_watch.py.)"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from cdi_plugin.cdi.model import Spec
from cdi_plugin.scan.configfollow import ConfigFollower
from cdi_plugin.scan.watcher import Watcher
from cdi_plugin.store.registry import Stat, file_stat
from cdi_plugin.store.writer import Applied
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import snapshot
from tests.watch.helpers import device_names, replace_file, running, watch_options, write_host

MISC3 = """classes:
  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}
  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}
  - {vendor: cdi-plugin.io, class: kvm, match: {subsystem: misc, kernel: kvm}}
"""
FUSE, TUN, KVM = "cdi-plugin.io-fuse.json", "cdi-plugin.io-tun.json", "cdi-plugin.io-kvm.json"
BINDER = "cdi-plugin.io-binder.json"


def without(*names: str) -> list:  # type: ignore[type-arg]
    return [d for d in WORKSTATION if d.sys_name not in names]


def specs(out: Path) -> set[str]:
    return {p.name for p in out.glob("*.json")} if out.is_dir() else set()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config file in its own directory, host fixture file, output directory)."""
    (tmp_path / "etc").mkdir()
    config = tmp_path / "etc" / "config.yaml"
    config.write_text(MISC3)
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    return config, host, tmp_path / "out"


def test_a_changed_host_rewrites_only_the_changed_spec(
    setup: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    config, host, out = setup
    caplog.set_level(logging.INFO, "cdi_plugin")

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            assert specs(out) == {FUSE, TUN, KVM}
            before = snapshot(out)
            write_host(host, without("tun"))
            await eventually(lambda: not (out / TUN).exists(), "tun's spec removed")
            await watcher.idle()  # the record is written after the removal: the batch is done
            after = snapshot(out)
            assert after[FUSE] == before[FUSE], "untouched: same bytes, same mtime"
            assert after[KVM] == before[KVM]
            write_host(host, WORKSTATION)
            await eventually(lambda: device_names(out / TUN) == {"tun"}, "tun back")

    run(scenario())
    assert any(
        re.fullmatch(
            r"rescanned every class after \d+ events? in \d+ ms: removed cdi-plugin.io-tun.json; "
            r"devices removed: cdi-plugin.io/tun=tun",
            m,
        )
        for m in caplog.messages
    ), caplog.messages
    assert any(
        m.endswith(": wrote cdi-plugin.io-tun.json; devices added: cdi-plugin.io/tun=tun")
        for m in caplog.messages
    )
    assert any(
        m.startswith("initial scan in ") and "3 devices in 3 specs; wrote " in m for m in caplog.messages
    )


def test_configuration_edits_apply_without_a_restart_and_bad_ones_are_ignored(
    setup: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    config, host, out = setup

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            # an editor's save: a new file renamed over the old one
            edited = MISC3.replace(
                "class: kvm, match: {subsystem: misc, kernel: kvm}",
                "class: binder, match: {subsystem: misc, kernel: '*binder*'}",
            )
            replace_file(config, edited)
            await eventually(lambda: specs(out) == {FUSE, TUN, BINDER}, "kvm dropped, binder added")
            assert device_names(out / BINDER) == {"binder", "hwbinder", "vndbinder"}
            # an invalid edit, written in place: logged, the last good classes stay
            await watcher.idle()  # the batch is done, its record written
            before = snapshot(out)
            config.write_text(edited.replace("kernel: tun", "kernel: '[tun'"))
            await eventually(lambda: any(r.levelno == logging.ERROR for r in caplog.records), "error logged")
            write_host(host, without("fuse"))  # a host change is still handled with the good classes
            await eventually(lambda: specs(out) == {TUN, BINDER}, "fuse removed")
            await watcher.idle()
            assert snapshot(out)[TUN] == before[TUN]
            config.write_text(MISC3)  # fixed
            await eventually(lambda: specs(out) == {TUN, KVM}, "kvm back, binder gone")

    run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith(f"{config}: classes[1].match.kernel: invalid 'kernel'")
    assert errors[0].endswith("; keeping the last good configuration")


def test_a_configuration_being_read_does_not_hold_up_the_event_loop(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a changed configuration (its check runs in a child process in ``serve``) happens in
    a worker thread: while it is under way, a host change is still handled."""
    config, host, out = setup
    reading, release = threading.Event(), threading.Event()
    reload = ConfigFollower.reload

    def slow_reload(self: ConfigFollower) -> bool:
        reading.set()
        release.wait(10)
        return reload(self)

    monkeypatch.setattr(ConfigFollower, "reload", slow_reload)

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            replace_file(config, MISC3.replace("class: kvm", "class: kvm2"))
            await eventually(reading.is_set, "the configuration being read")
            write_host(host, without("fuse"))
            await eventually(lambda: specs(out) == {TUN, KVM}, "fuse removed during the reading")
            release.set()
            await eventually(
                lambda: specs(out) == {TUN, "cdi-plugin.io-kvm2.json"}, "the new classes applied"
            )

    try:
        run(scenario())
    finally:
        release.set()


def test_a_configmap_update_swaps_the_data_symlink(tmp_path: Path) -> None:
    """Kubernetes updates a ConfigMap volume by writing a new timestamped directory and renaming a
    ``..data_tmp`` symlink over ``..data``; config.yaml itself is a symlink that never changes."""
    mount = tmp_path / "config"
    (mount / "..v1").mkdir(parents=True)
    (mount / "..v1" / "config.yaml").write_text(MISC3)
    (mount / "..data").symlink_to("..v1")
    (mount / "config.yaml").symlink_to("..data/config.yaml")
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    out = tmp_path / "out"

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, mount / "config.yaml", source=f"fixture:{host}"))
        async with running(watcher):
            assert specs(out) == {FUSE, TUN, KVM}
            (mount / "..v2").mkdir()
            (mount / "..v2" / "config.yaml").write_text(
                MISC3.split("  - {vendor: cdi-plugin.io, class: tun", maxsplit=1)[0]
            )
            (mount / "..data_tmp").symlink_to("..v2")
            (mount / "..data_tmp").rename(mount / "..data")
            shutil.rmtree(mount / "..v1")
            await eventually(lambda: specs(out) == {FUSE}, "only fuse is left")

    run(scenario())


def test_a_link_retargeted_anywhere_along_the_configuration_s_chain_of_links_is_followed(
    tmp_path: Path,
) -> None:
    """``update-alternatives`` style: the configured path is a link to a link in another directory
    (``/etc/alternatives``), which is what is retargeted, to a file in a third directory."""
    for d in ("etc", "alternatives", "v1", "v2"):
        (tmp_path / d).mkdir()
    (tmp_path / "v1" / "config.yaml").write_text(MISC3)
    (tmp_path / "v2" / "config.yaml").write_text(
        MISC3.split("  - {vendor: cdi-plugin.io, class: tun", maxsplit=1)[0]
    )
    current = tmp_path / "alternatives" / "cdi-gen-config"
    current.symlink_to(tmp_path / "v1" / "config.yaml")
    config = tmp_path / "etc" / "config.yaml"
    config.symlink_to("../alternatives/cdi-gen-config")
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    out = tmp_path / "out"

    async def scenario() -> None:
        async with running(Watcher(watch_options(out, config, source=f"fixture:{host}"))):
            assert specs(out) == {FUSE, TUN, KVM}
            (tmp_path / "alternatives" / "new").symlink_to(tmp_path / "v2" / "config.yaml")
            (tmp_path / "alternatives" / "new").rename(current)
            await eventually(lambda: specs(out) == {FUSE}, "the link in the middle retargeted")

    run(scenario())


def test_a_spec_edited_by_hand_is_left_and_said_to_be_stale_once_its_devices_are_gone(
    setup: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    config, host, out = setup
    caplog.set_level(logging.INFO, "cdi_plugin")

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            edited = (out / TUN).read_text() + "\n"
            (out / TUN).write_text(edited)  # in place: no batch
            write_host(host, without("tun"))
            await eventually(lambda: "devices removed: cdi-plugin.io/tun=tun" in caplog.text, "tun removed")
            assert (out / TUN).read_text() == edited

    run(scenario())
    stale = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in stale] == [
        f"{out / TUN}: cdi-plugin.io/tun has no devices now, but this file, edited since cdi-gen wrote it, "
        "is left as it is (runtimes still read it): remove it if its devices are gone"
    ]


def test_a_deleted_spec_or_output_directory_is_written_again(setup: tuple[Path, Path, Path]) -> None:
    config, host, out = setup

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            (out / TUN).unlink()
            await eventually((out / TUN).exists, "tun's spec written again")
            shutil.rmtree(out)
            await eventually(lambda: specs(out) == {FUSE, TUN, KVM}, "the directory and its specs are back")
            record = json.loads((out / ".cdi-gen-owned").read_bytes())
            assert set(record["files"]) == {FUSE, TUN, KVM}
            # a directory re-created empty by someone else is filled again too
            shutil.rmtree(out)
            out.mkdir()
            await eventually(lambda: specs(out) == {FUSE, TUN, KVM}, "filled again")

    run(scenario())


def test_a_failing_rescan_is_logged_once_and_retried_until_it_succeeds(
    setup: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    config, host, out = setup
    caplog.set_level(logging.DEBUG, "cdi_plugin")

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage().startswith("rescan of every class failed")]

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"))
        async with running(watcher):
            (out / TUN).unlink()
            # someone else's spec of the same kind: cdi-gen must not write tun beside it
            foreign = out / "someone-tun.json"
            foreign.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": "cdi-plugin.io/tun", "devices": [
                {"name": "x", "containerEdits": {"env": ["A=1"]}}]}))  # fmt: skip
            write_host(host, without("kvm"))
            await eventually(
                lambda: any(r.levelno == logging.ERROR for r in caplog.records), "failure logged"
            )
            # the other classes follow their devices all the same
            await eventually(lambda: specs(out) == {FUSE, "someone-tun.json"}, "kvm gone, tun not written")
            await eventually(lambda: len(failures()) >= 2, "the retry after 1 s")
            assert failures()[1].levelno == logging.DEBUG, "the same failure again: not logged again"
            foreign.unlink()
            await eventually(lambda: specs(out) == {FUSE, TUN}, "retried and written")

    run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert errors[0].startswith("rescan of every class failed: cdi-plugin.io/tun is already defined by ")
    assert errors[0].endswith("; retrying in 1s")
    assert "rescans succeed again" in caplog.messages


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (CI runs as root)")
def test_glob_only_classes_follow_device_nodes_in_their_directories(tmp_path: Path) -> None:
    """Nodes never announced to udev (nvidia-modprobe's, binderfs') are seen through inotify on the
    directories of the class's devnode globs, including directories created later."""
    dev = tmp_path / "dev"
    dev.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n"
        '  - {vendor: example.com, class: accel, naming: [kernel], match: {devnode: "/dev/accel/node*"}}\n'
        '  - {vendor: example.com, class: bus, naming: [kernel], match: {devnode: "/dev/xbus/*/port*"}}\n'
    )
    out = tmp_path / "out"
    accel, bus = out / "example.com-accel.json", out / "example.com-bus.json"

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, dev_root=str(dev)))
        async with running(watcher):
            assert specs(out) == set()
            (dev / "accel").mkdir()
            os.mknod(dev / "accel" / "node0", 0o20666, os.makedev(1, 3))
            await eventually(lambda: device_names(accel) == {"node0"}, "node0 found")
            os.mknod(dev / "accel" / "node1", 0o20666, os.makedev(1, 5))
            os.mknod(dev / "accel" / "other", 0o20666, os.makedev(1, 7))
            await eventually(lambda: device_names(accel) == {"node0", "node1"}, "node1 found")
            (dev / "accel" / "node0").unlink()
            await eventually(lambda: device_names(accel) == {"node1"}, "node0 gone")
            (dev / "xbus" / "001").mkdir(parents=True)
            os.mknod(dev / "xbus" / "001" / "port1", 0o20666, os.makedev(1, 8))
            await eventually(lambda: device_names(bus) == {"port1"}, "a node in a new wildcard directory")
            shutil.rmtree(dev / "accel")
            await eventually(lambda: not accel.exists(), "accel's spec removed with its directory")
            assert json.loads(bus.read_bytes())["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == (
                "/dev/xbus/001/port1"
            )

    run(scenario())


def test_on_applied_follows_every_write_with_the_specs_written_and_removed(
    setup: tuple[Path, Path, Path],
) -> None:
    config, host, out = setup
    calls: list[tuple[tuple[tuple[Path, str], ...], dict[Path, str | None]]] = []

    def on_applied(applied: Applied, specs: Mapping[Path, Spec | None]) -> None:
        calls.append((applied.done, {p: None if s is None else s.kind for p, s in specs.items()}))

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"), on_applied=on_applied)
        async with running(watcher):
            assert calls == [
                (
                    tuple((out / name, "create") for name in sorted((FUSE, KVM, TUN))),
                    {
                        out / FUSE: "cdi-plugin.io/fuse",
                        out / KVM: "cdi-plugin.io/kvm",
                        out / TUN: "cdi-plugin.io/tun",
                    },
                )
            ]
            write_host(host, without("tun"))
            await eventually(lambda: len(calls) == 2, "the removal applied")
            assert calls[1] == (((out / TUN, "remove"),), {out / TUN: None})

    run(scenario())


def test_on_written_hears_of_each_file_as_soon_as_it_is_in_place(setup: tuple[Path, Path, Path]) -> None:
    """Before its batch ends: the file on disk is the spec handed over, with the stat given."""
    config, host, out = setup
    seen: list[tuple[str, str | None, bool, bool]] = []

    def on_written(path: Path, spec: Spec | None, stat: Stat | None) -> None:
        if spec is None:
            on_disk = not path.exists() and stat is None
        else:
            on_disk = json.loads(path.read_bytes())["kind"] == spec.kind and stat == file_stat(path)
        seen.append((path.name, None if spec is None else spec.kind, watcher.settled(), on_disk))

    watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"), on_written=on_written)

    async def scenario() -> None:
        async with running(watcher):
            assert seen == [
                (FUSE, "cdi-plugin.io/fuse", False, True),
                (KVM, "cdi-plugin.io/kvm", False, True),
                (TUN, "cdi-plugin.io/tun", False, True),
            ]
            write_host(host, without("tun"))
            await eventually(lambda: len(seen) == 4, "the removal placed")
            assert seen[3] == (TUN, None, False, True)

    run(scenario())
