"""What keeping the prepared claims durable costs: ``cdi-plugin serve --api dra`` of this checkout
beside another installation (``--compare``, e.g. an older checkout's ``.venv/bin/cdi-plugin``), in
one run, calls alternating.

1. End to end, over the DRA socket, each call against each driver in turn, with N claims (of a
   device each) prepared on the node before and kept throughout: the no-op
   (NodePrepareResources of no claim), a new claim of one device, a call of 8 new claims (as a
   pod with 8 claims makes: one write of the file for the call), and NodeUnprepareResources of 1
   and of 8 claims. Each driver has its own fake API server (HTTP, in this process) holding every
   claim before it starts. p50/p99 in ms, each p50 against its driver's no-op, and the ratio of
   the two drivers' p50s.
2. The write alone, in this process, with N claims prepared on the node (the document encoded
   once): into the older of the file's two slots in place with one fdatasync (how the driver
   writes it), replacing the file atomically (a temporary file fsynced, renamed, the directory
   fsynced: how it was written before slots, and how it is still created and grown), and the
   same without fsync (not durable).

The kubelet's directory is a temporary directory (``$TMPDIR``); its file system and the load
average are printed: an fsync costs what the disk makes it cost.

    .venv/bin/python bench/bench_prepared.py [--calls 300] [--claims 20] [--compare PROGRAM]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from figures import load, pct  # noqa: E402

from cdi_plugin.dra import api  # noqa: E402
from cdi_plugin.dra.prepare import PreparedDevice  # noqa: E402
from cdi_plugin.dra.preparedstate import PreparedState, encode  # noqa: E402
from cdi_plugin.store import slotfile  # noqa: E402
from cdi_plugin.store.atomic import write_atomic  # noqa: E402
from tests.deviceplugin.helpers import make_node  # noqa: E402
from tests.dra.conftest import DRIVER, NODE, write_spec  # noqa: E402
from tests.dra.fakeapiserver import FakeApiServer, running  # noqa: E402
from tests.dra.fakekubelet import FakeKubelet  # noqa: E402
from tests.dra.serving import CDI_PLUGIN, DraNode  # noqa: E402
from tests.dra.test_kubelet import claim_obj  # noqa: E402

KIND = "cdi-plugin.io/bench"
DEVICES = 8


def file_system(path: Path) -> str:
    """The type and source of the mount holding ``path`` (/proc/self/mounts)."""
    best = ("", "?", "?")
    with open("/proc/self/mounts") as fh:
        for line in fh:
            source, point, fstype, *_ = line.split()
            if str(path).startswith(point.rstrip("/") + "/") and len(point) > len(best[0]):
                best = (point, fstype, source)
    return f"{best[1]} ({best[2]} on {best[0] or '/'})"


class Driver:
    """One ``serve --api dra`` on its own stand-in node, with every claim the run prepares."""

    def __init__(self, program: Path, calls: int, held: int) -> None:
        self.program = program
        self.raw = Path(tempfile.mkdtemp(prefix="dra-bench-"))  # short: unix socket paths
        server = FakeApiServer()
        server.add_node(NODE)
        self.node = DraNode(
            self.raw / "cdi", self.raw / "dev", self.raw / "k", self.raw / "kubeconfig", server
        )
        for d in (self.node.dev, self.node.device_plugins):
            d.mkdir(parents=True)
        served = DEVICES + held
        write_spec(
            self.node.specs, KIND, {f"d{i}": str(make_node(self.node.dev / f"d{i}")) for i in range(served)}
        )
        self.held = [self._claim(f"held-{i}", DEVICES + i) for i in range(held)]
        self.one = [self._claim(f"one-{i}", i % DEVICES) for i in range(calls)]
        self.eight = [[self._claim(f"eight-{i}-{k}", k) for k in range(DEVICES)] for i in range(calls)]
        self.proc: asyncio.subprocess.Process | None = None
        self.channel: grpc.aio.Channel | None = None
        self.stub: Any = None
        self.version = ""

    def _claim(self, name: str, device: int) -> api.Claim:
        ref = api.Claim("default", name, f"uid-{name}")
        self.node.api.add_claim(claim_obj(ref, ("req", NODE, f"bench-d{device}")))
        return ref

    async def start(self) -> None:
        args = self.node.args("dra")[1:]
        self.proc = await asyncio.create_subprocess_exec(
            str(self.program), *args, stderr=asyncio.subprocess.DEVNULL
        )
        for _ in range(600):
            if self.node.registration_socket.exists():
                break
            await asyncio.sleep(0.05)
        kubelet = FakeKubelet(self.node.registry)
        await kubelet.register(self.node.registration_socket, DRIVER)
        self.version = kubelet.version
        self.channel = grpc.aio.insecure_channel(f"unix://{kubelet.endpoint}")
        self.stub = api.dra_stub(kubelet.version, self.channel)
        for i in range(0, len(self.held), 32):
            await self.prepare(self.held[i : i + 32])

    async def prepare(self, refs: list[api.Claim]) -> None:
        answer = await self.stub.NodePrepareResources(api.prepare_request(self.version, refs), timeout=30)
        errors = [e.error for e in answer.claims.values() if e.error]
        assert not errors, errors

    async def unprepare(self, refs: list[api.Claim]) -> None:
        answer = await self.stub.NodeUnprepareResources(api.unprepare_request(self.version, refs), timeout=30)
        errors = [e.error for e in answer.claims.values() if e.error]
        assert not errors, errors

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 20)
        shutil.rmtree(self.raw)


STEPS: dict[str, Callable[[Driver, int], Awaitable[None]]] = {
    "no-op: NodePrepareResources of no claim": lambda d, i: d.prepare([]),
    "Prepare: 1 new claim": lambda d, i: d.prepare([d.one[i]]),
    "Unprepare: 1 claim": lambda d, i: d.unprepare([d.one[i]]),
    "Prepare: 8 new claims in one call": lambda d, i: d.prepare(d.eight[i]),
    "Unprepare: 8 claims in one call": lambda d, i: d.unprepare(d.eight[i]),
}


async def end_to_end(programs: dict[str, Path], calls: int, held: int) -> dict[str, dict[str, list[float]]]:
    drivers = {label: Driver(program, calls, held) for label, program in programs.items()}
    out: dict[str, dict[str, list[float]]] = {label: {name: [] for name in STEPS} for label in drivers}
    with contextlib.ExitStack() as stack:
        for driver in drivers.values():
            stack.enter_context(running(driver.node.api))
        try:
            for driver in drivers.values():
                await driver.start()
            order = list(drivers.items())
            for i in range(calls):
                for name, step in STEPS.items():
                    for label, driver in order:
                        t0 = time.perf_counter()
                        await step(driver, i)
                        if i >= calls // 10:  # warm-up excluded
                            out[label][name].append((time.perf_counter() - t0) * 1000)
                        await asyncio.sleep(0.001)
                order.reverse()  # each goes first in turn
        finally:
            for driver in drivers.values():
                await driver.stop()
    return out


def write_costs(claims: int, runs: int) -> dict[str, list[float]]:
    directory = Path(tempfile.mkdtemp(prefix="dra-bench-state-"))
    slots, plain = directory / "prepared.json", directory / "plain.json"
    state = PreparedState(
        {
            f"uid-{i}": (PreparedDevice(("req",), NODE, f"bench-d{i}", (f"{KIND}=d{i}",)),)
            for i in range(claims)
        }
    )
    data = encode(state)
    seen = slotfile.write(slots, data, None, 4 << 20)

    def in_place() -> None:
        nonlocal seen
        seen = slotfile.write(slots, data, seen, 4 << 20)

    cases: dict[str, Callable[[], None]] = {
        "in place, one slot fdatasynced (now)": in_place,
        "atomic replace, file and directory fsynced (before)": lambda: write_atomic(plain, data, 0o600),
        "atomic replace without fsync (not durable)": lambda: write_atomic(plain, data, 0o600, durable=False),
    }
    out: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for _ in range(runs):
            for name, case in cases.items():
                t0 = time.perf_counter()
                case()
                out[name].append((time.perf_counter() - t0) * 1000)
        assert slotfile.read(slots, 4 << 20, "bench").record == data
        assert seen.file[1] == slots.stat().st_ino  # every write in place
    finally:
        shutil.rmtree(directory)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind per driver")
    parser.add_argument(
        "--claims", type=int, default=20, help="claims prepared on the node throughout (a device each)"
    )
    parser.add_argument("--compare", type=Path, help="another installation's cdi-plugin program, run beside")
    args = parser.parse_args()
    programs = {"this checkout": CDI_PLUGIN}
    if args.compare is not None:
        programs["compared"] = args.compare
    print(f"python {sys.version.split()[0]}; kubelet directory on {file_system(Path(tempfile.gettempdir()))}")
    print(f"load average before: {load()}")
    results = asyncio.run(end_to_end(programs, args.calls, args.claims))
    labels = list(results)
    print(f"1. end to end, {args.claims} claims prepared on the node, {DEVICES + args.claims} devices "
          "served, calls alternating between the drivers, 1 ms apart (ms)")  # fmt: skip
    print(f"  {'':<36}" + "".join(f" {label + ' p50':>20} {'p99':>7} {'/no-op':>7}" for label in labels)
          + ("   ratio p50" if len(labels) == 2 else ""))  # fmt: skip
    noop = {label: statistics.median(results[label][next(iter(STEPS))]) for label in labels}
    for name in STEPS:
        line = f"  {name:<36}"
        for label in labels:
            values = results[label][name]
            p50 = statistics.median(values)
            line += f" {p50:20.3f} {pct(values, 0.99):7.3f} {p50 / noop[label]:6.2f}x"
        if len(labels) == 2:
            ours, theirs = (statistics.median(results[label][name]) for label in labels)
            line += f"   {ours / theirs:8.2f}x"
        print(line)
    print(f"2. the write alone, {args.claims} claims prepared on the node (ms)")
    for name, values in write_costs(args.claims, max(50, args.calls // 3)).items():
        print(f"  {name:<56} p50 {statistics.median(values):7.3f}  p99 {pct(values, 0.99):7.3f}")
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
