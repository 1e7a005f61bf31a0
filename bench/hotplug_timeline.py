"""What bench_hotplug.py sees of the changes it makes, in this process: the uevents, the spec file
renamed into place, the lists a separate ListAndWatch reader parses (:data:`READER`), on one
:class:`Timeline`; one change (:func:`one_change`), cycles of them, and bursts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from asyncinotify import Inotify, Mask

from cdi_plugin.discovery.udev import UdevMonitor
from tests.watch.loops import Loops

SPACING = 0.15  # seconds between steps: more than the coalescing window (100 ms)

#: The separate gRPC client: one JSON line per ListAndWatch response (time parsed, healthy IDs, all
#: IDs, time its bytes arrived). It asks gRPC for the bytes and parses them itself, to tell the
#: Python client's parsing apart.
READER = """
import json, sys, time, grpc
from cdi_plugin.deviceplugin import api
channel = grpc.insecure_channel("unix://" + sys.argv[1])
stream = channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch", api.Empty.SerializeToString)
for data in stream(api.Empty()):
    arrived = time.perf_counter()
    response = api.ListAndWatchResponse.FromString(data)
    now = time.perf_counter()
    healthy = [d.ID for d in response.devices if d.health == api.HEALTHY]
    print(json.dumps([now, healthy, len(response.devices), arrived]), flush=True)
"""


class Timeline:
    """When things happened, as seen from this process (perf_counter seconds: CLOCK_MONOTONIC, the
    same clock in the reader process)."""

    def __init__(self) -> None:
        self.uevents: list[tuple[float, str, str]] = []  # (time, action, sys_name)
        self.specs: list[float] = []  # spec file renamed into place
        #: ListAndWatch responses: time parsed, healthy IDs, how many, time their bytes arrived.
        self.lists: list[tuple[float, frozenset[str], int, float]] = []
        self.changed = asyncio.Event()

    def note(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self, found: Callable[[], float | None], timeout: float = 10.0) -> float:
        deadline = time.perf_counter() + timeout
        while (at := found()) is None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError("nothing happened in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return at


async def follow_spec(directory: Path, name: str, timeline: Timeline) -> None:
    with Inotify() as inotify:
        inotify.add_watch(directory, Mask.MOVED_TO | Mask.DELETE)
        async for event in inotify:
            if event.name is not None and str(event.name) == name:
                timeline.specs.append(time.perf_counter())
                timeline.note()


def follow_uevents(monitor: UdevMonitor, timeline: Timeline) -> None:
    events, _ = monitor.receive(10_000)
    now = time.perf_counter()
    for e in events:
        timeline.uevents.append((now, e.action, e.sys_name))
    if events:
        timeline.note()


async def follow_reader(proc: asyncio.subprocess.Process, timeline: Timeline) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        at, healthy, count, arrived = json.loads(line)
        timeline.lists.append((at, frozenset(healthy), count, arrived))
        timeline.note()


#: One change as seen from this process: its uevent, the spec file in place, the list parsed by the
#: reader, the list's bytes arrived there (perf_counter seconds).
Moments = dict[str, float]


async def one_change(timeline: Timeline, loops: Loops, n: int, action: str) -> Moments:
    """Add or remove loop device ``n``."""
    name = f"loop{n}"
    seen_events, seen_specs, seen_lists = len(timeline.uevents), len(timeline.specs), len(timeline.lists)
    if action == "add":
        loops.add(n)
    else:
        await asyncio.to_thread(loops.remove, n)  # the kernel takes ~40 ms to remove a loop device

    def uevent() -> float | None:
        return next((t for t, a, s in timeline.uevents[seen_events:] if a == action and s == name), None)

    def spec() -> float | None:
        return timeline.specs[seen_specs] if len(timeline.specs) > seen_specs else None

    def listed() -> float | None:
        wanted = action == "add"
        return next(
            (
                i
                for i, (_, healthy, *_) in enumerate(timeline.lists)
                if i >= seen_lists and (name in healthy) == wanted
            ),
            None,
        )

    t_event = await timeline.wait(uevent)
    t_spec = await timeline.wait(spec)
    index = int(await timeline.wait(listed))
    t_list, *_, t_arrived = timeline.lists[index]
    return {"event": t_event, "spec": t_spec, "listed": t_list, "arrived": t_arrived}


async def cycles(timeline: Timeline, loops: Loops, n: int, count: int) -> dict[str, list[Moments]]:
    """``count`` adds and as many removes of loop device ``n``, by action."""
    out: dict[str, list[Moments]] = {"add": [], "remove": []}
    for _ in range(count):
        for action in ("add", "remove"):
            out[action].append(await one_change(timeline, loops, n, action))
            await asyncio.sleep(SPACING)
    return out


def ms(moments: list[Moments], start: str, end: str) -> list[float]:
    return [(m[end] - m[start]) * 1000 for m in moments]


@dataclass
class Burst:
    """One burst as seen from this process (perf_counter seconds)."""

    kernel_ms: float  # how long the kernel took to create the devices
    writes: int  # spec writes it caused
    first: float  # its first uevent
    last: float  # its last uevent
    served: float  # ListAndWatch listed them all Healthy
    batches: str = ""  # what serve --scan logged meanwhile

    @property
    def served_ms(self) -> float:
        return (self.served - self.last) * 1000


async def burst(timeline: Timeline, loops: Loops, numbers: range) -> Burst:
    """Add ``numbers`` at once."""
    seen_events, seen_specs, seen_lists = len(timeline.uevents), len(timeline.specs), len(timeline.lists)
    names = {f"loop{n}" for n in numbers}
    started = time.perf_counter()
    for n in numbers:
        loops.add(n)
    took = (time.perf_counter() - started) * 1000

    def ours() -> list[float]:
        return [t for t, a, s in timeline.uevents[seen_events:] if a == "add" and s in names]

    def last_uevent() -> float | None:
        got = ours()
        return max(got) if len(got) >= len(names) else None

    def all_listed() -> float | None:
        return next((t for t, healthy, *_ in timeline.lists[seen_lists:] if names <= healthy), None)

    t_last = await timeline.wait(last_uevent)
    t_all = await timeline.wait(all_listed, timeout=30)
    await asyncio.sleep(1.0)  # writes still to come would count too
    return Burst(took, len(timeline.specs) - seen_specs, min(ours()), t_last, t_all)


async def unburst(timeline: Timeline, loops: Loops, numbers: range) -> None:
    """Remove ``numbers`` again and wait until ListAndWatch lists none of them Healthy."""
    names = {f"loop{n}" for n in numbers}
    for n in numbers:
        await asyncio.to_thread(loops.remove, n)
    await timeline.wait(
        lambda: timeline.lists[-1][0] if timeline.lists and not names & timeline.lists[-1][1] else None,
        timeout=60,
    )
    await asyncio.sleep(SPACING)
