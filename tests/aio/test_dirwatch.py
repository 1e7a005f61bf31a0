"""DirWatch: inotify on directories, including ones that do not exist yet.

inotify reports the events of one instance in order, so once the event of a marker file (in a
directory of its own, watched as well) has been handled, so has every event before it: the tests
synchronise on that, never on time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from tests.deviceplugin.helpers import run
from tests.store.unprivileged import python_as_nobody, world_dir


class Seen:
    """The names the watch asked about; relevant are those in the marker directory and those
    ``wanted`` accepts."""

    def __init__(self, marks: Path, wanted: str = "") -> None:
        self.marks = marks
        self.wanted = wanted
        self.names: list[str] = []
        marks.mkdir()

    def relevant(self, directory: Path, name: str) -> bool:
        self.names.append(name)
        return directory == self.marks or name.endswith(self.wanted)

    async def drained(self, watch: DirWatch) -> None:
        """Until every event that happened before this call has been handled."""
        mark = f"mark{len(self.names)}"
        (self.marks / mark).touch()
        for _ in range(100):
            if mark in self.names:
                return
            await watch.pulse.wait_after(watch.pulse.count)
        raise AssertionError(f"{mark} was not seen")


async def _fires(watch: DirWatch, seen: int) -> bool:
    return await watch.pulse.wait_after(seen, 60.0)


def test_entries_of_a_directory_and_the_relevance_filter(tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    seen_names = Seen(tmp_path / "marks", ".json")

    async def scenario() -> None:
        async with DirWatch([watched, seen_names.marks], name="t", events=FILES,
                            relevant=seen_names.relevant) as w:  # fmt: skip
            seen, asked = w.pulse.count, len(seen_names.names)
            (watched / "ignored.txt").write_text("x")
            await seen_names.drained(w)
            assert "ignored.txt" in seen_names.names[asked:]
            marks = sum(1 for n in seen_names.names[asked:] if n.startswith("mark"))
            assert w.pulse.count - seen == marks, "only the marker fired"
            seen = w.pulse.count
            (watched / "a.json").write_text("{}")
            assert await _fires(w, seen)
            await seen_names.drained(w)
            seen = w.pulse.count
            (watched / "tmp").write_text("{}")
            (watched / "tmp").rename(watched / "b.json")
            assert await _fires(w, seen)
            await seen_names.drained(w)
            seen = w.pulse.count
            (watched / "a.json").unlink()
            assert await _fires(w, seen)

    run(scenario())


def test_a_directory_created_later_several_levels_deep(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    seen_names = Seen(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([target, seen_names.marks], name="t", relevant=seen_names.relevant) as w:
            seen = w.pulse.count
            target.mkdir(parents=True)
            (target / "node").write_text("")
            assert await _fires(w, seen)
            await seen_names.drained(w)
            seen = w.pulse.count
            (target / "node2").write_text("")
            assert await _fires(w, seen)
            # removed and created again: still followed
            shutil.rmtree(tmp_path / "a")
            await seen_names.drained(w)
            seen = w.pulse.count
            target.mkdir(parents=True)
            (target / "node3").write_text("")
            assert await _fires(w, seen)
            assert w.targets == frozenset({target, seen_names.marks})

    run(scenario())


def test_without_following_links_a_link_in_place_of_a_target_is_watched_from_its_parent(
    tmp_path: Path,
) -> None:
    target, elsewhere = tmp_path / "cdi", tmp_path / "elsewhere"
    elsewhere.mkdir()
    target.symlink_to(elsewhere)
    seen_names = Seen(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch(
            [target, seen_names.marks], name="t", relevant=seen_names.relevant, follow_links=False
        ) as w:
            asked = len(seen_names.names)
            (elsewhere / "x").write_text("")  # the link's directory is not watched
            await seen_names.drained(w)
            assert all(n.startswith("mark") for n in seen_names.names[asked:])
            seen = w.pulse.count
            target.unlink()
            target.mkdir()  # a directory in the link's place is
            assert await _fires(w, seen)
            await seen_names.drained(w)
            (target / "y").write_text("")
            await seen_names.drained(w)
            assert "y" in seen_names.names

    run(scenario())


@pytest.mark.root
def test_a_directory_mounted_over_a_target_is_watched_in_its_place(tmp_path: Path) -> None:
    target, other = tmp_path / "target", tmp_path / "other"
    target.mkdir()
    other.mkdir()
    seen_names = Seen(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([target, seen_names.marks], name="t", relevant=seen_names.relevant) as w:
            seen = w.pulse.count
            subprocess.run(["mount", "--bind", str(other), str(target)], check=True)
            try:
                assert await _fires(w, seen)  # no inotify event: the mount table told
                (target / "x").write_text("")  # in the mounted directory
                await seen_names.drained(w)
                assert "x" in seen_names.names
                seen = w.pulse.count
            finally:
                subprocess.run(["umount", str(target)], check=True)
            assert await _fires(w, seen)
            (target / "y").write_text("")
            await seen_names.drained(w)
            assert "y" in seen_names.names

    run(scenario())


def test_set_dirs_moves_the_watches(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    seen_names = Seen(tmp_path / "marks")

    async def scenario() -> None:
        async with DirWatch([one, seen_names.marks], name="t", relevant=seen_names.relevant) as w:
            w.set_dirs([two, seen_names.marks])
            asked = len(seen_names.names)
            (one / "x").write_text("")
            await seen_names.drained(w)
            assert all(n.startswith("mark") for n in seen_names.names[asked:]), "one is not watched"
            seen = w.pulse.count
            (two / "x").write_text("")
            assert await _fires(w, seen)

    run(scenario())


def _watch_as_nobody(target: Path) -> subprocess.CompletedProcess[str]:
    """A DirWatch of ``target`` run as an unprivileged user, its warnings on stderr."""
    return python_as_nobody(
        "import asyncio, logging\n"
        "from pathlib import Path\n"
        "from cdi_plugin.aio.dirwatch import DirWatch\n"
        "logging.basicConfig(format='%(levelname)s %(message)s')\n"
        "async def main():\n"
        f"    async with DirWatch([Path({str(target)!r})], name='plugin dir') as w:\n"
        "        print(sorted(map(str, w.targets)))\n"
        "asyncio.run(main())\n"
    )


@pytest.mark.root
def test_a_directory_that_cannot_be_watched_is_reported_once() -> None:
    """Permission denied is not a directory changing under the watch: one warning, no retries."""
    with world_dir() as d:
        private = d / "private"
        private.mkdir(mode=0o700)
        done = _watch_as_nobody(private)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"[{str(private)!r}]\n"
        assert done.stderr == f"WARNING plugin dir: cannot watch {private}: Permission denied\n"


@pytest.mark.root
def test_a_directory_below_one_that_cannot_be_searched_is_reported_once() -> None:
    """Below a directory the process may not search, a target cannot even be looked at: the
    nearest directory it can see is watched instead, or, when that cannot be watched either, it
    is reported once; never a traceback."""
    with world_dir() as d:
        private = d / "private"
        private.mkdir(mode=0o700)
        (private / "sub").mkdir()
        done = _watch_as_nobody(private / "sub")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"[{str(private / 'sub')!r}]\n"
        assert done.stderr == f"WARNING plugin dir: cannot watch {private}: Permission denied\n"


#: Run in a child: descriptors limited so that the mount table opens and no epoll can be made.
_OUT_OF_DESCRIPTORS = """
import asyncio, logging, os, resource, sys
from pathlib import Path
from cdi_plugin.aio.dirwatch import DirWatch
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s", stream=sys.stderr)
target = Path(sys.argv[1])

