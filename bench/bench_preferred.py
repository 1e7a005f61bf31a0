"""Benchmark GetPreferredAllocation of ``cdi-plugin serve``, and what a large request does to the
other calls on its socket.

The plugin runs as its own process, serving ``--devices`` devices of ``--replicas`` replicas
each; this process is the kubelet-like gRPC client on the plugin's unix socket. Prints, in one
run:

* the kubelet's request (every advertised ID available, one to pick) and GetDevicePluginOptions
  (the no-op baseline), p50/p99;
* a request near the kubelet's 4 MiB limit naming IDs the resource does not have (what a buggy
  or hostile client can send): how long its answer (or refusal) takes, and the worst latency of
  no-op calls sent every 5 ms while it runs (the event loop that serves every RPC, ListAndWatch
  and the health service included).

Run as root (device nodes are made with mknod in a temporary directory):

    .venv/bin/python bench/bench_preferred.py [--devices 1000] [--replicas 4] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import line, load  # noqa: E402

from cdi_plugin.deviceplugin import api  # noqa: E402
from tests.deviceplugin.fake_kubelet import FakeKubelet  # noqa: E402
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec  # noqa: E402

KIND = "cdi-plugin.io/bench"
VENV_BIN = Path(sys.executable).parent
#: IDs of 10 characters: about 4 MB of them stay under the kubelet's 4 MiB.
HOSTILE_IDS = 340_000


def _request(available: list[str], size: int) -> api.PreferredAllocationRequest:
    return api.PreferredAllocationRequest(
        container_requests=[
            api.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)
        ]
    )


async def scenario(devices: int, replicas: int, calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="cdi-plugin-bench-") as raw:
        layout = Layout.under(Path(raw))
        nodes = {f"dev{i}": [make_node(layout.dev / f"n{i}", os.makedev(1, 3))] for i in range(devices)}
        write_spec(layout.etc, spec_of(KIND, nodes))
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(VENV_BIN / "cdi-plugin"), "serve", "--spec-dir", str(layout.etc),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                "--replicas", str(replicas), stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                client = await kubelet.wait_registered(KIND, timeout=300)
                await client.wait_until(lambda d: len(d) == devices * replicas, timeout=60)
                await client.stop_following()
                stub = client.stub
                kubelets = _request(sorted(client.devices), 1)
                noop, preferred = [], []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await stub.GetDevicePluginOptions(api.Empty(), timeout=30)
                    t1 = time.perf_counter()
                    await stub.GetPreferredAllocation(kubelets, timeout=30)
                    noop.append((t1 - t0) * 1000)
                    preferred.append((time.perf_counter() - t1) * 1000)
                print(line("GetDevicePluginOptions (no-op)", noop))
                print(line(f"GetPreferredAllocation, {len(client.devices)} IDs", preferred))

                hostile = _request([f"x{i:09d}" for i in range(HOSTILE_IDS)], 1)
                size = hostile.ByteSize()
                answered, stalls = [], []
                for _ in range(5):
                    probes: list[float] = []
                    done = asyncio.Event()

                    async def probe(probes: list[float] = probes, done: asyncio.Event = done) -> None:
                        while not done.is_set():
                            t0 = time.perf_counter()
                            await stub.GetDevicePluginOptions(api.Empty(), timeout=30)
                            probes.append((time.perf_counter() - t0) * 1000)
                            await asyncio.sleep(0.005)

                    prober = asyncio.create_task(probe())
                    await asyncio.sleep(0.05)
                    t0 = time.perf_counter()
                    try:
                        await stub.GetPreferredAllocation(hostile, timeout=30)
                        outcome = "answered"
                    except grpc.aio.AioRpcError as exc:
                        outcome = exc.code().name
                    answered.append((time.perf_counter() - t0) * 1000)
                    done.set()
                    await prober
                    stalls.append(max(probes))
                print(f"  a request of {HOSTILE_IDS} unknown IDs ({size} bytes): {outcome}")
                print(line("  its call", answered))
                print(line("  worst no-op latency during it", stalls))
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(
        f"cdi-plugin serve, {args.devices} devices x {args.replicas} replicas, "
        f"python {sys.version.split()[0]}, load {load()}"
    )
    asyncio.run(scenario(args.devices, args.replicas, args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
