"""The prepared-claims file removed (its directory wiped) while two instances share it: the file
each holds open says which claims were written last, and whether it may be written back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdi_plugin.dra.prepared import MAX_STATE_BYTES, PreparedClaims, StateWriteError, read_prepared
from cdi_plugin.dra.preparedstate import PreparedState, encode
from cdi_plugin.dra.service import DraService
from cdi_plugin.inventory import SpecInventory
from cdi_plugin.store import slotfile
from cdi_plugin.store.slotfile import MIN_SLOT
from tests.dra.conftest import DRIVER, NODE
from tests.dra.test_health import inventory
from tests.dra.test_kubelet import Claims
from tests.dra.test_prepared import CARD0, CARD1, card

__all__ = ["inventory"]

pytestmark = pytest.mark.timeout(30)

#: Claims whose record does not fit a slot of MIN_SLOT bytes: the file is written whole, anew.
MANY = {f"uid-{i}": card(i) for i in range(10, 10 + MIN_SLOT // 100)}


def replaced(path: Path) -> str:
    return (
        f"{path}: removed, and the file this driver read last was replaced before by another "
        "instance, which holds the claims written last; waiting for the file to be written again"
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    path = tmp_path / "plugins" / "d" / "prepared.json"
    path.parent.mkdir(parents=True)
    return path


def test_claims_prepared_by_the_other_instance_are_known_before_the_next_change(path: Path) -> None:
    new, old = PreparedClaims(path), PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    assert old.reload()
    asyncio.run(new.put({"uid-2": CARD1}))
    path.unlink()
    assert old.reload()
    assert old.state == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
    assert old.state.holders[("node-a", "gpu-card1")] == "uid-2"  # refused to another claim


def test_an_instance_whose_file_was_replaced_before_it_was_removed_waits_for_the_newer_one(
    path: Path,
) -> None:
    new, old = PreparedClaims(path), PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    assert old.reload()
    before = path.stat().st_ino
    asyncio.run(new.put(MANY))  # grown: the file old holds is replaced
    assert path.stat().st_ino != before
    path.unlink()

    assert not old.reload()
    assert old.problem == replaced(path)
    assert not asyncio.run(old.restore())
    assert not path.exists()
    with pytest.raises(StateWriteError):
        asyncio.run(old.put({"uid-2": CARD1}))

    assert asyncio.run(new.restore())
    assert old.unusable() is None
    assert old.state == new.state == read_prepared(path)
    assert old.state.claims.keys() == {"uid-1", *MANY}


def test_a_file_moved_away_is_never_emptied(path: Path) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-1": CARD0}))
    kept = path.with_name("prepared.json.bak")
    path.rename(kept)
    asyncio.run(prepared.put({"uid-2": CARD1}))
    assert read_prepared(kept) == PreparedState({"uid-1": CARD0})
    assert read_prepared(path) == PreparedState({"uid-1": CARD0, "uid-2": CARD1})


def test_a_write_never_replaces_a_file_another_instance_wrote_since(path: Path) -> None:
    """Between an instance's last look at the file and its write, the directory is wiped and the
    other instance writes the file anew: the write fails (the kubelet calls again), and the other
    instance's file stays."""
    one, other = PreparedClaims(path), PreparedClaims(path)
    asyncio.run(one.put({"uid-1": CARD0}))
    assert other.reload()
    path.unlink()
    asyncio.run(other.put({"uid-2": CARD1}))
    with pytest.raises(StateWriteError, match="another file is in its place than the one last read here"):
        asyncio.run(one.put({"uid-3": card(3)}))
    assert read_prepared(path) == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
    assert one.state == PreparedState({"uid-1": CARD0})


def test_a_file_of_an_earlier_release_replaced_then_removed_is_not_written_back_from_memory(
    path: Path,
) -> None:
    """A plain file is never written in place: the one an instance read, replaced by the other's
    slot file, says nothing of the claims written since; that instance waits for the newer file."""
    path.write_bytes(encode(PreparedState({"uid-1": CARD0})))
    new, old = PreparedClaims(path), PreparedClaims(path)
    asyncio.run(new.put({"uid-2": CARD1}))
    path.unlink()

    assert not old.reload()
    assert old.problem == replaced(path)
    assert not asyncio.run(old.restore())
    assert not path.exists()

    assert asyncio.run(new.restore())
    assert old.unusable() is None
    assert old.state == PreparedState({"uid-1": CARD0, "uid-2": CARD1})


