"""Benchmark ``cdi-plugin serve`` as a real process serving 1000 devices to a fake kubelet.

Prints, in one run:

* Allocate latency p50/p99 over the plugin's unix socket, next to a no-op RPC
  (GetDevicePluginOptions) on the same socket, calls interleaved (target: Allocate p50 within
  1.5x of the no-op's);
* ListAndWatch update latency: from a spec file rewritten atomically, as cdi-gen does (the time
  starts when the new file is in place, its fsyncs done), to the new list arriving at the
  kubelet, p50/p99 over the changes (target: p99 under 200 ms); once for the 1000-device spec
  itself and once for a small second spec next to it;
* the plugin process's resident memory (VmRSS) serving 1000 devices (target: under 60 MB).

Run as root (it creates device nodes with mknod in a temporary directory):

    .venv/bin/python bench/bench_plugin.py [--devices 1000] [--calls 2000] [--changes 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import line, pct, status_kib  # noqa: E402

from cdi_plugin.cdi import codec  # noqa: E402
from cdi_plugin.cdi.model import Spec  # noqa: E402
from cdi_plugin.deviceplugin import api  # noqa: E402
from cdi_plugin.store.atomic import write_atomic  # noqa: E402
from cdi_plugin.store.ownership import OwnedFile, digest, read_record, write_record  # noqa: E402
from tests.deviceplugin.fake_kubelet import DeviceEntry, FakeKubelet, PluginClient  # noqa: E402
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec  # noqa: E402

KIND = "cdi-plugin.io/bench"
SMALL = "cdi-plugin.io/small"


def write_as_cdi_gen(directory: Path, spec: Spec) -> float:
    """Write the spec atomically, then the ownership record, as cdi-gen does; returns the
    ``perf_counter`` time at which the new spec file was in place (after its fsyncs)."""
    name = spec.kind.replace("/", "-") + ".json"
    data = codec.encode(spec)
    write_atomic(directory / name, data)
    in_place = time.perf_counter()
    record = read_record(directory)
    record[name] = OwnedFile(name, spec.kind, digest(data))
    write_record(directory, record)
    return in_place


async def update_latency(
    client: PluginClient, directory: Path, spec: Spec, done: Callable[[dict[str, DeviceEntry]], bool]
) -> float:
    """Milliseconds from the rewritten spec being in place to the kubelet holding a list where
    ``done`` holds. The write runs in a thread, so its fsyncs do not hold up this event loop."""

    async def arrival() -> float:
        await client.wait_until(done, timeout=10)
        return time.perf_counter()

    arrived = asyncio.create_task(arrival())
    in_place = await asyncio.to_thread(write_as_cdi_gen, directory, spec)
    return (await arrived - in_place) * 1000


async def bench(devices: int, calls: int, changes: int) -> int:
    failed = 0
    with tempfile.TemporaryDirectory(prefix="cdi-plugin-bench-") as raw:
        layout = Layout.under(Path(raw))
        nodes = {f"dev{i}": [make_node(layout.dev / f"n{i}", os.makedev(1, 3))] for i in range(devices)}
        write_spec(layout.etc, spec_of(KIND, nodes))
        small_node = make_node(layout.dev / "small")
        write_spec(layout.etc, spec_of(SMALL, {"s0": [small_node]}))
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "cdi_plugin.cli.plugin",
                "serve",
                "--spec-dir",
                str(layout.etc),
                "--plugin-dir",
                str(layout.plugin_dir),
                "--sysfs-root",
                str(layout.sysfs),
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                client = await kubelet.wait_registered(KIND, timeout=60)
                await client.wait_until(lambda d: len(d) == devices, timeout=60)
                small = await kubelet.wait_registered(SMALL, timeout=60)
                await small.wait_until(lambda d: len(d) == 1, timeout=60)
                ready = time.monotonic() - started
                rss_ready = status_kib(proc.pid, "VmRSS")

                stub = client.stub
                ids = sorted(client.devices)
                noop, alloc = [], []
                for i in range(calls):
                    t0 = time.perf_counter()
                    await stub.GetDevicePluginOptions(api.Empty(), timeout=5)
                    t1 = time.perf_counter()
                    request = api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
                    )
                    response = await stub.Allocate(request, timeout=5)
                    t2 = time.perf_counter()
                    assert response.container_responses[0].cdi_devices
                    if i >= calls // 10:  # warm-up excluded
                        noop.append((t1 - t0) * 1000)
                        alloc.append((t2 - t1) * 1000)

                big_updates = []
                for i in range(changes):
                    if i % 2 == 0:
                        spec = spec_of(KIND, {**nodes, f"extra{i}": nodes["dev0"]})
                        done = partial(lambda d, name: name in d, name=f"extra{i}")
                    else:
                        spec = spec_of(KIND, nodes)
                        done = partial(lambda d, name: d[name].health == api.UNHEALTHY, name=f"extra{i - 1}")
                    big_updates.append(await update_latency(client, layout.etc, spec, done))
                    await asyncio.sleep(0.03)

                small_updates = []
                for i in range(changes):
                    spec = spec_of(SMALL, {"s0": [small_node], f"s{i + 1}": [small_node]})
                    done = partial(lambda d, name: name in d, name=f"s{i + 1}")
                    small_updates.append(await update_latency(small, layout.etc, spec, done))
                    await asyncio.sleep(0.03)
                rss_end = status_kib(proc.pid, "VmRSS")
            finally:
                proc.terminate()
                code = await asyncio.wait_for(proc.wait(), 20)

    print(f"cdi-plugin serve, {devices} devices of {KIND} (+1 of {SMALL}), python {sys.version.split()[0]}")
    print(f"  ready (registered, full list at the kubelet) after {ready:.2f} s")
    print("Allocate vs no-op RPC, same unix socket, interleaved:")
    print(line("GetDevicePluginOptions (no-op)", noop))
    print(line("Allocate (1 device, re-resolved)", alloc))
    ratio = statistics.median(alloc) / statistics.median(noop)
    verdict = "ok" if ratio <= 1.5 else "MISSED"
    failed += ratio > 1.5
    print(f"  Allocate p50 / no-op p50 = {ratio:.2f}x (target <= 1.5x: {verdict})")
    print("ListAndWatch update latency (spec written -> new list at the kubelet):")
    print(line(f"{devices}-device spec rewritten", big_updates))
    print(line("small spec rewritten", small_updates))
    worst = max(pct(big_updates, 0.99), pct(small_updates, 0.99))
    verdict = "ok" if worst < 200 else "MISSED"
    failed += worst >= 200
    print(f"  worst p99 {worst:.1f} ms (target < 200 ms: {verdict})")
    print("Resident memory of the plugin process (VmRSS):")
    print(f"  after registration {rss_ready / 1024:6.1f} MiB; after the run {rss_end / 1024:6.1f} MiB")
    verdict = "ok" if rss_end < 60 * 1024 else "MISSED"
    failed += rss_end >= 60 * 1024
    print(f"  target < 60 MiB: {verdict}")
    print(f"plugin exit status after SIGTERM: {code}")
    return 1 if failed or code != 0 else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=60)
    args = parser.parse_args()
    return asyncio.run(bench(args.devices, args.calls, args.changes))


if __name__ == "__main__":
    sys.exit(main())
