"""The prepared claims as a document: every field checked on the way in, canonical on the way out.

Pure: bytes to a :class:`PreparedState` (or a one-line :class:`PreparedStateError` naming the
field and the reason) and back. The document, written by :mod:`cdi_plugin.dra.prepared`::

    {"version": 1, "claims": {"<claim UID>": [{"request_names": ["gpu"], "pool_name": "node-a",
      "device_name": "gpu-card0", "cdi_device_ids": ["example.com/gpu=card0"],
      "admin_access": false}, ...], ...}}

A file of an earlier release holds the claims at the top level, without ``version``; it is read
the same way. The rules are the ones the Kubernetes API applies to these names, and a claim the
driver is about to keep is checked by the same rules (:func:`claim_problem`), so that what is
written can always be read back.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from cdi_plugin.cdi.names import parse_qualified_name
from cdi_plugin.cdi.textparse import parse
from cdi_plugin.dra.names import UID_MAX, is_dns_label, is_pool_name
from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.errors import CdiPluginError, InvalidNameError, SpecLoadError

FORMAT_VERSION = 1
#: The characters of a claim UID in the file (a UUID set by the API server), at most UID_MAX of them.
_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._:-]*")
#: A claim has at most 32 allocation results and 32 requests, so no prepared claim needs more.
MAX_DEVICES = 32
MAX_NAMES = 32
_FIELDS = ("request_names", "pool_name", "device_name", "cdi_device_ids", "admin_access")

Devices = tuple[PreparedDevice, ...]


class PreparedStateError(CdiPluginError):
    """The prepared-claims file is not one the driver writes: unreadable, or a field is wrong."""


class PreparedState:
    """Prepared claims by UID, and the devices they hold. Immutable: changes make a new state,
    which shares what did not change (each claim's encoded entry, the holders of its devices)."""

    __slots__ = ("_entries", "claims", "holders")

    def __init__(
        self,
        claims: Mapping[str, Devices] | None = None,
        *,
        _holders: Mapping[tuple[str, str], str] | None = None,
        _entries: dict[str, bytes] | None = None,
    ) -> None:
        self.claims: Mapping[str, Devices] = MappingProxyType(dict(claims or {}))
        #: (pool, device) to the UID of the claim it is prepared for, without admin access.
        self.holders: Mapping[tuple[str, str], str] = MappingProxyType(
            _holders if _holders is not None else _holders_of(self.claims.items())
        )
        #: Each claim's entry in the compact document, encoded when first needed.
        self._entries: dict[str, bytes] = _entries or {}

    def with_claims(self, added: Mapping[str, Devices]) -> PreparedState:
        if not added:
            return self
        if added.keys() & self.claims.keys():  # a claim's devices replaced: worked out again
            return PreparedState({**self.claims, **added})
        holders = {**self.holders, **_holders_of(added.items())}
        return PreparedState({**self.claims, **added}, _holders=holders, _entries=dict(self._entries))

    def without(self, uids: Iterable[str]) -> PreparedState:
        gone = set(uids) & self.claims.keys()
        if not gone:
            return self
        kept = {u: e for u, e in self._entries.items() if u not in gone}
        return PreparedState({u: d for u, d in self.claims.items() if u not in gone}, _entries=kept)

    def entry(self, uid: str) -> bytes:
        """The claim's ``"<uid>":[<devices>]`` in the compact document."""
        found = self._entries.get(uid)
        if found is None:
            devices = [_device_obj(d) for d in self.claims[uid]]
            found = self._entries[uid] = json.dumps({uid: devices}, separators=(",", ":"))[1:-1].encode()
        return found

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PreparedState) and self.claims == other.claims

    __hash__ = None  # type: ignore[assignment]


def _holders_of(claims: Iterable[tuple[str, Devices]]) -> dict[tuple[str, str], str]:
    return {(d.pool_name, d.device_name): uid for uid, devs in claims for d in devs if not d.admin_access}


def encode(state: PreparedState, *, indent: int | None = None) -> bytes:
    """The document; compact unless ``indent`` is given. The compact one, written at every
    change, is the claims' entries joined: a claim's entry is encoded the first time it is
    written, and the states made from this one keep it."""
    if indent is None:
        entries = b",".join(state.entry(uid) for uid in sorted(state.claims))
        return b'{"version":%d,"claims":{%b}}\n' % (FORMAT_VERSION, entries)
    claims = {uid: [_device_obj(d) for d in devices] for uid, devices in sorted(state.claims.items())}
    return (json.dumps({"version": FORMAT_VERSION, "claims": claims}, indent=indent) + "\n").encode()


def _device_obj(d: PreparedDevice) -> dict[str, Any]:
    return {
        "request_names": list(d.request_names),
        "pool_name": d.pool_name,
        "device_name": d.device_name,
        "cdi_device_ids": list(d.cdi_device_ids),
        "admin_access": d.admin_access,
    }


def decode(data: bytes, source: str) -> PreparedState:
    """The state a file holds; PreparedStateError names the file, the field and the reason."""
    try:
        doc, syntax = parse(data, source, "json", document="prepared-claims file")
    except SpecLoadError as exc:
        raise PreparedStateError(f"{source}: {exc.message}") from None
    if syntax != "json":
        raise PreparedStateError(f"{source}: not JSON")
    try:
        return _state(doc)
    except _Wrong as exc:
        where = f"{exc.where}: " if exc.where else ""
        raise PreparedStateError(f"{source}: {where}{exc}") from None


