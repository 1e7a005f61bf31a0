"""Benchmark Allocate against a no-op RPC on the same socket of ``cdi-plugin serve``.

The plugin runs as its own process, serving 1000 devices; this process is the kubelet-like gRPC
client on the plugin's unix socket. Prints, in one run, for the spec directories holding only
the served spec and again holding 10,000 other spec files (kinds the plugin does not serve):

* steady: Allocate (one device) and GetDevicePluginOptions (the no-op baseline) interleaved,
  back to back and 1 ms apart, p50/p99 and the ratio of the p50s (target: Allocate p50 at most
  1.15x the no-op's);
* right after a change: the 1000-device spec rewritten as cdi-gen does (record, then the file
  renamed into place), then at once one call, timed; Allocate waits until the change is read
  (in the plugin's worker thread) and applied, the no-op does not. p50/p99 of each.

With ``--profile``, also where the time of the handlers goes: the DevicePlugin servicer called
in-process (no gRPC) over the same 1000-device inventory, its watches quiet, the mean time per
call of GetDevicePluginOptions and Allocate, and cProfile's top functions of Allocate (what runs
after the answer, its log line and metrics, included).

Run as root (device nodes are made with mknod in a temporary directory):

    .venv/bin/python bench/bench_allocate.py [--devices 1000] [--files 10000] [--calls 2000] \
        [--changes 100] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import line  # noqa: E402

from cdi_plugin.aio.pulse import Pulse  # noqa: E402
from cdi_plugin.cdi import codec  # noqa: E402
from cdi_plugin.deviceplugin import api  # noqa: E402
from cdi_plugin.deviceplugin.servicer import DevicePluginService  # noqa: E402
from cdi_plugin.deviceplugin.state import DeviceState  # noqa: E402
from cdi_plugin.inventory import NumaLocator, SpecSource  # noqa: E402
from cdi_plugin.metrics import PluginMetrics  # noqa: E402
from tests.deviceplugin.fake_kubelet import FakeKubelet  # noqa: E402
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec  # noqa: E402
from tests.deviceplugin.test_servicer import FakeContext  # noqa: E402

KIND = "cdi-plugin.io/bench"
VENV_BIN = Path(sys.executable).parent
#: Pauses between calls: none (back to back), and 1 ms, so that what the plugin does after
#: answering (its log line, its metrics) is not counted in the next call, as with the kubelet,
#: whose Allocates come one per container start.
PAUSES = (0.0, 0.001)


def foreign_specs(directory: Path, count: int) -> None:
    """``count`` spec files of other vendors' kinds, one device each (not served: not cdi-gen's)."""
    for i in range(count):
        spec = spec_of(f"vendor{i}.example/thing", {"d0": [f"/dev/thing{i}"]})
        (directory / f"vendor{i}-thing.yaml").write_bytes(codec.encode(spec, "yaml"))


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await call()
    return (time.perf_counter() - t0) * 1000


async def scenario(
    devices: int, files: int, calls: int, changes: int
) -> tuple[dict[float, tuple[list[float], list[float]]], list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="cdi-plugin-bench-") as raw:
        layout = Layout.under(Path(raw))
        nodes = {f"dev{i}": [make_node(layout.dev / f"n{i}", os.makedev(1, 3))] for i in range(devices)}
        spec = spec_of(KIND, nodes)
        grown = spec_of(KIND, {**nodes, "extra": nodes["dev0"]})
        write_spec(layout.etc, spec)
        foreign_specs(layout.etc, files)
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(VENV_BIN / "cdi-plugin"), "serve", "--spec-dir", str(layout.etc),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                client = await kubelet.wait_registered(KIND, timeout=300)
                await client.wait_until(lambda d: len(d) == devices, timeout=60)
                stub, ids = client.stub, sorted(client.devices)

                def allocate(i: int) -> Callable[[], Awaitable[Any]]:
                    request = api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
                    )
                    return lambda: stub.Allocate(request, timeout=30)

                def noop() -> Awaitable[Any]:
                    return stub.GetDevicePluginOptions(api.Empty(), timeout=30)

                steady: dict[float, tuple[list[float], list[float]]] = {}
                for pause in PAUSES:
                    noops, allocs = steady[pause] = [], []
                    for i in range(calls):
                        a, b = (noop, allocate(i)) if i % 2 else (allocate(i), noop)
                        ta = await timed(a)
                        await asyncio.sleep(pause)
                        tb = await timed(b)
                        await asyncio.sleep(pause)
                        t_noop, t_alloc = (ta, tb) if i % 2 else (tb, ta)
                        if i >= calls // 10:  # warm-up excluded
                            noops.append(t_noop)
                            allocs.append(t_alloc)

                after_noop, after_alloc = [], []
                for i in range(changes):
                    write_spec(layout.etc, grown if i % 2 == 0 else spec)
                    if i % 4 < 2:
                        after_alloc.append(await timed(allocate(i)))
                    else:
                        after_noop.append(await timed(noop))
                    await asyncio.sleep(0.05)  # let the plugin's own follow-up reading finish
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)
    return steady, after_noop, after_alloc


class _QuietWatch:
    """A directory watch with nothing pending, as the plugin's are between changes."""

    def __init__(self) -> None:
        self.pulse = Pulse()

    def unread(self) -> bool:
        return False


