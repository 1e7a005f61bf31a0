"""The API server's answers as untrusted input: JSON decoded with bounds, every field the driver
reads checked for its type (and, for names, the API's rules) before it is used.

Pure: bytes and plain dicts in, plain dicts, tuples or a :class:`BadAnswer` saying what is wrong
(the field's path and why) out. The request layer (:mod:`cdi_plugin.dra.rest`) names the request.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cdi_plugin.dra.names import is_dns_label, is_dns_subdomain, is_pool_name, is_request_name
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import clipped, shown

#: No value in an API object needs a longer number literal (an int64 has 20 digits).
MAX_NUMBER_CHARS = 64
#: No API server's resourceVersion is longer (etcd's revision, an int64, has at most 19 digits).
MAX_VERSION_CHARS = 64
#: The API allows at most this many allocation results in a claim.
MAX_RESULTS = 32
WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})
#: A longer ``Retry-After`` is not one (an HTTP-date has 29 characters).
MAX_HEADER_CHARS = 64
#: The longest wait a ``Retry-After`` may ask for and be heard (a longer one is not meant).
MAX_RETRY_AFTER = 86400.0
#: The lines of a repeated ``Retry-After``, and the members of a folded one, looked at.
MAX_RETRY_AFTER_MEMBERS = 4
#: The causes of a Status looked at (the API server sends a few).
MAX_CAUSES = 32

Obj = dict[str, Any]


class BadAnswer(CdiPluginError):
    """An answer that is not what the Kubernetes API sends: not JSON, or a field of the wrong shape."""


def _number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(literal: str) -> Any:
        if len(literal) > MAX_NUMBER_CHARS:
            raise BadAnswer(f"a number {len(literal)} characters long")
        return convert(literal)

    return parse


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def decode_object(data: bytes) -> Obj:
    """A JSON object; BadAnswer when ``data`` is not one (an HTML page, an array, garbage)."""
    try:
        value = json.loads(data, parse_int=_number(int), parse_float=_number(float))
    except (UnicodeDecodeError, ValueError) as exc:
        head = data[:60].decode("utf-8", "replace").strip()
        kind = "an HTML page" if head[:1] == "<" else "not JSON"
        raise BadAnswer(f"{kind} ({shown(head, 60)})" if head else "an empty body") from exc
    except RecursionError:
        raise BadAnswer("JSON nested too deep") from None
    if not isinstance(value, dict):
        raise BadAnswer(f"a JSON {_JSON_TYPES.get(type(value), 'null')}, not an object")
    return value


_WORDS = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false"}


def _at(obj: Mapping[str, Any], path: str, kind: type, *, required: bool = True) -> Any:
    """The value at a dotted ``path`` of ``obj``, checked to be of ``kind`` (None when absent and not
    required); BadAnswer naming the path otherwise."""
    value: Any = obj
    parts = path.split(".")
    for i, part in enumerate(parts):
        if value is None:
            break
        if not isinstance(value, dict):
            raise BadAnswer(f"{'.'.join(parts[:i])}: {shown(value, 40)} is not an object")
        value = value.get(part)
    if value is None:
        if required:
            raise BadAnswer(f"{path}: missing")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadAnswer(f"{path}: {shown(value, 40)} is not {_WORDS[kind]}")
    return value


def resource_version(obj: Mapping[str, Any]) -> str:
    """An object's (or a list's) resourceVersion: opaque, but sent back in the next watch's URL."""
    version: str = _at(obj, "metadata.resourceVersion", str)
    if not version:
        raise BadAnswer("metadata.resourceVersion: empty")
    if len(version) > MAX_VERSION_CHARS:
        raise BadAnswer(f"metadata.resourceVersion: {len(version)} characters, more than {MAX_VERSION_CHARS}")
    return version


@dataclass(frozen=True, slots=True)
class Status:
    """A failure as the API server describes it (a ``Status`` object). ``version_too_large``: the
    version asked for is newer than the server has seen (``504 Timeout`` with the cause
    ``ResourceVersionTooLarge``, or its message alone as servers before 1.18.6 sent it)."""

    code: int
    reason: str
    message: str
    version_too_large: bool = False
    #: ``details.retryAfterSeconds``: the seconds to wait before trying again (None: none, or
    #: not a number of seconds from 1 to :data:`MAX_RETRY_AFTER`).
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {clipped(self.message, 200)}".replace(" :", ":")


