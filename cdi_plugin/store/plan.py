"""Planning a scan's writes into a spec directory, before anything is written.

:func:`plan_writes` reads the directory and works out, for each spec, whether its file
(``<vendor>-<class>.json``) is created, changed or unchanged, and which of cdi-gen's own files are
removed because their kind has no devices any more. It validates every spec strictly and refuses
(:class:`ConflictError`) a kind that a foreign spec already defines in any spec directory: a file
cdi-gen did not write, or wrote but someone edited since (the ownership record,
:mod:`cdi_plugin.store.ownership`). ``--dry-run`` shows a plan; :func:`cdi_plugin.store.writer.apply`
carries one out.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.names import parse_kind
from cdi_plugin.cdi.validate import check_spec
from cdi_plugin.errors import SpecInvalidError, SpecLoadError, SpecWriteError
from cdi_plugin.store.files import (
    DEFAULT_SPEC_DIRS,
    MAX_SPEC_BYTES,
    is_linked_dir,
    list_spec_files,
    read_spec_bytes,
    spec_file_name,
    spec_format,
)
from cdi_plugin.store.ownership import RECORD_NAME, OwnedFile, digest, read_record, written_by
from cdi_plugin.store.registry import Stat, file_stat

Action = Literal["create", "change", "unchanged", "remove"]

#: How a report names each action once it is done.
DONE: Mapping[Action, str] = {
    "create": "created",
    "change": "changed",
    "unchanged": "unchanged",
    "remove": "removed",
}


#: A refused scan names this many conflicting files, then only how many more there are.
CONFLICTS_SHOWN = 10


class ConflictError(SpecWriteError):
    """A kind cdi-gen would write is already defined by a spec it does not own."""

    def __init__(self, conflicts: Sequence[KindConflict]) -> None:
        self.conflicts = tuple(conflicts)
        first = conflicts[0]
        if len(conflicts) == 1:
            super().__init__(
                f"{first.kind} is already defined by {first.path} ({first.reason}); cdi-gen does not change "
                f"a spec it does not own: remove that file, or pass --force to write {first.kind} anyway"
            )
            return
        listed = "; ".join(f"{c.kind} by {c.path} ({c.reason})" for c in conflicts[:CONFLICTS_SHOWN])
        more = f"; and {len(conflicts) - CONFLICTS_SHOWN} more" if len(conflicts) > CONFLICTS_SHOWN else ""
        kinds = ", ".join(sorted({c.kind for c in conflicts}))
        super().__init__(
            f"specs cdi-gen does not own already define what it would write: {listed}{more}; cdi-gen does "
            f"not change a spec it does not own: remove those files, or pass --force to write {kinds} anyway"
        )


@dataclass(frozen=True, slots=True)
class KindConflict:
    """A kind cdi-gen would write, already defined by a spec file it does not own."""

    kind: str
    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class OtherConfiguration:
    """Files in the output directory that another configuration than the one scanning wrote (see
    :func:`plan_writes`), and the kinds the two share."""

    kinds: frozenset[str]
    paths: tuple[Path, ...]
    shared: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class FileChange:
    path: Path
    kind: str
    action: Action
    data: bytes | None  # the new contents; None when the file is removed
    old: bytes | None  # the contents on disk when planned; None when there is no file
    replaces_foreign: bool = False  # --force: the file at this path was not cdi-gen's
    #: Where ``old`` was not read: the file's stat when planned, which stands for the contents its
    #: writer put there (see :func:`plan_updates`); such a change has no diff to show.
    old_stat: Stat | None = None

    def diff(self) -> str:
        """A unified diff from the file on disk to the new contents ("" when unchanged)."""
        if self.action == "unchanged":
            return ""
        old = (self.old or b"").decode("utf-8", "replace").splitlines(keepends=True)
        new = (self.data or b"").decode("utf-8", "replace").splitlines(keepends=True)
        before = str(self.path) if self.old is not None else "/dev/null"
        after = str(self.path) if self.data is not None else "/dev/null"
        return "".join(difflib.unified_diff(old, new, before, after))


@dataclass(frozen=True, slots=True)
class Plan:
    output_dir: Path
    changes: tuple[FileChange, ...]
    record_before: Mapping[str, OwnedFile] = field(default_factory=dict)
    record_after: Mapping[str, OwnedFile] = field(default_factory=dict)
    overridden: tuple[KindConflict, ...] = ()  # conflicts --force wrote over
    #: Files cdi-gen wrote and someone edited since, of kinds left without a spec: not removed.
    left: tuple[KindConflict, ...] = ()
    #: Files found without an ownership record in the directory, byte-identical to what cdi-gen
    #: writes now: taken as cdi-gen's again.
    adopted: tuple[Path, ...] = ()
    #: A full scan's: the files of each recorded configuration sharing no kind with its own.
    others: tuple[OtherConfiguration, ...] = ()
    #: The files removed of each configuration sharing a kind with the one scanning, of kinds this
    #: one does not have: an earlier form's of it, or another generator's still in use.
    replaced: tuple[OtherConfiguration, ...] = ()

    @property
    def record_changed(self) -> bool:
        return dict(self.record_before) != dict(self.record_after)

    @property
    def writes(self) -> tuple[FileChange, ...]:
        return tuple(c for c in self.changes if c.action in {"create", "change"})

    @property
    def removals(self) -> tuple[FileChange, ...]:
        return tuple(c for c in self.changes if c.action == "remove")

    @property
    def is_noop(self) -> bool:
        return not self.writes and not self.removals and not self.record_changed


# -- planning ----------------------------------------------------------------------------------


def read_existing(path: Path) -> bytes | None:
    """The file's bytes, None if there is none; any other problem is a :class:`SpecWriteError`."""
    if not os.path.lexists(path):
        return None
    try:
        return read_spec_bytes(path)
    except SpecLoadError as exc:
        raise SpecWriteError(f"{path}: cannot read the existing file: {exc.message}") from None