async def main():
    before = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # os.listdir's own descriptor is closed again: the inotify and the mount table take the two left
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(n) for n in os.listdir("/proc/self/fd")) + 3, hard))
    async with DirWatch([target], name="spec dirs") as watch:
        seen = watch.pulse.count
        (target / "a.json").touch()
        assert await watch.pulse.wait_after(seen, 60.0)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print(len(os.listdir("/proc/self/fd")) - before)

asyncio.run(main())
"""


def test_out_of_descriptors_for_the_mount_table_the_directories_are_watched_all_the_same(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_DESCRIPTORS, str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n"  # no descriptor left open
    assert done.stderr == "WARNING spec dirs: cannot follow mounts: Too many open files\n"


def test_an_overflow_keeps_nothing_of_the_watches_removed_before_it(tmp_path: Path) -> None:
    """A watch removed while the queue is full: the kernel's IGNORED for it is lost with the
    overflow, so the watch's bookkeeping must go with the overflow, not wait for that event."""
    flooded, kept = tmp_path / "flooded", tmp_path / "kept"
    flooded.mkdir()
    kept.mkdir()
    queue = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    seen = Seen(tmp_path / "marks", ".json")

    async def scenario() -> None:
        async with DirWatch([flooded, kept, seen.marks], name="t", events=FILES, relevant=seen.relevant) as w:
            before = w.pulse.count
            name = flooded / "f"
            for _ in range(queue // 2 + 1):  # a create and a delete each, none read meanwhile
                name.touch()
                name.unlink()
            w.set_dirs([kept, seen.marks])  # removes the flooded directory's watch
            assert await w.pulse.wait_after(before, 60.0), "the overflow was not reported"
            await seen.drained(w)
            assert w._dropped == {}  # nothing outside shows the entry kept
            (kept / "a.json").write_text("{}")
            await seen.drained(w)
            assert "a.json" in seen.names

    run(scenario())
