"""The CDI spec as typed, immutable values (every field of spec versions 0.3.0 to 1.1.0).

``None`` always means "absent in the document"; an empty string, list or object, or a zero, is
kept as present, because presence alone can change the meaning (``intelRdt: {}`` and
``schemata: []`` raise the minimum version; ``uid: 0`` means root, not unset).
Field comments name the spec version that added a field. The module does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Strings = tuple[str, ...]
Annotations = Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceNode:
    path: str
    host_path: str | None = None  # added in 0.5.0
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    host_path: str
    container_path: str
    options: Strings | None = None
    type: str | None = None  # added in 0.4.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Hook:
    hook_name: str
    path: str
    args: Strings | None = None
    env: Strings | None = None
    timeout: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IntelRdt:
    """Added in 0.7.0."""

    clos_id: str | None = None
    l3_cache_schema: str | None = None
    mem_bw_schema: str | None = None
    enable_cmt: bool | None = None  # 0.7.0 to 1.0.0; removed in 1.1.0
    enable_mbm: bool | None = None  # 0.7.0 to 1.0.0; removed in 1.1.0
    schemata: Strings | None = None  # added in 1.1.0
    enable_monitoring: bool | None = None  # added in 1.1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class NetDevice:
    """Added in 1.1.0."""

    host_interface_name: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerEdits:
    env: Strings | None = None
    device_nodes: tuple[DeviceNode, ...] | None = None
    net_devices: tuple[NetDevice, ...] | None = None  # added in 1.1.0
    hooks: tuple[Hook, ...] | None = None
    mounts: tuple[Mount, ...] | None = None
    intel_rdt: IntelRdt | None = None  # added in 0.7.0
    additional_gids: tuple[int, ...] | None = None  # added in 0.7.0

    def is_empty(self) -> bool:
        """True when the edits change nothing (the CDI library's "empty device edits")."""
        return not (
            self.env
            or self.device_nodes
            or self.net_devices
            or self.hooks
            or self.mounts
            or self.intel_rdt is not None
            or self.additional_gids
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    name: str
    container_edits: ContainerEdits
    annotations: Annotations | None = None  # added in 0.6.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    cdi_version: str
    kind: str
    devices: tuple[Device, ...]
    annotations: Annotations | None = None  # added in 0.6.0
    container_edits: ContainerEdits | None = None

    def all_edits(self) -> list[tuple[str, ContainerEdits]]:
        """Every set of edits with the JSON pointer it sits at, spec level last."""
        edits = [(f"/devices/{i}/containerEdits", d.container_edits) for i, d in enumerate(self.devices)]
        if self.container_edits is not None:
            edits.append(("/containerEdits", self.container_edits))
        return edits