async def profile_handlers(devices: int, rounds: int = 5) -> None:
    with tempfile.TemporaryDirectory(prefix="cdi-plugin-bench-") as raw:
        layout = Layout.under(Path(raw))
        nodes = {f"dev{i}": [make_node(layout.dev / f"n{i}", os.makedev(1, 3))] for i in range(devices)}
        write_spec(layout.etc, spec_of(KIND, nodes))
        settings = layout.settings()
        # as cdi-plugin serve without --metrics-address
        metrics = PluginMetrics(export=False)
        state = DeviceState(
            settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs), metrics=metrics
        )
        state.sync()
        state.inventory.watch_with(_QuietWatch())
        state.inventory.watch_nodes_with(_QuietWatch())
        state.recheck_health()
        service, context = DevicePluginService(KIND, state, "both"), FakeContext()
        requests = [
            api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=[f"dev{i}"])])
            for i in range(devices)
        ]
        for request in requests:  # warm-up: every answer built once
            await service.Allocate(request, context)

        async def allocate_all() -> None:
            for request in requests:
                await service.Allocate(request, context)
                await asyncio.sleep(0)  # what runs after the answer (log line, metrics)

        async def noop_all() -> None:
            for _ in requests:
                await service.GetDevicePluginOptions(api.Empty(), context)
                await asyncio.sleep(0)

        for name, work in (
            ("GetDevicePluginOptions (no-op)", noop_all),
            ("Allocate (1 device)", allocate_all),
        ):
            t0 = time.perf_counter()
            for _ in range(rounds):
                await work()
            per_call = (time.perf_counter() - t0) / (rounds * len(requests)) * 1e6
            print(f"    {name:<34} {per_call:6.1f} us per call (handler and event loop turn, no gRPC)")
        profiler = cProfile.Profile()
        profiler.enable()
        await allocate_all()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(12)
        print("    cProfile of Allocate, top functions by own time:")
        print("\n".join("      " + row for row in out.getvalue().splitlines() if row.strip()))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="also profile the handlers in-process")
    args = parser.parse_args()
    if args.changes < 4:
        parser.error("--changes: at least 4 (they alternate two at a time between Allocate and the no-op)")
    print(f"cdi-plugin serve, {args.devices} devices served, python {sys.version.split()[0]}")
    missed = 0
    for files in (0, args.files):
        steady, after_noop, after_alloc = asyncio.run(scenario(args.devices, files, args.calls, args.changes))
        print(f"  spec directories: the served spec + {files} other spec files")
        for pause, (noop, alloc) in steady.items():
            print(f"   steady, calls interleaved on one unix socket, {pause * 1000:g} ms apart:")
            print(line("GetDevicePluginOptions (no-op)", noop, indent="    "))
            print(line("Allocate (1 device)", alloc, indent="    "))
            ratio = statistics.median(alloc) / statistics.median(noop)
            verdict = "ok" if ratio <= 1.15 else "MISSED"
            missed += ratio > 1.15
            print(f"    Allocate p50 / no-op p50 = {ratio:.2f}x (target <= 1.15x: {verdict})")
        print(f"   right after the {args.devices}-device spec was rewritten:")
        print(line("GetDevicePluginOptions (no-op)", after_noop, indent="    "))
        print(line("Allocate (waits for the reading)", after_alloc, indent="    "))
    if args.profile:
        print(f"  the handlers in-process, {args.devices} devices (log lines dropped: no handler):")
        asyncio.run(profile_handlers(args.devices))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
