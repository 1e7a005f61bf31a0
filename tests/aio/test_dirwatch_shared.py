"""DirWatch with two watched paths on one directory: the kernel gives them one inotify watch.

Synchronised as in test_dirwatch.py: once the marker file's event has been handled, so has every
event before it.
"""

from __future__ import annotations

from pathlib import Path

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from tests.aio.test_dirwatch import Seen
from tests.deviceplugin.helpers import run


class SeenIn(Seen):
    """Also which watched path each name was told for."""

    def __init__(self, marks: Path) -> None:
        super().__init__(marks)
        self.told: list[tuple[Path, str]] = []

    def relevant(self, directory: Path, name: str) -> bool:
        self.told.append((directory, name))
        return super().relevant(directory, name)


def test_an_event_is_told_for_every_path_of_the_directory(tmp_path: Path) -> None:
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    seen = SeenIn(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([real, link, seen.marks], name="t", events=FILES, relevant=seen.relevant) as w:
            (real / "a.json").write_text("{}")
            await seen.drained(w)
            assert (real, "a.json") in seen.told
            assert (link, "a.json") in seen.told

    run(scenario())


def test_dropping_one_path_keeps_the_watch_of_the_other(tmp_path: Path) -> None:
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    seen = SeenIn(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([real, link, seen.marks], name="t", events=FILES, relevant=seen.relevant) as w:
            w.set_dirs([real, seen.marks])
            (real / "b.json").write_text("{}")  # before the watch could have been put back
            await seen.drained(w)
            assert (real, "b.json") in seen.told
            (real / "c.json").write_text("{}")
            await seen.drained(w)
            assert (real, "c.json") in seen.told
            assert (link, "c.json") not in seen.told, "the link is no longer watched"

    run(scenario())


def test_a_path_watched_for_less_does_not_narrow_the_others_watch(tmp_path: Path) -> None:
    """``link/missing`` is watched through ``link`` for directories appearing only: that must not
    replace what ``real`` asked for (here deletions and files rewritten in place)."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    (real / "old.json").write_text("{}")
    (real / "kept.json").write_text("{}")
    seen = SeenIn(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([real, seen.marks], name="t", events=FILES, relevant=seen.relevant) as w:
            w.set_dirs([real, link / "missing", seen.marks])
            (real / "old.json").unlink()
            with (real / "kept.json").open("w") as f:
                f.write('{"x": 1}')
            await seen.drained(w)
            assert (real, "old.json") in seen.told
            assert (real, "kept.json") in seen.told
            (link / "missing").mkdir()  # what the narrower watch is for still works
            await seen.drained(w)
            assert link / "missing" in w.targets
            (real / "missing" / "new.json").write_text("{}")
            await seen.drained(w)
            assert (link / "missing", "new.json") in seen.told

    run(scenario())
