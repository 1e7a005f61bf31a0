"""Atomic replacement: readers see the old file or the new one, and a failure changes nothing."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_plugin.errors import SpecWriteError
from cdi_plugin.store.atomic import NAME_MAX, WRITTEN_NAME_MAX, StagedFile, write_atomic
from tests.store.unprivileged import python_as_nobody, world_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_file_gets_the_data_and_mode_0644_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    old = os.umask(0o077)
    try:
        write_atomic(path, b"data\n")
    finally:
        os.umask(old)
    assert path.read_bytes() == b"data\n"
    assert mode(path) == 0o644
    assert os.listdir(tmp_path) == ["a.json"]


def test_the_longest_name_written_is_the_one_whose_temporary_file_still_fits(tmp_path: Path) -> None:
    assert os.pathconf(tmp_path, "PC_NAME_MAX") == NAME_MAX
    longest = tmp_path / ("a" * WRITTEN_NAME_MAX)
    write_atomic(longest, b"data")
    with pytest.raises(SpecWriteError, match="File name too long"):
        write_atomic(tmp_path / ("b" * (WRITTEN_NAME_MAX + 1)), b"data")
    assert os.listdir(tmp_path) == [longest.name]


def test_replacing_leaves_no_temporary_file_and_swaps_the_inode(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    path.chmod(0o600)
    before = path.stat().st_ino
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_ino != before
    assert mode(path) == 0o644
    assert os.listdir(tmp_path) == ["a.json"]


def test_custom_mode(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomic(path, b"x", mode=0o600)
    assert mode(path) == 0o600


def test_an_open_reader_keeps_seeing_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    with open(path, "rb") as reader:
        write_atomic(path, b"new")
        assert reader.read() == b"old"
    assert path.read_bytes() == b"new"


def test_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "a.json"
    with pytest.raises(SpecWriteError) as caught:
        write_atomic(path, b"x")
    assert str(caught.value) == f"{path}: cannot create a file in {path.parent}: No such file or directory"


def test_failed_rename_removes_the_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.mkdir()
    (target / "keep").write_text("kept")
    with pytest.raises(SpecWriteError) as caught:
        write_atomic(target, b"x")
    assert str(caught.value) == f"{target}: cannot replace: Is a directory"
    assert sorted(os.listdir(tmp_path)) == ["a.json"]
    assert (target / "keep").read_text() == "kept"


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    """A real write failure (file size limit, EFBIG) after the temporary file was created."""
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from cdi_plugin.store.atomic import write_atomic\n"
        "from cdi_plugin.errors import SpecWriteError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
        "try:\n"
        f"    write_atomic(Path({str(path)!r}), b'x' * 1048576)\n"
        "except SpecWriteError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == f"{path}: cannot write: File too large\n"
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.json"]


@pytest.mark.root
def test_read_only_directory_keeps_the_old_file() -> None:
    with world_dir() as d:
        path = d / "a.json"
        path.write_bytes(b"old")
        done = python_as_nobody(
            "import sys\n"
            "from pathlib import Path\n"
            "from cdi_plugin.store.atomic import write_atomic\n"
            "from cdi_plugin.errors import SpecWriteError\n"
            "try:\n"
            f"    write_atomic(Path({str(path)!r}), b'new')\n"
            "except SpecWriteError as exc:\n"
            "    print(exc)\n"
            "    sys.exit(3)\n"
        )
        assert done.returncode == 3, done.stderr
        assert done.stdout == f"{path}: cannot create a file in {d}: Permission denied\n"
        assert path.read_bytes() == b"old"
        assert os.listdir(d) == ["a.json"]


def test_create_gives_the_name_only_where_there_is_none(tmp_path: Path) -> None:
    path = tmp_path / "state"
    first = StagedFile(path, b"first", 0o600)
    assert first.create()
    assert (path.read_bytes(), path.stat().st_ino) == (b"first", first.info.st_ino)
    assert path.stat().st_nlink == 1  # the temporary name is gone
    assert not StagedFile(path, b"second", 0o600).create()
    assert path.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["state"]
