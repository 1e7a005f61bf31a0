"""The watched configuration: valid edits replace the classes, bad ones are logged and ignored."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import Discovery, Query, StaticSource
from cdi_plugin.errors import ConfigError
from cdi_plugin.generate.config import DEFAULT_CONFIG_NAME
from cdi_plugin.scan.configfollow import ConfigFollower
from cdi_plugin.scan.watcher import Watcher
from tests.watch.helpers import replace_file, running, watch_options

FUSE = "classes:\n  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}\n"
TUN = "  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}\n"


def kinds(follower: ConfigFollower) -> list[str]:
    return [c.kind for c in follower.classes]


def test_valid_edits_replace_the_classes_and_say_what_changed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(FUSE)
    follower = ConfigFollower(config)
    follower.load()
    assert kinds(follower) == ["cdi-plugin.io/fuse"]
    assert not follower.reload(), "nothing changed"
    caplog.set_level(logging.INFO, "cdi_plugin")
    replace_file(config, FUSE + TUN)
    assert follower.reload()
    assert kinds(follower) == ["cdi-plugin.io/fuse", "cdi-plugin.io/tun"]
    assert f"{config}: reloaded, 2 device classes (added cdi-plugin.io/tun); rescanning" in caplog.messages
    replace_file(config, "# a comment\n" + FUSE + TUN)
    assert not follower.reload(), "same classes"
    assert f"{config}: reloaded; the device classes did not change" in caplog.messages
    replace_file(config, "plugin: {}\n")
    assert follower.reload(), "no classes section: the embedded default"
    assert follower.source == DEFAULT_CONFIG_NAME
    assert "cdi-plugin.io/binder" in kinds(follower)


def test_an_invalid_edit_is_logged_once_and_the_last_good_classes_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(FUSE)
    follower = ConfigFollower(config)
    follower.load()
    good = follower.classes
    bad = FUSE.replace("kernel: fuse", "kernel: 'fu[se'")
    replace_file(config, bad)
    assert not follower.reload()
    assert not follower.reload(), "the same bad bytes again"
    assert follower.classes is good
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].getMessage().startswith(f"{config}: classes[0].match.kernel: invalid 'kernel'")
    assert errors[0].getMessage().endswith("; keeping the last good configuration")
    # a rule only the class parser knows (the same kind twice) is refused the same way
    replace_file(config, FUSE + FUSE.removeprefix("classes:\n"))
    assert not follower.reload()
    assert "kind cdi-plugin.io/fuse is already defined by classes[0]" in caplog.messages[-1]
    config.unlink()
    assert not follower.reload()
    assert caplog.messages[-1] == f"{config}: no such file or directory; keeping the last good configuration"
    assert follower.classes is good
    config.write_text(FUSE + TUN)
    assert follower.reload(), "a good file again"
    assert kinds(follower) == ["cdi-plugin.io/fuse", "cdi-plugin.io/tun"]


def test_a_bad_file_at_start_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("classes: [{vendor: x}]\n")
    with pytest.raises(ConfigError, match=r"config.yaml: classes\[0\]"):
        ConfigFollower(config).load()


def test_a_changed_plugin_section_is_reported_when_the_plugin_uses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(FUSE + "plugin: {replicas: 1}\n")
    follower = ConfigFollower(config, plugin_section_used=True)
    follower.load()
    caplog.set_level(logging.INFO, "cdi_plugin")
    replace_file(config, FUSE + "plugin: {replicas: 2}\n")
    assert not follower.reload()
    assert caplog.messages == [
        f"{config}: the 'plugin' section changed; cdi-plugin serve applies it when it starts again",
        f"{config}: reloaded; the device classes did not change",
    ]


def test_the_directories_watched_include_a_symlink_target(tmp_path: Path) -> None:
    """A ConfigMap mounts config.yaml -> ..data/config.yaml, ..data -> ..2024_01_01_00_00_00.1."""
    (tmp_path / "..2024_1").mkdir()
    (tmp_path / "..2024_1" / "config.yaml").write_text(FUSE)
    (tmp_path / "..data").symlink_to("..2024_1")
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    follower = ConfigFollower(tmp_path / "config.yaml")
    follower.load()
    assert follower.dirs() == {tmp_path, tmp_path / "..2024_1"}
    assert ConfigFollower(None).dirs() == frozenset()


HOOKED = FUSE.replace(
    "kernel: fuse}}", "kernel: fuse}, edits: {hooks: [{hookName: createContainer, path: /usr/bin/true}]}}"
)
MOUNTED = FUSE.replace(
    "kernel: fuse}}", "kernel: fuse}, classEdits: {mounts: [{hostPath: /srv, containerPath: /srv}]}}"
)


@pytest.mark.parametrize(("text", "key"), [(HOOKED, "edits.hooks"), (MOUNTED, "classEdits.mounts")])
def test_hooks_and_mounts_need_the_host_side_flag(tmp_path: Path, text: str, key: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    refusing = ConfigFollower(config, allow_hooks_and_mounts=False)
    with pytest.raises(ConfigError) as caught:
        refusing.load()
    assert str(caught.value).startswith(f"{config}: classes[0].{key}: hooks and mounts run as root")
    assert "--allow-hooks-and-mounts" in str(caught.value)
    allowing = ConfigFollower(config, allow_hooks_and_mounts=True)
    allowing.load()
    assert kinds(allowing) == ["cdi-plugin.io/fuse"]


def test_an_edit_adding_a_hook_is_refused_live_and_the_last_good_classes_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(FUSE)
    follower = ConfigFollower(config, allow_hooks_and_mounts=False)
    follower.load()
    good = follower.classes
    replace_file(config, HOOKED)
    assert not follower.reload()
    assert follower.classes is good
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "classes[0].edits.hooks: hooks and mounts run as root" in error
    assert error.endswith("; keeping the last good configuration")


def test_an_edit_naming_an_exclusive_kind_for_both_apis_is_refused_and_the_last_good_one_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from cdi_plugin.deviceplugin.settings import build

    config = tmp_path / "config.yaml"
    config.write_text(FUSE + 'plugin: {resources: {"cdi-plugin.io/fuse": {api: dra}}}\n')
    follower = ConfigFollower(config, plugin_section_used=True, check_plugin=build)
    follower.load()
    good = follower.classes
    replace_file(config, FUSE + TUN + 'plugin: {resources: {"cdi-plugin.io/fuse": {api: both}}}\n')
    assert not follower.reload()
    assert follower.classes is good  # the whole edit is refused, its new class too
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert error.startswith(
        f"{config}: plugin.resources.cdi-plugin.io/fuse.api: both, but kind cdi-plugin.io/fuse is exclusive"
    )
    assert error.endswith("; keeping the last good configuration")
    shared = 'plugin: {resources: {"cdi-plugin.io/fuse": {api: both, replicas: 4}}}\n'
    replace_file(config, FUSE + TUN + shared)
    assert follower.reload(), "a shared kind may be served both ways"
    assert kinds(follower) == ["cdi-plugin.io/fuse", "cdi-plugin.io/tun"]


def test_the_runtimes_of_the_file_join_the_given_ones_and_an_edit_changing_them_rescans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    config = tmp_path / "config.yaml"
    config.write_text(FUSE)
    follower = ConfigFollower(config, runtimes=("cri-o",), fmt="yaml")
    follower.load()
    assert follower.runtimes == ("cri-o",)
    replace_file(config, "runtimes: [podman-4, cri-o]\n" + FUSE)
    assert follower.reload(), "the same classes, for other runtimes: rescan"
    assert follower.runtimes == ("cri-o", "podman-4")
    assert f"{config}: reloaded; the specs are now for cri-o, podman-4; rescanning" in caplog.messages
    # iSulad reads no YAML file, which is what this follower writes: refused, the last good stays
    replace_file(config, "runtimes: [isulad]\n" + FUSE)
    assert not follower.reload()
    assert follower.runtimes == ("cri-o", "podman-4")
    assert caplog.messages[-1] == (
        f"{config}: runtimes: isulad (iSulad 2.1.6) reads only .json files, and the specs are written as "
        "yaml; keeping the last good configuration"
    )
    with pytest.raises(ConfigError, match=r"^--runtime: isulad \(iSulad 2.1.6\) reads only .json files"):
        ConfigFollower(None, runtimes=("isulad",), fmt="yaml").load()


def test_the_watcher_writes_for_the_given_and_the_configured_runtimes(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    host.write_text(dumps([]))
    config = tmp_path / "config.yaml"
    config.write_text("runtimes: [isulad]\n" + FUSE)
    options = watch_options(tmp_path / "out", config, source=f"fixture:{host}")
    scan = dataclasses.replace(options.scan, runtimes=("podman-4",), max_version="1.1.0")
    watcher = Watcher(dataclasses.replace(options, scan=scan))
    assert watcher.work.options.runtimes == ("podman-4", "isulad")
    # a device update (no rescan) may raise a spec's cdiVersion only as far as all of them read
    assert watcher.work.options.version_ceiling() == "0.5.0"


class Holding(StaticSource):
    """A source whose enumerations, once :attr:`hold` is set, wait in their thread for
    :attr:`release`; each notes the scan options of the watcher's batch as it starts and ends."""

    def __init__(self) -> None:
        super().__init__([])
        self.watcher: Watcher | None = None
        self.hold = False
        self.held, self.release = threading.Event(), threading.Event()
        self.noted: list[tuple[str, ...]] = []
        self.enough = threading.Event()

    def _note(self) -> None:
        assert self.watcher is not None
        self.noted.append(self.watcher.work.options.runtimes)
        if len(self.noted) >= 3:
            self.enough.set()

    def discover(self, query: Query) -> Discovery:
        self._note()
        if self.hold:
            self.hold = False
            self.held.set()
            self.release.wait(60)
            self._note()
        return super().discover(query)


def test_a_batch_running_while_the_configuration_is_reloaded_keeps_the_runtimes_it_started_with(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host.json"
    host.write_text(dumps([]))
    config = tmp_path / "config.yaml"
    config.write_text("runtimes: [cri-o]\n" + FUSE)
    source = Holding()
    watcher = Watcher(watch_options(tmp_path / "out", config, source=f"fixture:{host}"), source=source)
    source.watcher = watcher

    async def run() -> None:
        async with running(watcher):
            source.noted.clear()
            source.hold = True
            replace_file(host, dumps([]) + "\n")  # a rescan, held in its thread
            assert await asyncio.to_thread(source.held.wait, 60)
            targets = watcher.targets
            replace_file(config, "runtimes: [podman-4]\n" + FUSE)
            async with asyncio.timeout(60):
                while watcher.targets is targets:  # reloaded, and the watcher took the new configuration
                    await asyncio.sleep(0.01)
            source.release.set()
            assert await asyncio.to_thread(source.enough.wait, 60)

    asyncio.run(run())
    assert source.noted[:3] == [("cri-o",), ("cri-o",), ("podman-4",)]
