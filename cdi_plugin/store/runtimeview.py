"""The spec directories as each runtime of :data:`~cdi_plugin.cdi.runtimes.RUNTIMES` sees them:
which device names it does not resolve where the CDI Go library's rules do, and why.

A runtime drops a whole file it cannot read (:func:`~cdi_plugin.cdi.runtime_checks.refusals`),
and resolves the names of the files it reads with the same priority and conflict rules; so a
name it does not see is defined only in files it drops, and a name it sees may come from another
file than the one the CDI library's rules pick (when the one of higher priority is dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.problems import Problem
from cdi_plugin.cdi.runtime_checks import reason, refusals
from cdi_plugin.cdi.runtimes import Runtime
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import file_suffix, read_spec_bytes
from cdi_plugin.store.registry import Snapshot, SpecFile, resolve


@dataclass(frozen=True, slots=True)
class Unseen:
    """A device name the CDI library's rules resolve that the runtime does not."""

    qualified_name: str
    reasons: tuple[str, ...]  # "<file>: <why>"


@dataclass(frozen=True, slots=True)
class RuntimeView:
    runtime: Runtime
    #: Files it drops or reads differently, with the problems it has with them.
    files: tuple[tuple[Path, tuple[Problem, ...]], ...]
    unseen: tuple[Unseen, ...]
    #: Names it resolves from another file than the CDI library's rules pick: (name, its file).
    elsewhere: tuple[tuple[str, Path], ...]
    #: How many of the names the CDI library's rules resolve it sees.
    seen: int = 0

    def to_json(self) -> dict[str, Any]:
        r = self.runtime
        return {
            "runtime": r.name,
            "title": r.title,
            "seen": self.seen,
            "unseen": [{"qualifiedName": u.qualified_name, "reasons": list(u.reasons)} for u in self.unseen],
            "elsewhere": [{"qualifiedName": n, "path": str(p)} for n, p in self.elsewhere],
            "files": [{"path": str(p), "problems": [x.to_json() for x in found]} for p, found in self.files],
        }


def _syntax(path: Path) -> codec.Format:
    """The syntax a ``.json`` file's text parses as (``yaml``: it holds YAML)."""
    try:
        _, parsed_as = codec.parse(read_spec_bytes(path), str(path), "json")
    except SpecLoadError:
        return "json"  # changed since it was read: the next listing shows it
    return parsed_as


def runtime_views(snapshot: Snapshot, runtimes: Sequence[Runtime]) -> list[RuntimeView]:
    """How each of ``runtimes`` sees the files of ``snapshot`` (read by the CDI library's rules)."""
    loaded = [f for f in snapshot.files if f.spec is not None]
    syntax = {
        f.path: _syntax(f.path)
        for f in loaded
        if file_suffix(f.path) == ".json" and any(not r.yaml_in_json for r in runtimes)
    }
    views = []
    for runtime in runtimes:
        found = {
            f.path: refusals(runtime, f.spec, file_suffix(f.path), syntax.get(f.path, "json"))
            for f in loaded
            if f.spec
        }
        dropped = {p: problems for p, problems in found.items() if any(x.is_error for x in problems)}
        # resolved among the files this runtime reads: a file it drops takes part in no conflict
        devices, _ = resolve(SpecFile(f.path, f.priority, f.spec) for f in loaded if f.path not in dropped)
        unseen, elsewhere = [], []
        for name, entry in snapshot.devices.items():
            own = devices.get(name)
            if own is None:
                why = tuple(
                    f"{f.path}: {reason(runtime, next(x for x in dropped[f.path] if x.is_error))}"
                    for f in loaded
                    if f.path in dropped and _defines(f, name)
                )
                unseen.append(Unseen(name, why))
            elif own.path != entry.path:
                elsewhere.append((name, own.path))
        views.append(
            RuntimeView(
                runtime,
                tuple((f.path, tuple(found[f.path])) for f in loaded if found.get(f.path)),
                tuple(unseen),
                tuple(elsewhere),
                len(snapshot.devices) - len(unseen),
            )
        )
    return views


def _defines(f: SpecFile, qualified_name: str) -> bool:
    assert f.spec is not None
    kind, _, name = qualified_name.partition("=")
    return f.spec.kind == kind and any(d.name == name for d in f.spec.devices)
