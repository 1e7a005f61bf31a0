"""A change is answered as durable only once its directory is synced: a directory the kernel
cannot sync (an I/O error) fails the write, naming the directory, and leaves nothing open; a
file already renamed into place is then the one read next.

The disk's failure is the boundary simulated here: ``os.fsync`` fails for directories only."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

import pytest

from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError, read_prepared
from cdi_plugin.errors import SpecWriteError
from cdi_plugin.store import slotfile
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.writer import PartialWriteError, apply
from tests.scan.helpers import spec


def failing_dir_fsync(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def card(i: int) -> tuple[PreparedDevice, ...]:
    return (PreparedDevice(("gpu",), "node-a", f"gpu-card{i}", (f"example.com/gpu=card{i}",)),)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_directory_that_cannot_be_synced_fails_the_write_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_dir_fsync(monkeypatch, errno.EIO)
    before = open_fds()
    why = f"^{tmp_path}: cannot make its changes durable .fsync.: Input/output error$"
    with pytest.raises(SpecWriteError, match=why):
        write_atomic(tmp_path / "a.json", b"{}")
    assert open_fds() == before


def test_a_file_system_that_cannot_sync_directories_at_all_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_dir_fsync(monkeypatch, errno.EINVAL)
    write_atomic(tmp_path / "a.json", b"{}")
    assert (tmp_path / "a.json").read_bytes() == b"{}"


def test_a_slot_file_created_or_replaced_fails_until_its_directory_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        failing_dir_fsync(m, errno.EIO)
        with pytest.raises(SpecWriteError, match="cannot make its changes durable"):
            slotfile.write(tmp_path / "created.json", b"{}", None, 4 << 20)
    path = tmp_path / "prepared.json"
    seen = slotfile.write(path, b"{}", None, 4 << 20)
    before = open_fds()
    failing_dir_fsync(monkeypatch, errno.EIO)
    with pytest.raises(SpecWriteError, match="cannot make its changes durable"):
        slotfile.write(path, b"x" * (1 << 17), seen, 4 << 20)  # larger than a slot: replaced whole
    assert open_fds() == before  # the replaced file is not left open


def test_specs_written_into_a_directory_that_cannot_be_synced_are_a_partial_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cdi"
    plan = plan_writes([spec("cdi-plugin.io/fuse", "fuse")], out, spec_dirs=())
    failing_dir_fsync(monkeypatch, errno.EIO)
    with pytest.raises(
        PartialWriteError, match=f"^{out}: cannot make its changes durable .*; already done: "
    ):
        apply(plan)
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_prepared_claims_written_whole_into_a_directory_that_cannot_be_synced_are_read_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failure is answered, yet the file holds the new record: the next call reads it before
    # it writes, and writes on from it.
    path = tmp_path / "prepared.json"
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-0": card(0)}))
    grown = {f"uid-{i}": card(i) for i in range(1, 600)}  # more than a slot: written whole
    with monkeypatch.context() as m:
        failing_dir_fsync(m, errno.EIO)
        with pytest.raises(StateWriteError, match="cannot make its changes durable"):
            asyncio.run(prepared.put(grown))
    assert prepared.reload()
    assert prepared.state == read_prepared(path)
    assert len(prepared.state.claims) == 600
    asyncio.run(prepared.drop(["uid-0"]))
    assert read_prepared(path) == prepared.state
    assert len(prepared.state.claims) == 599