def encode_checked(spec: Spec, path: Path, fmt: codec.Format, max_version: str | None) -> bytes:
    """The file contents of ``spec``, validated strictly; raises :class:`SpecInvalidError`."""
    errors = [p for p in check_spec(spec, max_version).problems if p.is_error]
    if errors:
        first = errors[0]
        hint = f" ({first.hint})" if first.hint else ""
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecInvalidError(
            f"{path}: {first.pointer or '/'}: {first.message}{hint}{more}; nothing was written"
        )
    data = codec.encode(spec, fmt)
    check_size(path, data)
    return data


def check_size(path: Path, data: bytes) -> None:
    """Refuse (:class:`SpecInvalidError`) a spec too large for cdi-gen's own readers: the next scan
    could not read the file it replaces, nor ``validate`` and the inventory the spec."""
    if len(data) > MAX_SPEC_BYTES:
        raise SpecInvalidError(
            f"{path}: the spec would be {len(data)} bytes, more than the {MAX_SPEC_BYTES >> 20} MiB "
            "cdi-gen reads back; nothing was written (split the class, or give it shorter edits)",
            nothing_written=True,
        )


def _spec_kind(path: Path) -> str | None:
    """The kind a spec file defines, as a runtime would read it; None if it cannot be read.

    Runtimes match keys to fields case-insensitively ("Kind" is the kind), in sorted order (the
    CDI library reads YAML into a map, written out as JSON with sorted keys), the last one winning.
    """
    try:
        obj, _ = codec.parse(read_spec_bytes(path), str(path), spec_format(path) or "json")
    except SpecLoadError:
        return None
    kinds = [v for k, v in sorted(obj.items()) if k.lower() == "kind"] if isinstance(obj, dict) else []
    return kinds[-1] if kinds and isinstance(kinds[-1], str) else None


def _unique_dirs(dirs: Iterable[Path]) -> list[Path]:
    """``dirs`` without repeats: two names of one directory are one, but a symbolic link is not
    the directory it points to (runtimes read nothing from the link, which must not hide it)."""
    seen: set[Path] = set()
    out = []
    for d in dirs:
        key = Path(os.path.realpath(d.parent)) / d.name if is_linked_dir(d) else Path(os.path.realpath(d))
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _owned_now(output_dir: Path, record: Mapping[str, OwnedFile]) -> dict[str, OwnedFile]:
    """Record entries whose file is still exactly what cdi-gen wrote (a regular file: a symbolic
    link in its place, even to the same bytes, was put there by someone else)."""
    owned = {}
    for name, entry in record.items():
        if os.path.islink(output_dir / name):
            continue
        try:
            data = read_spec_bytes(output_dir / name)
        except SpecLoadError:
            continue
        if entry.owns(digest(data)):
            owned[name] = entry
    return owned


