"""What the kubelet is told of the health of the pool's devices (KEP-4680); pure.

Every message of a health stream lists every device of the pool, by the name the ResourceSlices
publish, Healthy or Unhealthy as the inventory has it: a device with a host node missing, or
whose spec entry is gone (for its grace period), is Unhealthy, with the inventory's reason as the
message, cut as the kubelet would cut it. The kubelet takes a device as Unknown when no message
has refreshed it within its timeout, so the driver sends the list again every :data:`REFRESH`
seconds even when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdi_plugin.dra.inventory import ServedDevice
from cdi_plugin.dra.names import device_names

#: The statuses, as the pod's ``allocatedResourcesStatus`` shows them.
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"

#: Seconds after which the kubelet takes a device the driver stopped telling it about as Unknown,
#: and how often the driver sends the list again (well within that, a busy node included).
TIMEOUT = 30
REFRESH = TIMEOUT / 3

#: The kubelet keeps a message of up to MESSAGE_MAX characters; a longer one becomes its first
#: MESSAGE_CUT characters and ``...``.
MESSAGE_MAX = 1024
MESSAGE_CUT = 1021


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """One device's entry in a message of the health stream."""

    pool_name: str
    device_name: str
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str = ""
    last_updated: int = 0  # Unix seconds
    timeout: int = 0  # seconds


def cut(message: str) -> str:
    """``message`` as the kubelet keeps it."""
    return message if len(message) <= MESSAGE_MAX else message[:MESSAGE_CUT] + "..."


def pool_health(
    pool: str,
    devices: Mapping[str, ServedDevice],
    *,
    now: float,
    timeout: int = TIMEOUT,
    names: Mapping[str, str] | None = None,
) -> list[DeviceHealth]:
    """Every device of ``devices`` (the inventory's, by CDI name) in device name order, stamped
    ``now`` (Unix time); ``names`` are :func:`~cdi_plugin.dra.names.device_names` of them, when
    the caller keeps them."""
    names = device_names(devices) if names is None else names
    stamp = int(now)
    out = [
        DeviceHealth(pool, names[cdi], HEALTHY, "", stamp, timeout)
        if d.healthy
        else DeviceHealth(pool, names[cdi], UNHEALTHY, cut(d.reason or "unhealthy"), stamp, timeout)
        for cdi, d in devices.items()
    ]
    out.sort(key=lambda h: h.device_name)
    return out