def test_an_instance_with_no_claims_of_its_own_writes_back_those_of_the_other(
    path: Path, inventory: SpecInventory
) -> None:
    """The old instance knew no claim (all released) when the new one prepared one; the directory
    wiped, the old one writes that claim back (the new one may never do it: stopped, or killed)."""
    new = PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    asyncio.run(new.drop(["uid-1"]))
    old = PreparedClaims(path)
    asyncio.run(new.put({"uid-2": CARD1}))
    path.unlink()

    service = DraService(DRIVER, NODE, inventory, Claims(), old)
    assert asyncio.run(service.restore())
    assert read_prepared(path) == PreparedState({"uid-2": CARD1})


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """The file cannot be opened for writing (``chattr +i``) until the block ends."""
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_file_read_while_it_could_not_be_opened_for_writing_still_tells_what_was_written_since(
    path: Path,
) -> None:
    new = PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    with immutable(path):
        old = PreparedClaims(path)
        assert old.state == PreparedState({"uid-1": CARD0})
    asyncio.run(new.put({"uid-2": CARD1}))
    path.unlink()

    assert old.reload()
    assert old.state == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
    assert asyncio.run(old.restore())
    assert read_prepared(path) == old.state


def test_a_file_held_read_only_is_still_emptied_when_replaced(path: Path) -> None:
    new = PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    with immutable(path):
        old = PreparedClaims(path)
    asyncio.run(new.put({"uid-2": CARD1}))
    assert old.reload()
    asyncio.run(old.put(MANY))  # grown by the one that held it read-only: new's copy is emptied
    path.unlink()

    assert not new.reload()
    assert new.problem == replaced(path)


def test_a_file_replaced_is_emptied_even_when_linked_elsewhere(path: Path) -> None:
    """A hard link (``ln``) follows every write in place, so it is no backup; left unemptied, the
    file replaced would let the instance holding it write its older claims back after a wipe, and
    forget the claims prepared since."""
    new, old = PreparedClaims(path), PreparedClaims(path)
    asyncio.run(new.put({"uid-1": CARD0}))
    assert old.reload()
    link = path.with_name("prepared.json.link")
    os.link(path, link)
    asyncio.run(new.put(MANY))  # grown: the file both instances held is replaced
    path.unlink()

    assert not old.reload()
    assert old.problem == replaced(path)
    assert not asyncio.run(old.restore())
    assert not path.exists()
    assert link.stat().st_size == 0
    assert asyncio.run(new.restore())
    assert old.unusable() is None
    assert old.state.claims.keys() == {"uid-1", *MANY}


WRITER = """
import asyncio, sys
from pathlib import Path
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.preparedstate import decode
prepared = PreparedClaims(Path(sys.argv[1]))
for line in sys.stdin:
    asyncio.run(prepared.put(decode(line.encode(), "stdin").claims))
    print("written", flush=True)
"""


