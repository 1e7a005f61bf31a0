"""DirWatch: inotify on directories, including ones that do not exist yet."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from tests.deviceplugin.helpers import run


async def _fires(watch: DirWatch, seen: int, timeout: float = 2.0) -> bool:
    return await watch.pulse.wait_after(seen, timeout)


def test_entries_of_a_directory_and_the_relevance_filter(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with DirWatch(
            [tmp_path], name="t", events=FILES, relevant=lambda d, n: n.endswith(".json")
        ) as w:
            seen = w.pulse.count
            (tmp_path / "ignored.txt").write_text("x")
            assert not await _fires(w, seen, 0.2)
            (tmp_path / "a.json").write_text("{}")
            assert await _fires(w, seen)
            seen = w.pulse.count
            (tmp_path / "tmp").write_text("{}")
            (tmp_path / "tmp").rename(tmp_path / "b.json")
            assert await _fires(w, seen)
            await asyncio.sleep(0.05)
            seen = w.pulse.count
            (tmp_path / "a.json").unlink()
            assert await _fires(w, seen)

    run(scenario())


def test_a_directory_created_later_several_levels_deep(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"

    async def scenario() -> None:
        async with DirWatch([target], name="t") as w:
            seen = w.pulse.count
            target.mkdir(parents=True)
            (target / "node").write_text("")
            assert await _fires(w, seen)
            await asyncio.sleep(0.05)
            seen = w.pulse.count
            (target / "node2").write_text("")
            assert await _fires(w, seen)
            # removed and created again: still followed
            await asyncio.sleep(0.05)
            shutil.rmtree(tmp_path / "a")
            await asyncio.sleep(0.05)
            seen = w.pulse.count
            target.mkdir(parents=True)
            (target / "node3").write_text("")
            assert await _fires(w, seen)
            assert w.targets == frozenset({target})

    run(scenario())


def test_set_dirs_moves_the_watches(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()

    async def scenario() -> None:
        async with DirWatch([one], name="t") as w:
            w.set_dirs([two])
            seen = w.pulse.count
            (one / "x").write_text("")
            assert not await _fires(w, seen, 0.2)
            (two / "x").write_text("")
            assert await _fires(w, seen)

    run(scenario())
