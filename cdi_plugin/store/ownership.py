"""Which spec files in a directory cdi-gen wrote, so it never touches a file it did not write.

The record is ``.cdi-gen-owned`` in the spec directory itself: it moves with the directory, needs
no extra mount, is ignored by runtimes (not ``*.json``/``*.yaml``) and keeps ownership data out
of the specs (a spec annotation would raise the spec to cdiVersion 0.6.0). For each file it keeps
the kind and the SHA-256 of the bytes written: a file whose bytes differ was edited by someone
else and is no longer cdi-gen's to change. The device plugin reads the same record to learn
which kinds cdi-gen generated.

Each entry also names the configuration that wrote the file, by the kinds of all its classes
(kept once per configuration in ``configs``, which entries refer to by a digest of those kinds):
several generators with different configurations can share a directory, each removing only the
stale files of its own configuration (:func:`written_by`). A record of the previous format
(version 1) has no configurations: each of its entries counts as written by whichever
configuration scans next, and is marked with it on the next write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.textparse import parse
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.files import MAX_SPEC_BYTES, read_file, read_spec_bytes

log = logging.getLogger(__name__)

RECORD_NAME = ".cdi-gen-owned"
_FORMAT_VERSION = 2
#: The warning last logged for each unusable record (a watcher reads it several times per batch,
#: and retries): logged again only once it changes or the record was usable in between.
_warned: dict[Path, str] = {}


@dataclass(frozen=True, slots=True)
class OwnedFile:
    name: str  # file name inside the directory
    kind: str
    sha256: str
    previous: str | None = None  # the digest of the content before cdi-gen last changed it
    #: The kinds of every class of the configuration that wrote it; None: not recorded (a record
    #: of the previous format).
    config: frozenset[str] | None = None

    def owns(self, sha256: str) -> bool:
        return sha256 in (self.sha256, self.previous)


def written_by(entry: OwnedFile, config: Collection[str]) -> bool:
    """Whether the configuration whose classes have the kinds ``config`` counts ``entry`` as its
    own: of one of its kinds, written by it or by an earlier form of it (one sharing a kind: a
    class removed since leaves a file to remove), or by a release that did not record it. Another
    configuration's file of kinds this one does not have is never its own."""
    return entry.config is None or entry.kind in config or not entry.config.isdisjoint(config)


def digest(data: bytes) -> str:
    import hashlib  # on first use: cdi_plugin.process may keep OpenSSL out first

    return hashlib.sha256(data).hexdigest()


def read_record(directory: Path) -> dict[str, OwnedFile]:
    """The files recorded as cdi-gen's in ``directory``; empty if there is no usable record.

    An unreadable or corrupt record counts as owning nothing, the safe side: cdi-gen then treats
    every existing file as foreign (said once per record and fault). cdi-gen writes the record as a
    regular file, so anything else in its place (a symbolic link, a FIFO, a device) is not read.
    """
    path = directory / RECORD_NAME
    try:
        data = read_file(path, MAX_SPEC_BYTES, "an ownership record", follow_links=False)
        raw, _ = parse(data, str(path), "json", "ownership record")
        files = raw["files"]
        configs = _configs(raw.get("configs"))
        record = {
            name: OwnedFile(
                name, str(entry["kind"]), str(entry["sha256"]), _previous(entry), _config_of(entry, configs)
            )
            for name, entry in files.items()
            if "/" not in name and "\x00" not in name and name not in {"", ".", ".."}
        }
    except SpecLoadError as exc:
        if exc.rule != "not-found":
            _unusable(path, f"ignoring unusable ownership record {exc}")
        else:
            _warned.pop(path, None)
        return {}
    except (KeyError, TypeError, AttributeError):
        why = "not an object whose 'files' maps each file name to its 'kind' and 'sha256'"
        _unusable(path, f"{path}: ignoring unusable ownership record ({why})")
        return {}
    _warned.pop(path, None)
    return record


def _unusable(path: Path, message: str) -> None:
    level = logging.DEBUG if _warned.get(path) == message else logging.WARNING
    _warned[path] = message
    log.log(level, "%s; treating every spec as foreign", message)


def _previous(entry: Mapping[str, object]) -> str | None:
    previous = entry.get("previous")
    return previous if isinstance(previous, str) else None


def _config_of(
    entry: Mapping[str, object], configs: Mapping[object, frozenset[str]]
) -> frozenset[str] | None:
    key = entry.get("config")
    return configs.get(key) if isinstance(key, str) else None


def _configs(raw: object) -> dict[object, frozenset[str]]:
    """The record's configurations by id; one that is not a list of kinds is left out (its files
    then count as of no recorded configuration)."""
    if not isinstance(raw, dict):
        return {}
    return {
        key: frozenset(kinds)
        for key, kinds in raw.items()
        if isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)
    }


def _config_id(config: frozenset[str]) -> str:
    return digest("\n".join(sorted(config)).encode())[:16]


def _entry(f: OwnedFile) -> dict[str, str]:
    entry = {"kind": f.kind, "sha256": f.sha256}
    if f.previous is not None:
        entry["previous"] = f.previous
    if f.config is not None:
        entry["config"] = _config_id(f.config)
    return entry


def encode_record(owned: Mapping[str, OwnedFile]) -> bytes:
    """The bytes of a record listing ``owned``."""
    configs = {_config_id(f.config): sorted(f.config) for f in owned.values() if f.config is not None}
    body = {
        "version": _FORMAT_VERSION,
        "configs": dict(sorted(configs.items())),
        "files": {n: _entry(f) for n, f in sorted(owned.items())},
    }
    return (json.dumps(body, indent=2) + "\n").encode()


def write_record(directory: Path, owned: Mapping[str, OwnedFile]) -> None:
    """Atomically replace the record (the spec writer calls this after each change)."""
    write_atomic(directory / RECORD_NAME, encode_record(owned))


def owned_kinds(directories: Iterable[Path]) -> set[str]:
    """Kinds whose spec file cdi-gen wrote and nobody changed since, over several directories."""
    kinds: set[str] = set()
    for directory in directories:
        for owned in read_record(directory).values():
            try:
                if owned.owns(digest(read_spec_bytes(directory / owned.name))):
                    kinds.add(owned.kind)
            except SpecLoadError:
                continue
    return kinds
