"""Recorded devices as JSON: a device source for trying cdi-gen without the hardware.

A fixture file is a JSON list of objects shaped like :class:`DiscoveredDevice`::

    [{"subsystem": "misc", "sys_name": "fuse", "sys_path": "/sys/devices/virtual/misc/fuse",
      "devnode": "/dev/fuse",
      "node": {"type": "c", "major": 10, "minor": 229, "mode": "0666", "uid": 0, "gid": 0},
      "properties": {"MAJOR": "10", "MINOR": "229"}, "attributes": {"dev": "10:229"},
      "ancestors": [{"subsystem": "pci", "sys_name": "...", "sys_path": "...", "driver": "...",
                     "properties": {}, "attributes": {}}]}]

Only ``subsystem`` and ``sys_name`` are required; ``mode`` is an octal string; unknown keys are
errors. An entry with ``"subsystem": ""`` is a node that only a devnode glob finds. A
:class:`FixtureSource` answers queries as the udev source would have on the recorded host (see
:func:`~cdi_plugin.discovery.query.apply_query`), so record with every attribute you will ask for:
``python -m cdi_plugin.discovery -a vendor -a serial ... > host.json``.

:func:`simulated_source` serves the bundled simulated workstation (``simulated/workstation.json``,
recorded from ``simulated/workstation.umockdev`` under ``umockdev-run``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, Discovery, NodeInfo, Query
from cdi_plugin.discovery.query import apply_query
from cdi_plugin.errors import DiscoveryError

SIMULATED_FIXTURE = "workstation.json"
SIMULATED_UMOCKDEV = "workstation.umockdev"

_DEVICE_KEYS = {
    "subsystem", "sys_name", "sys_path", "devnode", "devtype", "driver",
    "node", "devlinks", "properties", "attributes", "ancestors",
}  # fmt: skip
_ANCESTOR_KEYS = {"subsystem", "sys_name", "sys_path", "driver", "properties", "attributes"}
_NODE_KEYS = {"type", "major", "minor", "mode", "uid", "gid"}
_MODE = re.compile(r"0?[0-7]{1,4}")


def simulated(name: str = SIMULATED_FIXTURE) -> Traversable:
    """A bundled simulated-hardware file (``workstation.json`` or ``workstation.umockdev``)."""
    return resources.files("cdi_plugin.discovery").joinpath("simulated", name)


def simulated_source() -> FixtureSource:
    """The bundled simulated workstation: GPUs, USB serial adapters, misc devices and more."""
    return FixtureSource(simulated())


class FixtureSource:
    """Devices recorded in a JSON fixture file, read again on every :meth:`discover`."""

    def __init__(self, path: Path | Traversable) -> None:
        self.path = path

    def discover(self, query: Query) -> Discovery:
        return apply_query(load(self.path), query)


def load(path: Path | Traversable) -> tuple[DiscoveredDevice, ...]:
    """Read a fixture file; :class:`DiscoveryError` names the file and the offending entry."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DiscoveryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return loads(data, str(path))


def loads(data: bytes | str, source: str) -> tuple[DiscoveredDevice, ...]:
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise DiscoveryError(f"{source}: line {exc.lineno} column {exc.colno}: not JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise DiscoveryError(f"{source}: not UTF-8 text") from None
    return devices_from_obj(obj, source)


def devices_from_obj(obj: object, source: str) -> tuple[DiscoveredDevice, ...]:
    if not isinstance(obj, list):
        raise DiscoveryError(f"{source}: must be a JSON list of devices")
    return tuple(_device(item, _Where(source, f"[{i}]")) for i, item in enumerate(obj))


def dumps(devices: Iterable[DiscoveredDevice]) -> str:
    """The fixture text for ``devices``: stable key order, two-space indent, trailing newline."""
    return json.dumps([device_to_obj(d) for d in devices], indent=2, ensure_ascii=False) + "\n"


def device_to_obj(device: DiscoveredDevice) -> dict[str, Any]:
    """A JSON-ready dict; ``None`` and empty fields are left out."""
    obj: dict[str, Any] = {"subsystem": device.subsystem, "sys_name": device.sys_name}
    for key in ("sys_path", "devnode", "devtype", "driver"):
        if value := getattr(device, key):
            obj[key] = value
    if device.node is not None:
        n = device.node
        obj["node"] = {
            "type": n.type,
            "major": n.major,
            "minor": n.minor,
            "mode": f"{n.mode:04o}",
            "uid": n.uid,
            "gid": n.gid,
        }
    if device.devlinks:
        obj["devlinks"] = list(device.devlinks)
    _put_mappings(obj, device.properties, device.attributes)
    if device.ancestors:
        obj["ancestors"] = [_ancestor_to_obj(a) for a in device.ancestors]
    return obj


def _ancestor_to_obj(ancestor: Ancestor) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "subsystem": ancestor.subsystem,
        "sys_name": ancestor.sys_name,
        "sys_path": ancestor.sys_path,
    }
    if ancestor.driver:
        obj["driver"] = ancestor.driver
    _put_mappings(obj, ancestor.properties, ancestor.attributes)
    return obj