def _foreign_definitions(
    kinds: set[str], output_dir: Path, skip: set[str], spec_dirs: Sequence[Path]
) -> list[KindConflict]:
    """Spec files cdi-gen does not own (``skip`` names the output directory's files already
    handled) that define one of ``kinds``."""
    out = []
    out_key = Path(os.path.realpath(output_dir))
    # the files of an output directory that is a link are where cdi-gen writes, through it
    for directory in _unique_dirs([out_key if is_linked_dir(output_dir) else output_dir, *spec_dirs]):
        here = Path(os.path.realpath(directory)) == out_key
        record = read_record(directory)
        mine = set() if here else set(_owned_now(directory, record))
        for path in list_spec_files(directory):
            if here and path.name in skip:
                continue
            kind = _spec_kind(path)
            if kind not in kinds:
                continue
            if path.name in mine:
                reason = "written by cdi-gen into another output directory"
            elif path.name in record:
                reason = "edited since cdi-gen wrote it"
            else:
                reason = "not written by cdi-gen"
            out.append(KindConflict(kind, path, reason))
    return out


def plan_writes(
    specs: Sequence[Spec],
    output_dir: Path,
    *,
    fmt: codec.Format = "json",
    spec_dirs: Sequence[Path] = DEFAULT_SPEC_DIRS,
    force: bool = False,
    max_version: str | None = None,
    kinds: Collection[str] | None = None,
    config: Collection[str] | None = None,
) -> Plan:
    """Everything :func:`apply` would do to make ``output_dir`` hold exactly ``specs``.

    cdi-gen's own files in ``output_dir`` whose kind is not among ``specs`` are removed. With
    ``kinds``, the plan is limited to those kinds (every spec must be of one of them): files and
    record entries of other kinds stay as they are, so a rescan of some device classes leaves the
    specs of the others alone. ``config`` is the kinds of every class of the configuration
    scanning: the files it writes are recorded as its own, and those another configuration wrote
    (:func:`~cdi_plugin.store.ownership.written_by`) are left as they are too. Without a record in
    the directory, a file byte-identical to a spec of ``specs`` is taken as cdi-gen's again
    (``Plan.adopted``): nobody else's bytes are ever taken over. A full scan (without ``kinds``)
    names the files of each other configuration in ``Plan.others``: a generator whose configuration
    changed every kind at once left them too; ``Plan.replaced`` names those removed. Raises
    :class:`SpecWriteError` when a spec is invalid or a file cannot be read, and
    :class:`ConflictError` when a foreign spec in ``output_dir`` or ``spec_dirs`` defines a kind of
    ``specs`` (unless ``force``).
    """
    wanted: dict[str, tuple[str, bytes]] = {}
    for spec in specs:
        if kinds is not None and spec.kind not in kinds:
            raise ValueError(f"a spec of kind {spec.kind} in a plan limited to other kinds")
        name = spec_file_name(parse_kind(spec.kind), fmt)
        if name in wanted:
            raise ValueError(f"two specs of kind {spec.kind}")
        wanted[name] = (spec.kind, encode_checked(spec, output_dir / name, fmt, max_version))
    record = read_record(output_dir)
    # record entries outside ``kinds``, or another configuration's: left exactly as they are
    kept = {
        name: entry
        for name, entry in record.items()
        if name not in wanted
        and (
            entry.kind not in kinds
            if kinds is not None
            else config is not None and not written_by(entry, config)
        )
    }
    owned = {name: entry for name, entry in _owned_now(output_dir, record).items() if name not in kept}
    unrecorded = not os.path.lexists(output_dir / RECORD_NAME)
    adopted: list[Path] = []
    conflicts: list[KindConflict] = []
    changes: list[FileChange] = []
    for name, (kind, data) in sorted(wanted.items()):
        path = output_dir / name
        old = read_existing(path)
        if old is None:
            changes.append(FileChange(path, kind, "create", data, None))
        elif unrecorded and old == data and not os.path.islink(path):
            adopted.append(path)
            owned[name] = OwnedFile(name, kind, digest(data))
            changes.append(FileChange(path, kind, "unchanged", data, old))
        elif name in owned:
            changes.append(FileChange(path, kind, "unchanged" if old == data else "change", data, old))
        else:
            reason = "edited since cdi-gen wrote it" if name in record else "not written by cdi-gen"
            other = _spec_kind(path)
            if other is not None and other != kind:  # ex.com-x/gpu is ex.com-x-gpu.json too
                raise SpecWriteError(
                    f"{path}: cdi-gen would write {kind} into this file, which defines {other} ({reason}); "
                    "it is not replaced, even with --force: move it away, or give the class another "
                    "vendor or class; nothing was written",
                    nothing_written=True,
                )
            conflicts.append(KindConflict(kind, path, reason))
            changes.append(FileChange(path, kind, "change", data, old, replaces_foreign=True))
    wanted_kinds = {k for k, _ in wanted.values()}
    conflicts += _foreign_definitions(wanted_kinds, output_dir, set(wanted) | set(owned), spec_dirs)
    if conflicts and not force:
        raise ConflictError(conflicts)
    for name, entry in sorted(owned.items()):
        if name not in wanted:
            path = output_dir / name
            changes.append(FileChange(path, entry.kind, "remove", None, read_existing(path)))
    left = tuple(
        KindConflict(entry.kind, output_dir / name, "edited since cdi-gen wrote it")
        for name, entry in sorted(record.items())
        if name not in wanted
        and name not in owned
        and name not in kept
        and entry.kind not in wanted_kinds
        and os.path.lexists(output_dir / name)
    )
    after = dict(kept)
    mark = frozenset(config) if config is not None else None
    replaced = {
        name: entry
        for name, entry in owned.items()
        if name not in wanted and mark is not None and entry.kind not in mark and entry.config != mark
    }
    for change in changes:
        if change.data is not None:
            name = change.path.name
            after[name] = _entry(change, record.get(name), name in owned, mark)
    return Plan(
        output_dir,
        tuple(changes),
        dict(record),
        after,
        tuple(conflicts),
        left,
        tuple(adopted),
        _by_config(output_dir, kept if kinds is None else {}, mark or frozenset()),
        _by_config(output_dir, replaced, mark or frozenset()),
    )


