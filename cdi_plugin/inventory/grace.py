"""The grace period: a device that stops being served stays, Unhealthy, for a while before it goes.

A device in use whose spec entry disappears then fails visibly (the kubelet sees it Unhealthy)
instead of vanishing, and one that comes back within the period is simply Healthy again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from cdi_plugin.inventory.record import ServedDevice


class GracePeriod:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def carry(
        self,
        before: Mapping[str, ServedDevice],
        now_served: Mapping[str, ServedDevice],
        now: float,
        why: Callable[[str], str],
    ) -> dict[str, ServedDevice]:
        """``now_served`` plus the devices of ``before`` it lacks whose period is not over, as
        Unhealthy; ``why(name)`` says why a device is no longer served (its entry is gone, its
        kind is no longer served, its name is defined twice)."""
        out = dict(now_served)
        for name, device in before.items():
            if name not in out:
                kept = self.keep(device, now, why)
                if kept is not None:
                    out[name] = kept
        return out

    def keep(self, device: ServedDevice, now: float, why: Callable[[str], str]) -> ServedDevice | None:
        """A device no longer served, as it stays (Unhealthy) until its period is over; None after."""
        since = device.gone_since if device.gone_since is not None else now
        if now - since >= self.seconds:
            return None
        kept = replace(device, healthy=False, reason=why(device.cdi_name), gone_since=since)
        return device if kept == device else kept

    def next_expiry(self, devices: Iterable[ServedDevice]) -> float | None:
        """When the next device in its period is due to go (monotonic seconds)."""
        return min((d.gone_since + self.seconds for d in devices if d.gone_since is not None), default=None)
