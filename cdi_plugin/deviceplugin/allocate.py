"""Allocate, as pure functions: device IDs in, CDI names and ``cdi.k8s.io/`` annotations out.

A container's answer holds only the fully-qualified CDI names of its devices (replicas of one
device give one name), in the ``cdi_devices`` field and/or one annotation, per ``--cdi-strategy``.

Annotation key: ``cdi.k8s.io/<plugin>_<id>``, following the CDI library's ``AnnotationKey`` rules
(the part after the prefix at most 63 characters, letters and digits at both ends, ``_ - .``
inside). ``<plugin>`` is the resource name with ``/`` turned into ``_`` (``cdi-plugin.io/fuse``
gives ``cdi-plugin.io_fuse``; a domain cannot contain ``_``, so distinct resources give distinct
plugins), cut and tagged with a hash of the resource name when too long. ``<id>`` is the first 12
hex digits of the SHA-256 of the container's sorted, de-duplicated device IDs. So a key is the
same for the same request and differs between resources: when the kubelet merges the annotations
of all resources of a container it keeps the first value of a clashing key, and no device of
another resource can be dropped that way.

Before answering, every ID must be known and Healthy and its CDI name must resolve in the spec
directories right now; otherwise the whole request fails (nothing is half-allocated) with an
:class:`AllocationError` naming the ID.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from cdi_plugin.cdi.names import short_hash
from cdi_plugin.deviceplugin.settings import Strategy
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import shown

ANNOTATION_PREFIX = "cdi.k8s.io/"
MAX_ANNOTATION_NAME = 63
_REQUEST_HASH = 12
_ANNOTATION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")

ErrorCode = Literal["invalid-argument", "failed-precondition"]


class AllocationError(CdiPluginError):
    """The request cannot be served; ``code`` maps to a gRPC status."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Lookup:
    """What Allocate knows of one advertised ID."""

    qualified_name: str
    healthy: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    cdi_devices: tuple[str, ...]
    annotations: dict[str, str]


@functools.lru_cache(maxsize=256)
def annotation_plugin(resource: str) -> str:
    """``<plugin>`` of the annotation key for ``resource``."""
    plugin = resource.replace("/", "_")
    room = MAX_ANNOTATION_NAME - 1 - _REQUEST_HASH
    if len(plugin) > room:
        tag = short_hash(resource, 8)
        plugin = plugin[: room - len(tag) - 1].rstrip("_.-") + "-" + tag
    return plugin


def annotation_key(resource: str, device_ids: Sequence[str]) -> str:
    """The deterministic ``cdi.k8s.io/<plugin>_<id>`` key of one container's devices of ``resource``."""
    request = short_hash(",".join(sorted(set(device_ids))), _REQUEST_HASH)
    name = f"{annotation_plugin(resource)}_{request}"
    if len(name) > MAX_ANNOTATION_NAME or not _ANNOTATION_NAME.fullmatch(name):
        raise ValueError(f"cannot build a CDI annotation key for resource {resource!r}: {name!r}")
    return ANNOTATION_PREFIX + name


def allocate_container(
    resource: str,
    device_ids: Sequence[str],
    lookup: Callable[[str], Lookup | None],
    check: Callable[[str], str | None],
    strategy: Strategy,
) -> ContainerAllocation:
    """One container's answer; ``check(name)`` says why a CDI name cannot be handed out, or None."""
    if not device_ids:
        raise AllocationError("invalid-argument", f"a container request for {resource} names no device IDs")
    names: dict[str, None] = {}
    for device_id in device_ids:
        found = lookup(device_id)
        if found is None:
            # shown: escaped and cut, so that any ID fits in one log line and in the gRPC status
            raise AllocationError("invalid-argument", f"unknown device ID {shown(device_id)} for {resource}")
        if not found.healthy:
            raise AllocationError(
                "failed-precondition", f"device {device_id!r} of {resource} is Unhealthy: {found.reason}"
            )
        problem = check(found.qualified_name)
        if problem:
            raise AllocationError(
                "failed-precondition", f"device {device_id!r} ({found.qualified_name}) {problem}"
            )
        names[found.qualified_name] = None
    cdi_devices = tuple(names)
    annotations: dict[str, str] = {}
    if strategy in ("annotations", "both"):
        annotations[annotation_key(resource, device_ids)] = ",".join(cdi_devices)
    return ContainerAllocation(cdi_devices if strategy in ("cri", "both") else (), annotations)


def allocate(
    resource: str,
    requests: Sequence[Sequence[str]],
    lookup: Callable[[str], Lookup | None],
    check: Callable[[str], str | None],
    strategy: Strategy,
) -> list[ContainerAllocation]:
    """One answer per container request, or :class:`AllocationError` for the whole request."""
    if not requests:
        raise AllocationError(
            "invalid-argument", f"the Allocate request for {resource} has no container requests"
        )
    return [allocate_container(resource, ids, lookup, check, strategy) for ids in requests]
