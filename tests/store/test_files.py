"""Spec files on disk: names, listing, and reading with one-line errors."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from cdi_plugin.cdi.names import Kind
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store import files
from tests.store.unprivileged import python_as_nobody, world_dir


def read_error(path: Path, **kwargs: int) -> SpecLoadError:
    with pytest.raises(SpecLoadError) as caught:
        files.read_spec_bytes(path, **kwargs)
    return caught.value


def test_default_directories_in_priority_order() -> None:
    assert files.DEFAULT_SPEC_DIRS == (files.STATIC_DIR, files.DYNAMIC_DIR)
    assert [str(d) for d in files.DEFAULT_SPEC_DIRS] == ["/etc/cdi", "/var/run/cdi"]


@pytest.mark.parametrize(
    ("value", "dirs"),
    [
        (None, ["/etc/cdi", "/var/run/cdi"]),
        ("", ["/etc/cdi", "/var/run/cdi"]),
        (":", ["/etc/cdi", "/var/run/cdi"]),
        ("/opt/cdi", ["/opt/cdi"]),
        ("/etc/cdi:/var/run/cdi:/opt/cdi", ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]),
        ("/a::/b:/a", ["/b", "/a"]),  # /a at its last place: the CDI library gives it priority 2
    ],
)
def test_spec_dirs_come_from_the_environment(
    value: str | None, dirs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(files.SPEC_DIRS_ENV)
    else:
        monkeypatch.setenv(files.SPEC_DIRS_ENV, value)
    assert [str(d) for d in files.spec_dirs()] == dirs


def test_the_suite_never_sees_the_host_spec_dirs(private_spec_dirs: tuple[Path, Path]) -> None:
    assert files.spec_dirs() == private_spec_dirs
    assert not {"/etc/cdi", "/var/run/cdi", "/run/cdi"} & {str(d) for d in private_spec_dirs}


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("a.json", "json"),
        ("a.yaml", "yaml"),
        ("a.yml", None),
        ("a.JSON", None),
        ("a.json.bak", None),
        ("a", None),
        # the CDI Go library takes the suffix from the last dot on (filepath.Ext): a name that
        # is only a suffix is read too
        (".json", "json"),
        (".yaml", "yaml"),
        (".yml", None),
    ],
)
def test_spec_format(name: str, fmt: str | None) -> None:
    assert files.spec_format(Path(name)) == fmt


def test_spec_file_name() -> None:
    kind = Kind("acme.example", "net.tun")
    assert files.spec_file_name(kind) == "acme.example-net.tun.json"
    assert files.spec_file_name(kind, "yaml") == "acme.example-net.tun.yaml"


def test_read_spec_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"{}")
    assert files.read_spec_bytes(path) == b"{}"


def test_missing_file(tmp_path: Path) -> None:
    err = read_error(tmp_path / "missing.json")
    assert (err.rule, str(err)) == ("not-found", f"{tmp_path / 'missing.json'}: no such file or directory")


def test_directory(tmp_path: Path) -> None:
    err = read_error(tmp_path)
    assert (err.rule, str(err)) == ("not-a-file", f"{tmp_path}: is a directory, not a device spec")


@pytest.mark.timeout(30)
def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "a.json"
    os.mkfifo(fifo)
    err = read_error(fifo)
    assert (err.rule, err.message) == ("not-a-file", "is a FIFO, not a device spec")


def test_a_socket_or_a_device_is_named_for_what_it_is(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock.json"))
        assert read_error(tmp_path / "sock.json").message == "is a socket, not a device spec"
    (tmp_path / "null.json").symlink_to("/dev/null")  # followed, as runtimes follow it
    assert read_error(tmp_path / "null.json").message == "is a character device, not a device spec"


def test_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    err = read_error(tmp_path / "a.json")
    assert (err.rule, err.message) == ("unreadable", "too many levels of symbolic links")


def test_file_larger_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (files.MAX_SPEC_BYTES + 1))
    err = read_error(path)
    assert err.rule == "too-large"
    assert str(err) == f"{path}: the file is larger than 4 MiB, too large for a device spec"


def test_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * files.MAX_SPEC_BYTES)
    assert len(files.read_spec_bytes(path)) == files.MAX_SPEC_BYTES


@pytest.mark.root
def test_unreadable_file_as_an_unprivileged_user() -> None:
    with world_dir() as d:
        path = d / "secret.json"
        path.write_text("{}")
        path.chmod(0o600)
        done = python_as_nobody(
            "import sys\n"
            "from pathlib import Path\n"
            "from cdi_plugin.store.files import read_spec_bytes\n"
            "from cdi_plugin.errors import SpecLoadError\n"
            "try:\n"
            f"    read_spec_bytes(Path({str(path)!r}))\n"
            "except SpecLoadError as exc:\n"
            "    print(exc.rule, exc, sep='|')\n"
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"unreadable|{path}: permission denied\n"


def test_list_spec_files(tmp_path: Path) -> None:
    for name in ["b.yaml", "a.json", "c.yml", "d.txt"]:
        (tmp_path / name).write_text("")
    (tmp_path / "sub.json").mkdir()
    assert [p.name for p in files.list_spec_files(tmp_path)] == ["a.json", "b.yaml"]
    assert files.scan_spec_dir(tmp_path) == files.list_spec_files(tmp_path)


def test_missing_directory_lists_nothing(tmp_path: Path) -> None:
    assert files.list_spec_files(tmp_path / "missing") == []
    assert files.scan_spec_dir(tmp_path / "missing") == []


def test_a_file_in_place_of_a_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cdi"
    path.write_text("")
    with pytest.raises(SpecLoadError) as caught:
        files.scan_spec_dir(path)
    assert (caught.value.rule, str(caught.value)) == (
        "not-a-directory",
        f"{path}: is a regular file, not a directory",
    )
    assert files.list_spec_files(path) == []
    assert f"skipping spec directory {path}: is a regular file, not a directory" in caplog.text


def test_a_directory_that_is_a_symbolic_link_holds_no_specs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The CDI library walks a spec directory without following a link in its place (Go's
    filepath.Walk lstat's it): podman resolves nothing from /etc/cdi when it is a link."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.json").write_text("{}")
    link = tmp_path / "cdi"
    link.symlink_to("real")
    with pytest.raises(SpecLoadError) as caught:
        files.scan_spec_dir(link)
    assert (caught.value.rule, str(caught.value)) == ("not-a-directory", f"{link}: {files.LINKED_DIR}")
    assert files.list_spec_files(link) == []
    assert f"skipping spec directory {link}: is a symbolic link" in caplog.text
    # a link higher up the path is followed, as /var/run is a link to /run
    assert [p.name for p in files.list_spec_files(link / ".." / "real")] == ["a.json"]


@pytest.mark.root
def test_unlistable_directory_as_an_unprivileged_user() -> None:
    with world_dir() as d:
        private = d / "private"
        private.mkdir(mode=0o711)
        (private / "a.json").write_text("{}")
        done = python_as_nobody(
            "import json\n"
            "from pathlib import Path\n"
            "from cdi_plugin.store import files\n"
            "from cdi_plugin.errors import SpecLoadError\n"
            f"d = Path({str(private)!r})\n"
            "out = {'listed': [str(p) for p in files.list_spec_files(d)]}\n"
            "try:\n"
            "    files.scan_spec_dir(d)\n"
            "except SpecLoadError as exc:\n"
            "    out['error'] = [exc.rule, str(exc)]\n"
            "print(json.dumps(out))\n"
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"listed": [], "error": ["unreadable", f"{private}: permission denied"]}
    assert "skipping spec directory" in done.stderr


def test_link_chain_names_every_link_and_the_file_read(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")  # a directory link on the way is resolved
    (tmp_path / "real" / "spec.json").write_text("{}")
    (tmp_path / "real" / "middle.json").symlink_to("spec.json")
    (tmp_path / "first.json").symlink_to("alias/middle.json")
    real = Path(os.path.realpath(tmp_path)) / "real"
    assert files.link_chain(tmp_path / "first.json") == (real / "middle.json", real / "spec.json")
    assert files.link_chain(real / "spec.json") == ()
    (tmp_path / "dangling.json").symlink_to("gone/x.json")
    assert files.link_chain(tmp_path / "dangling.json") == (
        Path(os.path.realpath(tmp_path)) / "gone" / "x.json",
    )
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    assert files.link_chain(tmp_path / "a.json") == tuple(
        Path(os.path.realpath(tmp_path)) / n for n in ("b.json", "a.json")
    )
    (tmp_path / "dir.json").symlink_to("..")
    assert files.link_chain(tmp_path / "dir.json") == ()
