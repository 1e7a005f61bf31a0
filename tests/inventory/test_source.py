"""A reading of the spec directories never catches cdi-gen's writer half-way.

The writer's steps (the record owning old and new contents, each rename, each removal, the final
record) are recorded from a real :func:`apply` and replayed. A reading (the spec files, the
records, the files they name) is interrupted at every point where it touches the disk by one
writer step, by two in a row, or by all of them: it always finds every file of cdi-gen's owned by
its record. Every step changes the directory's stamp, so a reading that took none in sees one
state of the writer, and every state agrees with itself. The same interleavings catch a reader
that reads the record, then the files, without that check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.cdi.model import Spec
from cdi_plugin.inventory import source as source_module
from cdi_plugin.inventory.source import SpecSource
from cdi_plugin.store import ownership as ownership_module
from cdi_plugin.store import registry as registry_module
from cdi_plugin.store.ownership import owned_kinds
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.registry import SpecRegistry
from cdi_plugin.store.writer import apply
from tests.deviceplugin.helpers import make_node, spec_of, write_spec

Step = tuple[Callable[..., Any], tuple[Any, ...]]


def _specs(node: Path, *kinds_and_devices: tuple[str, str]) -> list[Spec]:
    return [spec_of(f"cdi-plugin.io/{kind}", {device: [node]}) for kind, device in kinds_and_devices]


#: fuse and tun change, new is created, kvm is removed.
BEFORE = (("fuse", "a"), ("tun", "a"), ("kvm", "a"))
AFTER = (("fuse", "b"), ("new", "a"), ("tun", "b"))


def _staged(root: Path) -> tuple[Path, list[Step]]:
    """A spec directory holding BEFORE, and the steps that turn it into AFTER, not taken yet."""
    node = make_node(root / "dev" / "n")
    out = root / "cdi"
    apply(plan_writes(_specs(node, *BEFORE), out, spec_dirs=()))
    plan = plan_writes(_specs(node, *AFTER), out, spec_dirs=())
    steps: list[Step] = []
    real_replace, real_unlink = os.replace, os.unlink
    os.replace = lambda *a, **k: steps.append((real_replace, a))  # type: ignore[assignment]
    os.unlink = lambda *a, **k: steps.append((real_unlink, a))  # type: ignore[assignment]
    try:
        apply(plan)
    finally:
        os.replace, os.unlink = real_replace, real_unlink
    return out, steps


STEPS = 6  # the record, three renames, one removal, the record without kvm


@pytest.fixture
def disk_reads(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """Every disk access of a reading first calls the hooks in this list."""
    hooks: list[Callable[[], None]] = []

    def hooked(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            for hook in hooks:
                hook()
            return real(*args, **kwargs)

        return call

    for module, name in [
        (source_module, "_stamps"),
        (source_module, "read_record"),
        (source_module, "read_spec_bytes"),
        (source_module, "_named_stamps"),
        (registry_module, "list_spec_files"),
        (registry_module, "file_stat"),
        (registry_module, "load_spec_file"),
        (ownership_module, "read_record"),
        (ownership_module, "read_spec_bytes"),
    ]:
        monkeypatch.setattr(module, name, hooked(getattr(module, name)))
    return hooks


def _interrupt(steps: list[Step], span: range, at: int) -> Callable[[], None]:
    """A hook that takes the writer steps in ``span`` just before the ``at``-th disk access."""
    count = 0

    def hook() -> None:
        nonlocal count
        if count == at:
            for take, args in steps[span.start : span.stop]:
                take(*args)
        count += 1

    return hook


def _kinds(snapshot: registry_module.Snapshot) -> set[str]:
    return {str(e.kind) for e in snapshot.devices.values()}


def _source(out: Path, steps: list[Step], watched: bool) -> SpecSource:
    """A source of ``out`` before the steps; watched: it has read ``out`` and every entry the steps
    touch is noted as changed (as its inotify watch tells it)."""
    source = SpecSource([out])
    if watched:
        source.current()
        source.watched = True
        for _, args in steps:
            assert source.note(out, Path(args[-1]).name)
    return source


def _accesses(tmp_path: Path, disk_reads: list[Callable[[], None]], watched: bool) -> int:
    out, steps = _staged(tmp_path / "count")
    source = _source(out, steps, watched)
    seen = [0]
    disk_reads.append(lambda: seen.__setitem__(0, seen[0] + 1))
    source.current()
    disk_reads.clear()
    return seen[0]


def test_the_writer_takes_the_expected_steps(tmp_path: Path) -> None:
    _, steps = _staged(tmp_path)
    names = [Path(args[-1]).name for _, args in steps]
    assert names == [
        ".cdi-gen-owned",
        "cdi-plugin.io-fuse.json",
        "cdi-plugin.io-new.json",
        "cdi-plugin.io-tun.json",
        "cdi-plugin.io-kvm.json",
        ".cdi-gen-owned",
    ]
    assert len(steps) == STEPS


SPANS = [range(i, i + 1) for i in range(STEPS)] + [range(i, i + 2) for i in range(STEPS - 1)]


@pytest.mark.parametrize("watched", [False, True], ids=["listed", "watched"])
@pytest.mark.parametrize("span", [*SPANS, range(STEPS)], ids=lambda r: f"steps{r.start}-{r.stop - 1}")
def test_a_reading_never_meets_a_file_its_record_does_not_own(
    tmp_path: Path, disk_reads: list[Callable[[], None]], span: range, watched: bool
) -> None:
    accesses = _accesses(tmp_path, disk_reads, watched)
    assert accesses > 5
    states = set()
    for at in range(accesses + 1):  # the last one: the steps come after the reading
        out, steps = _staged(tmp_path / f"{at}")
        source = _source(out, steps, watched)
        for take, args in steps[: span.start]:
            take(*args)
        disk_reads[:] = [_interrupt(steps, span, at)]
        snapshot = source.current()
        disk_reads.clear()
        reading = source.reading
        where = f"steps {span.start}-{span.stop - 1} at access {at}"
        assert reading is not None, where
        assert source.unsettled == 0, where
        assert reading.snapshot is snapshot
        kinds = _kinds(snapshot)
        assert kinds <= reading.owned, f"{where}: {kinds - reading.owned} not owned"
        states.add(frozenset(kinds))
    assert len(states) in (1, 2)  # the state before the steps, and after them (if kinds changed)


def test_every_writer_step_changes_the_stamp(tmp_path: Path) -> None:
    out, steps = _staged(tmp_path)
    for take, args in steps:
        before = source_module._stamps([out])
        take(*args)
        assert source_module._stamps([out]) != before, Path(args[-1]).name


def test_the_same_interleavings_catch_a_reader_that_reads_the_record_without_checking(
    tmp_path: Path, disk_reads: list[Callable[[], None]]
) -> None:
    caught = []
    for at in range(_accesses(tmp_path, disk_reads, False)):
        out, steps = _staged(tmp_path / f"{at}")
        disk_reads[:] = [_interrupt(steps, range(2), at)]  # the record, then fuse's new contents
        snapshot = SpecRegistry([out]).refresh()
        owned = owned_kinds([out])
        disk_reads.clear()
        if not _kinds(snapshot) <= owned:
            caught.append(at)
    assert caught


def test_only_the_owned_files_that_changed_are_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node(tmp_path / "dev" / "n")
    out = tmp_path / "cdi"
    write_spec(out, spec_of("cdi-plugin.io/a", {"a": [node]}))
    write_spec(out, spec_of("cdi-plugin.io/b", {"b": [node]}))
    source = SpecSource([out])
    source.current()
    hashed: list[bytes] = []
    real_digest = source_module.digest

    def counted(data: bytes) -> str:
        hashed.append(data)
        return real_digest(data)

    monkeypatch.setattr(source_module, "digest", counted)
    b = write_spec(out, spec_of("cdi-plugin.io/b", {"b": [node], "c": [node]}))
    source.current()
    assert hashed == [b.read_bytes()]
    assert source.reading is not None
    assert source.reading.owned == {"cdi-plugin.io/a", "cdi-plugin.io/b"}

    a = out / "cdi-plugin.io-a.json"
    a.write_bytes(a.read_bytes() + b"\n")  # edited in place by someone else: hashed, no longer owned
    source.current()
    assert hashed[-1] == a.read_bytes()
    assert source.reading.owned == {"cdi-plugin.io/b"}
