"""Carrying out a :class:`~cdi_plugin.store.plan.Plan`: stage everything, then commit.

:func:`apply` first checks that nothing changed since the plan, then stages every new file (and
the record) beside its target: a full disk, a read-only file system, a missing permission or a
record path that is a directory fails there, before anything visible changed. The record goes
first: it already owns the new contents and still the old ones (:mod:`cdi_plugin.store.ownership`),
so a scan killed half-way leaves files it still owns and the next scan carries on. Only then are
the files renamed into place and own files removed (and, after a removal, the record replaced once
more). Unchanged files are not touched, so their mtime stays and watchers are not woken.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.errors import SpecWriteError
from cdi_plugin.store.atomic import StagedFile, fsync_dir, remove_stale
from cdi_plugin.store.mkdirs import make_dirs
from cdi_plugin.store.ownership import RECORD_NAME, encode_record, read_record
from cdi_plugin.store.plan import DONE, Action, FileChange, Plan, read_existing
from cdi_plugin.store.registry import file_stat


class PartialWriteError(SpecWriteError):
    """Applying stopped half-way; ``done`` lists the files already written or removed."""

    def __init__(self, message: str, done: Sequence[tuple[Path, Action]]) -> None:
        self.done = tuple(done)
        listed = ", ".join(f"{DONE[a]} {p}" for p, a in done) or "nothing"
        super().__init__(f"{message}; already done: {listed}")


@dataclass(frozen=True, slots=True)
class Applied:
    done: tuple[tuple[Path, Action], ...]
    record_written: bool


def _verify(plan: Plan) -> None:
    record = plan.output_dir / RECORD_NAME
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(record).st_mode):
            raise SpecWriteError(f"{record}: is a directory; nothing was written", nothing_written=True)
    for change in plan.changes:
        if change.old_stat is not None:
            same = file_stat(change.path) == change.old_stat
        else:
            try:
                same = read_existing(change.path) == change.old
            except SpecWriteError:
                same = False
        if not same:
            raise SpecWriteError(
                f"{change.path} changed since the plan was made; nothing was written, run again",
                nothing_written=True,
            )
    if read_record(plan.output_dir) != dict(plan.record_before):
        raise SpecWriteError(
            f"{record} changed since the plan was made; nothing was written, run again", nothing_written=True
        )


def _stage(plan: Plan) -> tuple[list[tuple[FileChange, StagedFile]], list[StagedFile]]:
    """The new files, then the records: the one committed first owns the old and the new
    contents and the files still to remove; a second one, without those, only after removals."""
    staged: list[tuple[FileChange, StagedFile]] = []
    records: list[StagedFile] = []
    try:
        for change in plan.writes:
            assert change.data is not None
            staged.append((change, StagedFile(change.path, change.data)))
        path = plan.output_dir / RECORD_NAME
        first = dict(plan.record_after)
        first.update({c.path.name: plan.record_before[c.path.name] for c in plan.removals})
        records.append(StagedFile(path, encode_record(first)))
        if plan.removals:
            records.append(StagedFile(path, encode_record(plan.record_after)))
    except SpecWriteError:
        _discard([s for _, s in staged], records)
        raise
    return staged, records


def _discard(*groups: Iterable[StagedFile]) -> None:
    for group in groups:
        for s in group:
            s.discard()


def apply(plan: Plan, *, tidy: bool = False, placed: Callable[[FileChange], None] | None = None) -> Applied:
    """Carry out ``plan``; raises :class:`SpecWriteError` (nothing changed) or
    :class:`PartialWriteError` (some files were written: the message lists them).

    ``tidy`` (only while holding :func:`~cdi_plugin.store.dirlock.locked`) first removes the
    temporary files that killed runs left of the record and of the files the plan names.
    ``placed(change)`` is called as soon as a file is renamed into place or removed, before the
    record that follows a removal and before the directory is synced (which only make it durable):
    runtimes see the file from then on.
    """
    directory = plan.output_dir
    if tidy:
        names = {RECORD_NAME, *plan.record_before, *plan.record_after, *(c.path.name for c in plan.changes)}
        remove_stale(directory, names)
    if plan.is_noop:
        return Applied((), False)
    created = make_dirs(directory)
    try:
        _verify(plan)
        staged, records = _stage(plan)
        try:
            records[0].commit()
        except SpecWriteError:
            _discard([s for _, s in staged], records)
            raise
    except SpecWriteError as exc:
        if created:
            with contextlib.suppress(OSError):
                directory.rmdir()
        message = str(exc) if exc.nothing_written else f"{exc}; nothing was changed"
        raise SpecWriteError(message, nothing_written=True) from None
    done: list[tuple[Path, Action]] = []
    try:
        fsync_dir(directory)  # the staged files' names, before any of them replaces a file
        for change, s in staged:
            s.commit()
            done.append((change.path, change.action))
            if placed is not None:
                placed(change)
        for change in plan.removals:
            try:
                os.unlink(change.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise SpecWriteError(f"{change.path}: cannot remove: {exc.strerror or exc}") from None
            done.append((change.path, "remove"))
            if placed is not None:
                placed(change)
        for record in records[1:]:
            record.commit()
        fsync_dir(directory)
    except SpecWriteError as exc:
        _discard([s for _, s in staged], records)
        raise PartialWriteError(str(exc), done) from None  # the first record matches the disk
    return Applied(tuple(done), True)