def _put_mappings(obj: dict[str, Any], properties: Mapping[str, str], attributes: Mapping[str, str]) -> None:
    if properties:
        obj["properties"] = dict(sorted(properties.items()))
    if attributes:
        obj["attributes"] = dict(sorted(attributes.items()))


class _Where:
    """Where in a fixture file a value sits, for one-line errors (``file: [3].node.mode: ...``)."""

    def __init__(self, source: str, pointer: str) -> None:
        self.source = source
        self.pointer = pointer

    def __truediv__(self, key: str | int) -> _Where:
        return _Where(
            self.source, f"{self.pointer}[{key}]" if isinstance(key, int) else f"{self.pointer}.{key}"
        )

    def error(self, reason: str) -> DiscoveryError:
        return DiscoveryError(f"{self.source}: {self.pointer}: {reason}")


def _object(value: object, allowed: set[str], required: Sequence[str], where: _Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error("must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise where.error(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in value:
            raise where.error(f"missing key {key!r}")
    return value


def _str(obj: dict[str, Any], key: str, where: _Where, default: str = "") -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise (where / key).error("must be a string")
    return value


def _opt_str(obj: dict[str, Any], key: str, where: _Where) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise (where / key).error("must be a string or null")
    return value


def _int(obj: dict[str, Any], key: str, where: _Where) -> int:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise (where / key).error("must be a non-negative integer")
    return value


def _strings(obj: dict[str, Any], key: str, where: _Where) -> Mapping[str, str]:
    value = obj.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise (where / key).error("must be an object of strings")
    return MappingProxyType(dict(value))


def _node(value: object, where: _Where) -> NodeInfo:
    obj = _object(value, _NODE_KEYS, sorted(_NODE_KEYS), where)
    kind = obj["type"]
    if kind not in ("c", "b"):
        raise (where / "type").error("must be 'c' or 'b'")
    mode = obj["mode"]
    if not isinstance(mode, str) or not _MODE.fullmatch(mode):
        raise (where / "mode").error("must be an octal string such as '0660'")
    return NodeInfo(
        type=kind,
        major=_int(obj, "major", where),
        minor=_int(obj, "minor", where),
        mode=int(mode, 8),
        uid=_int(obj, "uid", where),
        gid=_int(obj, "gid", where),
    )


def _ancestor(value: object, where: _Where) -> Ancestor:
    obj = _object(value, _ANCESTOR_KEYS, ("subsystem", "sys_name", "sys_path"), where)
    return Ancestor(
        subsystem=_str(obj, "subsystem", where),
        sys_name=_str(obj, "sys_name", where),
        sys_path=_str(obj, "sys_path", where),
        driver=_opt_str(obj, "driver", where),
        properties=_strings(obj, "properties", where),
        attributes=_strings(obj, "attributes", where),
    )


def _device(value: object, where: _Where) -> DiscoveredDevice:
    obj = _object(value, _DEVICE_KEYS, ("subsystem", "sys_name"), where)
    links = obj.get("devlinks", [])
    if not isinstance(links, list) or not all(isinstance(link, str) for link in links):
        raise (where / "devlinks").error("must be a list of strings")
    ancestors = obj.get("ancestors", [])
    if not isinstance(ancestors, list):
        raise (where / "ancestors").error("must be a list")
    node = obj.get("node")
    if obj["subsystem"] == "" and (node is None or not obj.get("devnode")):
        raise where.error("an entry without subsystem (a devnode-glob node) needs 'devnode' and 'node'")
    return DiscoveredDevice(
        subsystem=_str(obj, "subsystem", where),
        sys_name=_str(obj, "sys_name", where),
        sys_path=_str(obj, "sys_path", where),
        devnode=_opt_str(obj, "devnode", where),
        devtype=_opt_str(obj, "devtype", where),
        driver=_opt_str(obj, "driver", where),
        node=None if node is None else _node(node, where / "node"),
        devlinks=tuple(links),
        properties=_strings(obj, "properties", where),
        attributes=_strings(obj, "attributes", where),
        ancestors=tuple(_ancestor(a, where / "ancestors" / i) for i, a in enumerate(ancestors)),
    )