def status_of(obj: Mapping[str, Any]) -> Status | None:
    """The Status ``obj`` is, or None when it is not one (a body of a proxy, of the wrong shape)."""
    try:
        if _at(obj, "kind", str) != "Status":
            return None
        code = _at(obj, "code", int)
        reason = _at(obj, "reason", str, required=False) or ""
        message = _at(obj, "message", str, required=False) or ""
    except BadAnswer:
        return None
    return Status(code, clipped(reason, 40), message, _version_too_large(obj, code, message), _wait(obj))


def _wait(obj: Mapping[str, Any]) -> float | None:
    try:
        seconds = _at(obj, "details.retryAfterSeconds", int, required=False)
    except BadAnswer:
        return None
    return float(seconds) if seconds is not None and 0 < seconds <= MAX_RETRY_AFTER else None


def _version_too_large(obj: Mapping[str, Any], code: int, message: str) -> bool:
    try:
        causes = _at(obj, "details.causes", list, required=False) or []
    except BadAnswer:
        causes = []
    if any(isinstance(c, dict) and c.get("type") == "ResourceVersionTooLarge" for c in causes[:MAX_CAUSES]):
        return True
    return code == 504 and "Too large resource version" in message


def retry_after(values: list[str], now: float) -> float | None:
    """The seconds the ``Retry-After`` header lines ``values`` ask to wait: the first member that
    is a wait (delay-seconds, or an HTTP-date compared with ``now``, a Unix time), whether the
    header is repeated or its lines folded into one with commas (``5, 7``: 5 s). The field allows
    a single value (RFC 9110, section 10.2.3), so a repetition is a sender's error; client-go
    reads the first line only (Go's ``Header.Get``), here a first member that is no wait does not
    hide a later one. None when there is no wait among the first
    :data:`MAX_RETRY_AFTER_MEMBERS` members: none, not one of those, in the past, more than
    :data:`MAX_RETRY_AFTER` seconds away, or a line longer than :data:`MAX_HEADER_CHARS`."""
    members = [m for v in values[:MAX_RETRY_AFTER_MEMBERS] if len(v) <= MAX_HEADER_CHARS for m in _members(v)]
    for member in members[:MAX_RETRY_AFTER_MEMBERS]:
        seconds = _seconds(member, now)
        if seconds is not None:
            return seconds
    return None


#: A member of a list of waits: delay-seconds, or an HTTP-date, whose day name ends with a comma.
_MEMBER = re.compile(r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,)?[^,]*")


def _members(value: str) -> list[str]:
    return [m.group().strip() for m in _MEMBER.finditer(value) if m.group().strip()]


def _seconds(value: str, now: float) -> float | None:
    if value.isascii() and value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        seconds = when.replace(tzinfo=when.tzinfo or datetime.UTC).timestamp() - now
    return seconds if 0 < seconds <= MAX_RETRY_AFTER else None


def list_of(obj: Mapping[str, Any]) -> tuple[list[Obj], str, str]:
    """The items of a list, its resourceVersion and its ``continue`` token (empty: the last page)."""
    items = _at(obj, "items", list, required=False) or []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadAnswer(f"items[{i}]: not an object")
    return items, resource_version(obj), _at(obj, "metadata.continue", str, required=False) or ""


def watch_event(obj: Mapping[str, Any]) -> tuple[str, Obj]:
    """An event of a watch: its type and its object (a Status for ERROR)."""
    kind = _at(obj, "type", str)
    if kind not in WATCH_TYPES:
        raise BadAnswer(f"type: {shown(kind, 20)} is not a watch event type")
    return kind, _at(obj, "object", dict)


def resource_names(obj: Mapping[str, Any], group_version: str) -> frozenset[str]:
    """The resources (``resourceslices``, ``resourceclaims/status``) an ``APIResourceList`` of
    ``group_version`` names: the API server's discovery document of that group version."""
    kind = _at(obj, "kind", str)
    if kind != "APIResourceList":
        raise BadAnswer(f"kind: {shown(kind, 40)}, not APIResourceList")
    found = _at(obj, "groupVersion", str)
    if found != group_version:
        raise BadAnswer(f"groupVersion: {shown(found, 60)}, not {group_version}")
    names = set()
    for i, resource in enumerate(_at(obj, "resources", list, required=False) or []):
        if not isinstance(resource, dict):
            raise BadAnswer(f"resources[{i}]: not an object")
        try:
            names.add(_at(resource, "name", str))
        except BadAnswer as exc:
            raise BadAnswer(f"resources[{i}].{exc}") from None
    return frozenset(names)