@contextlib.contextmanager
def instance(path: Path) -> Iterator[Callable[[PreparedState], None]]:
    """Another instance, in a process of its own, which keeps the claims it is given; killed
    (SIGKILL) when the block ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None
    assert child.stdout is not None

    def put(state: PreparedState) -> None:
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(encode(state).decode())
        child.stdin.flush()
        assert child.stdout.readline() == "written\n"

    try:
        yield put
    finally:
        child.kill()
        child.wait(30)
        child.stdin.close()
        child.stdout.close()


def test_an_instance_waiting_for_a_newer_file_takes_the_one_a_restarted_instance_writes(path: Path) -> None:
    """The instance that held the newer record is killed before it writes the file again; the
    one restarted in its place writes record 1 of a new file: the waiting instance takes it, as a
    restart would, but never a copy of a file it read before."""
    old = PreparedClaims(path)
    with instance(path) as put:
        put(PreparedState({"uid-1": CARD0}))
        assert old.reload()
        put(PreparedState(MANY))  # grown: the file old holds is replaced
        grown = path.read_bytes()
    shutil.rmtree(path.parent)  # the directory wiped once the instance holding the record is killed
    assert not old.reload()
    assert old.problem == replaced(path)

    with instance(path) as put:  # restarted: it knows no claim
        put(PreparedState({"uid-2": CARD1}))
        assert old.unusable() is None
        assert old.state == PreparedState({"uid-2": CARD1})
    first = path.read_bytes()
    asyncio.run(old.put({"uid-3": card(3)}))

    path.with_name("copy").write_bytes(grown)  # a file written before the one it read last
    os.replace(path.with_name("copy"), path)
    assert not old.reload()
    assert old.problem == (
        f"{path}: record 2 of a file written before the one this driver last read or "
        "wrote (a copy put back, or another instance's older state?)"
    )
    path.write_bytes(first)  # an earlier record of the file it read last
    assert not old.reload()
    assert old.problem == (
        f"{path}: record 1, older than record 2 this driver last read or wrote (a copy put back, or "
        "another instance's older state?)"
    )
    assert old.state == PreparedState({"uid-2": CARD1, "uid-3": card(3)})


def test_the_file_held_with_another_record_of_the_number_last_seen_is_not_taken_nor_ignored(
    path: Path,
) -> None:
    """Another instance wrote a record of the number this one wrote last into the same file (the
    lock did not exclude it: both wiped): neither record is known to be the newest, so the file
    removed is refused until a file is written anew."""
    one = PreparedClaims(path)
    asyncio.run(one.put({"uid-1": CARD0}))
    other = slotfile.read(path, MAX_STATE_BYTES, "state").seen
    asyncio.run(one.put({"uid-2": CARD1}))  # record 2, in slot 1
    slotfile.write(path, encode(PreparedState({"uid-1": CARD0, "uid-3": card(3)})), other, MAX_STATE_BYTES)
    path.unlink()

    assert not one.reload()
    assert one.problem == (
        f"{path}: removed, holding another record 2 than the one this driver last read or wrote (two "
        "instances wrote it without excluding each other, or a copy was put back?)"
    )
    assert not asyncio.run(one.restore())
    assert not path.exists()

    restarted = PreparedClaims(path)
    asyncio.run(restarted.put({"uid-4": card(4)}))
    assert one.unusable() is None
    assert one.state == PreparedState({"uid-4": card(4)})


def test_an_instance_waiting_after_reading_a_file_of_an_earlier_release_takes_one_written_since(
    path: Path,
) -> None:
    """The file read last was written by a release before origins (and only in place since): the
    file an instance restarted since writes, which has one, is taken whatever its record number,
    as a restart would take it."""
    record = slotfile.record_slot(5, encode(PreparedState({"uid-1": CARD0})), MIN_SLOT)
    path.write_bytes(record + bytes(2 * MIN_SLOT - len(record)))  # record 5, no origin
    old = PreparedClaims(path)
    with instance(path) as put:
        put(PreparedState(MANY))  # grown: the file old holds is replaced
    shutil.rmtree(path.parent)
    assert not old.reload()
    assert old.problem == replaced(path)

    with instance(path) as put:  # restarted: it knows no claim
        put(PreparedState({"uid-2": CARD1}))
        assert old.unusable() is None
        assert old.state == PreparedState({"uid-2": CARD1})


def test_the_directory_written_again_after_a_wipe_is_durable_in_its_parent(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet removed the driver's directory: written again, the file is answered only once
    the directories made for it are fsynced in theirs (else a power loss may take the directory
    back, and the claims with it)."""
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-1": CARD0}))
    shutil.rmtree(path.parent.parent)  # <plugins> too
    synced: list[str] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        fsync(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", recorded)
    assert asyncio.run(prepared.restore())
    assert {str(path.parent.parent.parent), str(path.parent.parent), str(path.parent)} <= set(synced)