def _by_config(
    output_dir: Path, entries: Mapping[str, OwnedFile], config: frozenset[str]
) -> tuple[OtherConfiguration, ...]:
    """The files of ``entries`` still in ``output_dir``, by the configuration that wrote them
    (what it shares with ``config``); those of no recorded configuration are left out."""
    by_config: dict[frozenset[str], list[Path]] = {}
    for name, entry in sorted(entries.items()):
        if entry.config is not None and os.path.lexists(output_dir / name):
            by_config.setdefault(entry.config, []).append(output_dir / name)
    return tuple(
        OtherConfiguration(kinds, tuple(paths), kinds & config)
        for kinds, paths in sorted(by_config.items(), key=lambda item: sorted(item[0]))
    )


def _entry(
    change: FileChange, before: OwnedFile | None, owned: bool, config: frozenset[str] | None
) -> OwnedFile:
    """The record entry of a file written (or left) as ``change`` says, by ``config`` (None: the
    configuration recorded before); a file of cdi-gen's that changes keeps its old digest as
    ``previous``."""
    assert change.data is not None
    name, new = change.path.name, digest(change.data)
    if config is None and before is not None:
        config = before.config
    if owned and change.old is not None and digest(change.old) != new:
        return OwnedFile(name, change.kind, new, digest(change.old), config)
    previous = before.previous if before is not None and before.sha256 == new else None
    return OwnedFile(name, change.kind, new, previous, config)


def plan_updates(
    output_dir: Path,
    updates: Mapping[str, tuple[str, bytes | None, str]],
    known: Mapping[str, Stat] | None = None,
) -> Plan:
    """A plan that rewrites or removes files of cdi-gen's own without a look at anything else:
    ``updates`` maps a file name to (kind, new contents or None to remove it, the digest of the
    contents expected on disk). The bytes must already be valid specs. ``known`` maps a file name
    to its stat just after the caller wrote those contents: a file still at that stat is taken as
    them, not read (a write, a rename or a removal since changes the stat).

    It reads only the record and those files. It refuses (:class:`SpecWriteError`, naming the file)
    a file that is not exactly what was expected and recorded as cdi-gen's: a full plan
    (:func:`plan_writes`) sorts that out.
    """
    record = read_record(output_dir)
    changes: list[FileChange] = []
    after = dict(record)
    for name, (kind, data, expected) in sorted(updates.items()):
        path = output_dir / name
        stat = (known or {}).get(name)
        old: bytes | None = None
        if stat is not None and file_stat(path) == stat:
            now: str | None = expected
        else:
            stat, old = None, read_existing(path)
            now = None if old is None else digest(old)
        entry = record.get(name)
        if (
            now is None
            or entry is None
            or entry.kind != kind
            or not entry.owns(now)
            or now != expected
            or os.path.islink(path)
        ):
            raise SpecWriteError(
                f"{path}: not as cdi-gen last wrote it; nothing was written", nothing_written=True
            )
        if data is None:
            changes.append(FileChange(path, kind, "remove", None, old, old_stat=stat))
            del after[name]
            continue
        check_size(path, data)
        new = digest(data)
        action: Action = "unchanged" if new == now else "change"
        changes.append(FileChange(path, kind, action, data, old, old_stat=stat))
        previous = now if new != now else entry.previous if entry.sha256 == new else None
        after[name] = OwnedFile(name, kind, new, previous, entry.config)
    return Plan(output_dir, tuple(changes), dict(record), after)