def node_uid(obj: Mapping[str, Any]) -> str:
    uid: str = _at(obj, "metadata.uid", str)
    if not uid:
        raise BadAnswer("metadata.uid: empty")
    return uid


def slice_problem(obj: Mapping[str, Any]) -> str | None:
    """What makes a ResourceSlice unusable for the driver's plan (:func:`slices.plan`), or None."""
    try:
        name = _at(obj, "metadata.name", str)
        if not is_dns_subdomain(name):
            raise BadAnswer(f"metadata.name: {shown(name)} is not a DNS subdomain")
        resource_version(obj)
        for field in ("spec.driver", "spec.nodeName", "spec.pool.name"):
            _at(obj, field, str)
        generation = _at(obj, "spec.pool.generation", int, required=False)
        _at(obj, "spec.pool.resourceSliceCount", int, required=False)
        if generation is not None and generation < 0:
            raise BadAnswer(f"spec.pool.generation: {generation} is negative")
        devices = _at(obj, "spec.devices", list, required=False) or []
        for i, device in enumerate(devices):
            where = f"spec.devices[{i}]"
            if not isinstance(device, dict):
                raise BadAnswer(f"{where}: not an object")
            _at(device, "name", str)
            _at(device, "attributes", dict, required=False)
            for j, taint in enumerate(_at(device, "taints", list, required=False) or []):
                if not isinstance(taint, dict):
                    raise BadAnswer(f"{where}.taints[{j}]: not an object")
    except BadAnswer as exc:
        return str(exc)
    return None


def slice_holder(obj: Mapping[str, Any]) -> tuple[str, str]:
    """A ResourceSlice's driver and node ("" when it is not bound to one node)."""
    return _at(obj, "spec.driver", str), _at(obj, "spec.nodeName", str, required=False) or ""


@dataclass(frozen=True, slots=True)
class Allocated:
    """One allocation result of a claim for the driver."""

    request: str
    pool: str
    device: str
    admin_access: bool


def claim_results(
    claim: Mapping[str, Any], namespace: str, name: str, driver: str
) -> tuple[str, tuple[Allocated, ...] | None]:
    """The claim's UID and its allocation results for ``driver`` (None: not allocated).

    BadAnswer names the first field the driver needs that is missing, of the wrong type, or not a
    name the API allows (a device name with a newline, a pool with a ``?``): such a claim is
    refused, never half-read. Results of other drivers are only checked to be objects.
    """
    for field, expected in (("metadata.namespace", namespace), ("metadata.name", name)):
        found = _at(claim, field, str)
        if found != expected:
            raise BadAnswer(f"{field}: {shown(found)}, not the claim asked for")
    uid: str = _at(claim, "metadata.uid", str)
    allocation = _at(claim, "status.allocation", dict, required=False)
    if not allocation:
        return uid, None
    results = _at(allocation, "devices.results", list, required=False) or []
    if len(results) > MAX_RESULTS:
        raise BadAnswer(f"status.allocation.devices.results: {len(results)} entries, at most {MAX_RESULTS}")
    out: list[Allocated] = []
    for i, result in enumerate(results):
        where = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, dict):
            raise BadAnswer(f"{where}: not an object")
        try:
            if _at(result, "driver", str) != driver:
                continue
            values = {key: _at(result, key, str) for key in ("request", "pool", "device")}
            admin = _at(result, "adminAccess", bool, required=False) or False
        except BadAnswer as exc:
            raise BadAnswer(f"{where}.{exc}") from None
        for key, rule, what in (
            ("request", is_request_name, "a request name"),
            ("pool", is_pool_name, "a pool name"),
            ("device", is_dns_label, "a DNS label"),
        ):
            if not rule(values[key]):
                raise BadAnswer(f"{where}.{key}: {shown(values[key])} is not {what}")
        out.append(Allocated(values["request"], values["pool"], values["device"], admin))
    return uid, tuple(out)