def claim_problem(uid: str, devices: Devices) -> str | None:
    """Why a prepared claim could not be kept (a name :func:`decode` would refuse), or None."""
    try:
        _check_claim(uid, list(devices), _kept_device)
    except _Wrong as exc:
        return f"{exc.where}: {exc}"
    return None


def _kept_device(device: PreparedDevice, where: str) -> PreparedDevice:
    """A device about to be kept, checked as :func:`_check_device` reads it back."""
    if not _readable(device):
        _check_device(_device_obj(device), where)  # raises, naming the field
    return device


@functools.lru_cache(maxsize=1024)
def _readable(device: PreparedDevice) -> bool:
    """Whether :func:`_check_device` reads the device back (the same devices recur: checked once)."""
    try:
        _check_device(_device_obj(device), "")
    except _Wrong:
        return False
    return True


class _Wrong(CdiPluginError):
    """A wrong field, before the file's name is attached."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where = where


def _show(value: Any) -> str:
    """A value of the file in a message: JSON (control characters escaped), cut when long."""
    text = json.dumps(value)
    return text if len(text) <= 70 else text[:60] + "..." + text[-5:]


def _type_name(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _want(value: Any, kind: type, where: str, what: str) -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _Wrong(where, f"{_type_name(value)} where {what} belongs")


def _state(doc: Any) -> PreparedState:
    _want(doc, dict, "", "an object")
    if "version" in doc and not isinstance(doc["version"], list):  # else a release before versions
        if doc["version"] != FORMAT_VERSION:
            raise _Wrong("version", f"{_show(doc['version'])}; this driver reads version {FORMAT_VERSION}")
        if set(doc) != {"version", "claims"}:
            extra = sorted(set(doc) - {"version", "claims"})
            raise _Wrong("", f"unknown field {_show(extra[0])}" if extra else "no 'claims'")
        doc = doc["claims"]
        _want(doc, dict, "claims", "an object of claims by UID")
    claims: dict[str, Devices] = {}
    holders: dict[tuple[str, str], str] = {}
    for uid, devices in doc.items():
        claims[uid] = _check_claim(uid, devices, _check_device)
        for d in claims[uid]:
            key = (d.pool_name, d.device_name)
            other = holders.setdefault(key, uid) if not d.admin_access else uid
            if other != uid:
                raise _Wrong(
                    f"claims[{_show(uid)}]",
                    f"device {key[0]}/{key[1]} is also prepared for claim {_show(other)}, "
                    "and neither has admin access",
                )
    return PreparedState(claims)


def _check_claim(uid: str, devices: Any, check: Callable[[Any, str], PreparedDevice]) -> Devices:
    where = f"claims[{_show(uid)}]"
    if not (len(uid) <= UID_MAX and _UID.fullmatch(uid)):
        raise _Wrong(where, f"not a claim UID (at most {UID_MAX} letters, digits, '-', '_', '.', ':')")
    _want(devices, list, where, "an array of devices")
    if len(devices) > MAX_DEVICES:
        raise _Wrong(where, f"{len(devices)} devices, more than a claim has ({MAX_DEVICES})")
    out = [check(d, f"{where}[{i}]") for i, d in enumerate(devices)]
    seen = {(d.pool_name, d.device_name) for d in out}
    if len(seen) != len(out):
        raise _Wrong(where, "a device is listed twice")
    return tuple(out)


def _check_device(obj: Any, where: str) -> PreparedDevice:
    _want(obj, dict, where, "a device object")
    for key in obj:
        if key not in _FIELDS:
            raise _Wrong(where, f"unknown field {_show(key)}")
    for key in _FIELDS:
        if key not in obj:
            raise _Wrong(where, f"missing field {key!r}")
    pool, device, admin = obj["pool_name"], obj["device_name"], obj["admin_access"]
    _want(pool, str, f"{where}.pool_name", "a pool name")
    if not is_pool_name(pool):
        raise _Wrong(f"{where}.pool_name", f"{_show(pool)} is not a pool name (DNS subdomains joined by '/')")
    _want(device, str, f"{where}.device_name", "a device name")
    if not is_dns_label(device):
        raise _Wrong(f"{where}.device_name", f"{_show(device)} is not a device name (a DNS label)")
    _want(admin, bool, f"{where}.admin_access", "true or false")
    requests = _names(obj["request_names"], f"{where}.request_names", "a request name (a DNS label)", 0)
    for name in requests:
        if not is_dns_label(name):
            raise _Wrong(f"{where}.request_names", f"{_show(name)} is not a request name (a DNS label)")
    cdi_ids = _names(obj["cdi_device_ids"], f"{where}.cdi_device_ids", "a CDI device name", 1)
    for name in cdi_ids:
        try:
            parse_qualified_name(name)
        except InvalidNameError as exc:
            raise _Wrong(f"{where}.cdi_device_ids", str(exc)) from None
    return PreparedDevice(requests, pool, device, cdi_ids, admin)


def _names(value: Any, where: str, what: str, least: int) -> tuple[str, ...]:
    _want(value, list, where, f"an array of {what}s")
    if not least <= len(value) <= MAX_NAMES:
        raise _Wrong(where, f"{len(value)} entries; {least} to {MAX_NAMES} expected")
    for item in value:
        _want(item, str, where, what)
    return tuple(value)
