"""Every file either tool reads goes through one reader: regular files only, size-capped, and
never waiting on a FIFO or reading a device. Here: the ownership record and the configuration."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cdi_plugin.errors import ConfigError, SpecLoadError
from cdi_plugin.store import files, ownership
from cdi_plugin.store.configfile import load_config
from cdi_plugin.store.ownership import RECORD_NAME, OwnedFile

pytestmark = pytest.mark.timeout(30)

GOOD = {"a.json": OwnedFile("a.json", "example.com/a", "1" * 64)}


def hostile(path: Path, how: str) -> None:
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "huge":
        with path.open("wb") as fh:
            fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB that take no disk
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("fifo", "is a FIFO, not an ownership record"),
        ("dev-zero", "is a symbolic link, which is not followed"),
        ("huge", "larger than 4 MiB"),
    ],
)
def test_a_record_that_is_not_a_small_regular_file_owns_nothing(
    tmp_path: Path, how: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    hostile(tmp_path / RECORD_NAME, how)
    assert ownership.read_record(tmp_path) == {}
    assert "ignoring unusable ownership record" in caplog.text
    assert reason in caplog.text


def test_a_record_is_never_read_through_a_symbolic_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ownership.write_record(elsewhere, GOOD)
    (tmp_path / RECORD_NAME).symlink_to(elsewhere / RECORD_NAME)
    assert ownership.read_record(elsewhere) == GOOD
    assert ownership.read_record(tmp_path) == {}


def test_a_record_with_an_oversize_number_owns_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = json.loads(ownership.encode_record(GOOD))
    (tmp_path / RECORD_NAME).write_text(json.dumps(body)[:-1] + ', "extra": ' + "9" * 5000 + "}")
    assert ownership.read_record(tmp_path) == {}
    assert "a number 5000 characters long" in caplog.text


@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_a_recorded_spec_file_that_is_not_a_regular_file_is_not_owned(tmp_path: Path, how: str) -> None:
    ownership.write_record(tmp_path, GOOD)
    hostile(tmp_path / "a.json", how)
    assert ownership.owned_kinds([tmp_path]) == set()


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("fifo", "is a FIFO, not a configuration file"),
        ("dev-zero", "is a character device, not a configuration file"),  # links are followed: a
        # ConfigMap mounts its files through symbolic links
        ("huge", "the file is larger than 1 MiB, too large for a configuration file"),
    ],
)
def test_a_config_that_is_not_a_small_regular_file_is_a_one_line_error(
    tmp_path: Path, how: str, reason: str
) -> None:
    path = tmp_path / "config.yaml"
    hostile(path, how)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {reason}"


def test_a_config_read_through_a_symbolic_link_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("plugin: {replicas: 2}\n")
    (tmp_path / "config.yaml").symlink_to("real.yaml")
    assert load_config(tmp_path / "config.yaml") == {"plugin": {"replicas": 2}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "plugin:\n  replicas: " + "9" * 5000 + "\n",
            "plugin.replicas: line 2: a number 5000 characters long",
        ),
        (
            '{"plugin": {"replicas": ' + "9" * 5000 + "}}",
            "plugin.replicas: line 1: a number 5000 characters long",
        ),
        ("a: &x [1]\nb: *x\n", "line 1: YAML anchors and aliases are not allowed (&x)"),
        # what is wrong with a configuration is said of configurations, not of specs
        (
            "plugin: " + "[" * 100 + "]" * 100 + "\n",
            "line 1: nested more than 64 levels deep, which no configuration is",
        ),
        (
            '{"plugin": ' + "[" * 100 + "]" * 100 + "}",
            "line 1: nested more than 64 levels deep, which no configuration is",
        ),
        (" \n", "the file is empty (no configuration data)"),
    ],
)
def test_a_config_too_large_a_number_an_alias_too_deep_or_empty_is_a_one_line_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: {message}")
    assert "\n" not in str(caught.value)


def test_the_reader_refuses_a_file_larger_than_asked_before_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"x" * 100)
    with pytest.raises(SpecLoadError, match="larger than"):
        files.read_file(path, 99, "spec file")
    assert files.read_file(path, 100, "spec file") == b"x" * 100


@pytest.mark.parametrize("follow", [False, True])
@pytest.mark.parametrize("how", ["fifo", "dev-zero-node"])
def test_only_a_regular_file_is_opened(tmp_path: Path, how: str, follow: bool) -> None:
    """Opening a device can act on it: it is refused from its status (through a symbolic link when
    links are followed), which inotify's IN_OPEN shows."""
    from asyncinotify import Inotify, Mask

    path = tmp_path / "state"
    if how == "fifo":
        os.mkfifo(path)
    else:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("")
    with Inotify() as inotify:
        inotify.sync_timeout = 30
        inotify.add_watch(tmp_path, Mask.OPEN)
        link = tmp_path / "link"
        link.symlink_to(path.name)
        name = "link" if follow else "state"
        refused = rf"{name}: is (a FIFO|a character device), not a state file$"
        with pytest.raises(SpecLoadError, match=refused):
            files.read_file(link if follow else path, 1024, "a state file", follow_links=follow)
        sentinel.read_text()  # its IN_OPEN comes after any the read caused
        opened = []
        while not opened or opened[-1] != "sentinel":
            event = inotify.sync_get()
            assert event is not None, opened
            opened.append(str(event.name))
    assert opened == ["sentinel"]
