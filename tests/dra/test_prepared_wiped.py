"""The prepared-claims file removed (its directory wiped) while two instances share it: the file
each holds open says which claims were written last, and whether it may be written back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError, read_prepared
from cdi_plugin.dra.preparedstate import PreparedState, encode
from cdi_plugin.dra.service import DraService
from cdi_plugin.inventory import SpecInventory
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
        "instance, which holds the claims written last (it writes them again)"
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
