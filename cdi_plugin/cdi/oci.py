"""An OCI runtime spec (a bundle's ``config.json``) as the CDI library edits it.

:func:`container_of` takes the parts CDI edits out of the document, checking the types it relies
on; :func:`with_container` puts them back into a copy. Every other field is kept as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from cdi_plugin.cdi.inject import HOOK_STAGES, Container, Placed
from cdi_plugin.errors import CdiPluginError

Json = dict[str, Any]


class OciSpecError(CdiPluginError):
    """The document is not an OCI runtime spec the CDI library could edit."""


def _get(parent: Json, key: str, ptr: str, kind: type, what: str) -> Any:
    value = parent.get(key)
    if value is not None and not isinstance(value, kind):
        raise OciSpecError(f"{ptr}/{key}: expected {what}")
    return value


def _items(parent: Json, key: str, ptr: str, check: Callable[[Any], bool], what: str) -> list[Any]:
    """The list at ``key``, each item ``what`` ``check`` accepts."""
    values = _get(parent, key, ptr, list, "a list") or []
    for i, value in enumerate(values):
        if not check(value):
            raise OciSpecError(f"{ptr}/{key}/{i}: expected {what}")
    return list(values)


_ID = "an integer from 0 to 4294967295"
_DEVICE = "an object with a path"
_MOUNT = "an object with a destination"


def _is_uint32(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _has(key: str) -> Callable[[Any], bool]:
    """An object whose ``key`` is a string."""
    return lambda value: isinstance(value, dict) and isinstance(value.get(key), str)


def container_of(doc: Any) -> Container:
    """The parts of ``doc`` CDI edits; :class:`OciSpecError` names the first one of a wrong type."""
    if not isinstance(doc, dict):
        raise OciSpecError("not a JSON object")
    process = _get(doc, "process", "", dict, "an object") or {}
    user = _get(process, "user", "/process", dict, "an object") or {}
    # null is 0, as Go reads it
    ids = {key: 0 if user.get(key) is None else user[key] for key in ("uid", "gid")}
    for key, value in ids.items():
        if not _is_uint32(value):
            raise OciSpecError(f"/process/user/{key}: expected {_ID}")
    linux = _get(doc, "linux", "", dict, "an object") or {}
    resources = _get(linux, "resources", "/linux", dict, "an object") or {}
    hooks = _get(doc, "hooks", "", dict, "an object") or {}
    net = _get(linux, "netDevices", "/linux", dict, "an object") or {}
    for name, value in net.items():
        if not isinstance(value, dict):
            raise OciSpecError(f"/linux/netDevices/{name}: expected an object")
    rdt = _get(linux, "intelRdt", "/linux", dict, "an object")
    _items(linux, "namespaces", "/linux", _is_object, "an object")

    def placed(values: list[Any]) -> list[Placed]:
        return [Placed(v) for v in values]

    return Container(
        uid=ids["uid"],
        gid=ids["gid"],
        env=placed(_items(process, "env", "/process", lambda v: isinstance(v, str), "a string")),
        devices=placed(_items(linux, "devices", "/linux", _has("path"), _DEVICE)),
        device_rules=placed(_items(resources, "devices", "/linux/resources", _is_object, "an object")),
        net_devices={name: Placed(value) for name, value in net.items()},
        mounts=placed(_items(doc, "mounts", "", _has("destination"), _MOUNT)),
        hooks={
            stage: placed(_items(hooks, stage, "/hooks", _is_object, "an object")) for stage in HOOK_STAGES
        },
        intel_rdt=None if rdt is None else Placed(rdt),
        additional_gids=placed(_items(user, "additionalGids", "/process/user", _is_uint32, _ID)),
    )


def has_user_namespace(doc: Json) -> bool:
    """The CDI library adds ID mappings to the mounts it injects into such a spec."""
    namespaces = (doc.get("linux") or {}).get("namespaces") or []
    return any(ns.get("type") == "user" for ns in namespaces)


def with_container(doc: Json, container: Container) -> Json:
    """A copy of ``doc`` holding ``container``'s parts; a part that is empty and was absent (or
    null) stays absent."""
    out = copy.deepcopy(doc)

    def put(parent: Json, key: str, values: Any) -> None:
        if values or key in parent:
            parent[key] = values

    def part(parent: Json, key: str) -> Json:
        if parent.get(key) is None:  # absent or null, as the CDI library takes it
            parent[key] = {}
        value: Json = parent[key]
        return value

    process = part(out, "process")
    user = part(process, "user")
    put(process, "env", [p.value for p in container.env])
    put(user, "additionalGids", [p.value for p in container.additional_gids])
    linux = part(out, "linux")
    put(linux, "devices", [p.value for p in container.devices])
    resources = part(linux, "resources")
    put(resources, "devices", [p.value for p in container.device_rules])
    put(linux, "netDevices", {name: p.value for name, p in container.net_devices.items()})
    if container.intel_rdt is not None:
        linux["intelRdt"] = container.intel_rdt.value
    put(out, "mounts", [p.value for p in container.mounts])
    hooks = part(out, "hooks")
    for stage in HOOK_STAGES:
        put(hooks, stage, [p.value for p in container.hooks.get(stage, ())])
    for parent, key, before in (
        (process, "user", doc.get("process")),
        (linux, "resources", doc.get("linux")),
        (out, "process", doc),
        (out, "linux", doc),
        (out, "hooks", doc),
    ):
        if not parent[key] and (before or {}).get(key) is None:
            del parent[key]
    return out
