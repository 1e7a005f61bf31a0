"""The grace period: a device that stops being served stays, Unhealthy, for a while before it goes.

A device in use whose spec entry disappears then fails visibly (the kubelet sees it Unhealthy)
instead of vanishing, and one that comes back within the period is simply Healthy again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from cdi_plugin.inventory.record import GONE_REASON, NOT_SERVED_REASON, ServedDevice


class GracePeriod:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def carry(
        self,
        before: Mapping[str, ServedDevice],
        now_served: Mapping[str, ServedDevice],
        now: float,
        resolves: Callable[[str], bool],
    ) -> dict[str, ServedDevice]:
        """``now_served`` plus the devices of ``before`` it lacks whose period is not over, as
        Unhealthy; ``resolves(name)`` tells a kind no longer served from an entry that is gone."""
        out = dict(now_served)
        for name, device in before.items():
            if name not in out:
                kept = self.keep(device, now, resolves)
                if kept is not None:
                    out[name] = kept
        return out

    def keep(self, device: ServedDevice, now: float, resolves: Callable[[str], bool]) -> ServedDevice | None:
        """A device no longer served, as it stays (Unhealthy) until its period is over; None after."""
        since = device.gone_since if device.gone_since is not None else now
        if now - since >= self.seconds:
            return None
        reason = NOT_SERVED_REASON if resolves(device.cdi_name) else GONE_REASON
        kept = replace(device, healthy=False, reason=reason, gone_since=since)
        return device if kept == device else kept

    def next_expiry(self, devices: Iterable[ServedDevice]) -> float | None:
        """When the next device in its period is due to go (monotonic seconds)."""
        return min((d.gone_since + self.seconds for d in devices if d.gone_since is not None), default=None)
