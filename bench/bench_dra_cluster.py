"""Benchmark what the DRA driver of ``cdi-plugin serve --api dra`` costs in a large cluster: its
memory and CPU against the cluster's claims, and the requests it sends while nothing happens.

The driver runs as its own process, registered with a fake kubelet (this process), against a fake
API server (real HTTP on 127.0.0.1, in this process) holding ResourceClaims allocated on other
nodes: about 1 KiB of JSON each, in 100 namespaces, 10 of them modified every second (a busy
cluster's churn). The node serves 10 devices and has no claim of its own.

1. Memory and CPU with 0, 20,000 and 100,000 such claims: once the driver has settled (its slices
   published, and whatever it lists of the claims listed, then ``--settle`` seconds), VmRSS and
   VmHWM at the end of a ``--window`` of churn, and the CPU time (user and system) the process
   used over that window. Target: VmRSS with 100,000 claims within 5 MiB of VmRSS with none.
2. Requests per node per hour when idle: the same with 20,000 claims and their churn, the server
   keeping only the last 1000 versions (as a watch cache does; older versions answer 410),
   every request the driver sends counted over ``--idle`` seconds after its first publish and
   scaled to an hour, by kind. Target: no list in the hour, beyond watch renewals nothing.

``--compare BIN_DIR`` runs the same with another checkout's ``cdi-plugin``
(``<another checkout>/.venv/bin``, for instance main's) in the same run: the baseline. The idle
counts of both run at the same time (counting is not disturbed by load); memory and CPU one after
the other.

    .venv/bin/python bench/bench_dra_cluster.py [--compare <another checkout>/.venv/bin]
        [--sizes 0,20000,100000] [--settle 10] [--window 30] [--idle 180]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.deviceplugin.helpers import make_node  # noqa: E402
from tests.dra.conftest import DRIVER, NODE, write_spec  # noqa: E402
from tests.dra.fakeapiserver import ALL_CLAIMS, FakeApiServer, running  # noqa: E402
from tests.dra.fakekubelet import FakeKubelet  # noqa: E402
from tests.dra.serving import DraNode, published  # noqa: E402

VENV_BIN = Path(sys.executable).parent
KIND = "cdi-plugin.io/bench"
CHURN_PER_S = 10
RSS_TARGET_MIB = 5.0
HISTORY = 1000


def foreign_claim(i: int, rv: int) -> dict[str, Any]:
    """A claim of another node's GPU, about 1 KiB of JSON, as a scheduler leaves it."""
    ns, name, uid = f"team-{i % 100}", f"job-{i}-gpu", f"{i:08x}-2c1d-4c59-9d0f-0f6e3b3c9b1e"
    node = f"node-{i % 5000}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": ns, "name": name, "uid": uid, "resourceVersion": str(rv),
            "creationTimestamp": "2026-11-01T10:00:00Z", "generation": 1,
            "labels": {"app.kubernetes.io/name": f"job-{i}", "team": f"team-{i % 100}"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"job-{i}-0", "uid": uid[::-1],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": node,
                                         "device": f"gpu-{i % 8}"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                "allocationTimestamp": "2026-11-01T10:00:01Z",
            },
            "reservedFor": [{"resource": "pods", "name": f"job-{i}-0", "uid": uid[::-1]}],
        },
    }  # fmt: skip


def cluster(claims: int, history: int | None = None) -> FakeApiServer:
    server = FakeApiServer()
    server.add_node(NODE)
    for i in range(claims):
        obj = foreign_claim(i, server.revision + 1 + i)
        server.claims[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    server.revision += claims
    server.keep = history
    return server


def churn(server: FakeApiServer, claims: int, stop: threading.Event) -> None:
    """CHURN_PER_S claims modified a second (a new claim in an empty cluster)."""
    i = 0
    while not stop.wait(1 / CHURN_PER_S):
        n = i % claims if claims else 10**6 + i % 10
        server.add_claim(
            foreign_claim(n, 0) | {"metadata": {**foreign_claim(n, 0)["metadata"], "generation": i}}
        )
        i += 1


def proc_stat(pid: int) -> tuple[float, int, int]:
    """CPU seconds (user and system), VmRSS and VmHWM in KiB."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return cpu, int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


class Node:
    """``serve --api dra`` of ``bin_dir`` on a stand-in node with 10 devices, against ``server``."""

    def __init__(self, server: FakeApiServer, bin_dir: Path) -> None:
        self.raw = Path(tempfile.mkdtemp(prefix="dra-cl-"))  # short: unix socket paths
        self.node = DraNode(
            self.raw / "cdi", self.raw / "dev", self.raw / "k", self.raw / "kubeconfig", server
        )
        self.node.dev.mkdir()
        self.node.device_plugins.mkdir(parents=True)
        write_spec(
            self.node.specs, KIND, {f"d{i}": str(make_node(self.node.dev / f"d{i}")) for i in range(10)}
        )
        self.bin_dir = bin_dir
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        args = self.node.args("dra")
        args[0] = str(self.bin_dir / "cdi-plugin")
        self.proc = await asyncio.create_subprocess_exec(*args, stderr=asyncio.subprocess.DEVNULL)
        await until(self.node.registration_socket.exists, 120, "the registration socket")
        await FakeKubelet(self.node.registry).register(self.node.registration_socket, DRIVER)
        await until(lambda: published(self.node), 300, "the first publish")

    async def stop(self) -> None:
        """The process ended (its exit status in ``proc.returncode``), its directory removed."""
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 30)
        shutil.rmtree(self.raw)


@contextlib.asynccontextmanager
async def churned(server: FakeApiServer, claims: int, bin_dir: Path) -> AsyncIterator[Node]:
    """``bin_dir``'s driver serving against ``server``, whose ``claims`` churn meanwhile."""
    stop = threading.Event()
    with running(server):
        node = Node(server, bin_dir)
        spinner = threading.Thread(target=churn, args=(server, claims, stop), daemon=True)
        try:
            await node.start()
            spinner.start()
            yield node
        finally:
            stop.set()
            if spinner.is_alive():
                spinner.join()
            await node.stop()


async def until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


def claims_listed(server: FakeApiServer) -> bool:
    """Whatever the driver lists of the claims is listed: it watches them, or never asked."""
    calls = [c for c in server.calls if c.path == ALL_CLAIMS]
    return not calls or any(c.watch for c in calls)


async def footprint(bin_dir: Path, claims: int, settle: float, window: float) -> tuple[int, int, float]:
    """VmRSS, VmHWM (KiB) and CPU % of one core over the window."""
    server = cluster(claims)
    async with churned(server, claims, bin_dir) as node:
        await until(lambda: claims_listed(server), 600, "the claims listed")
        await asyncio.sleep(settle)
        assert node.proc is not None
        cpu0, _, _ = proc_stat(node.proc.pid)
        await asyncio.sleep(window)
        cpu1, rss, hwm = proc_stat(node.proc.pid)
    assert node.proc.returncode == 0, node.proc.returncode
    return rss, hwm, (cpu1 - cpu0) / window * 100


def kind(call: Any) -> str:
    if call.method != "GET":
        return "write"
    if call.watch:
        return "watch"
    return "LIST" if call.path in (ALL_CLAIMS, "/apis/resource.k8s.io/v1/resourceslices") else "GET"


async def idle_requests(bin_dir: Path, claims: int, idle: float) -> Counter[str]:
    """Requests by kind over ``idle`` seconds after the first publish (and 5 s more)."""
    server = cluster(claims, HISTORY)
    async with churned(server, claims, bin_dir):
        await asyncio.sleep(5)
        start = time.monotonic()
        await asyncio.sleep(idle)
        end = time.monotonic()
    return Counter(kind(c) for c in server.calls if start <= c.time < end)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--compare", type=Path, metavar="BIN_DIR", help="another checkout's venv bin directory"
    )
    parser.add_argument("--sizes", default="0,20000,100000", help="claims in the cluster, comma-separated")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the driver settled")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of churn CPU is measured over")
    parser.add_argument("--idle", type=float, default=180.0, help="seconds requests are counted over")
    args = parser.parse_args()
    bins = [VENV_BIN, *([args.compare] if args.compare else [])]
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"cdi-plugin serve --api dra, python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    print(f"1. 10 devices; claims of other nodes in the cluster, {CHURN_PER_S} modified a second; "
          f"after {args.settle:g} s settled, over {args.window:g} s")  # fmt: skip
    print(f"  {'claims':>8} {'checkout':<32} {'VmRSS':>10} {'VmHWM':>10} {'CPU':>7}")
    rss: dict[tuple[Path, int], int] = {}
    for claims in sizes:
        for bin_dir in bins:
            r, h, cpu = asyncio.run(footprint(bin_dir, claims, args.settle, args.window))
            rss[bin_dir, claims] = r
            name = "this checkout" if bin_dir == VENV_BIN else str(bin_dir)
            print(f"  {claims:>8} {name:<32} {r / 1024:6.1f} MiB {h / 1024:6.1f} MiB {cpu:6.2f}%", flush=True)
    missed = 0
    if len(sizes) > 1:
        for bin_dir in bins:
            grew = (rss[bin_dir, sizes[-1]] - rss[bin_dir, sizes[0]]) / 1024
            name = "this checkout" if bin_dir == VENV_BIN else str(bin_dir)
            verdict = "" if bin_dir != VENV_BIN else (" ok" if grew <= RSS_TARGET_MIB else " MISSED")
            missed += bin_dir == VENV_BIN and grew > RSS_TARGET_MIB
            print(f"  {name}: VmRSS at {sizes[-1]} claims - at {sizes[0]}: {grew:+.1f} MiB "
                  f"(target <= {RSS_TARGET_MIB:g} MiB){verdict}")  # fmt: skip

    print(f"2. requests per node per hour, idle: 20000 claims, {CHURN_PER_S} modified a second, the server "
          f"keeping the last {HISTORY} versions; counted over {args.idle:g} s")  # fmt: skip

    async def both() -> list[Counter[str]]:
        return list(await asyncio.gather(*(idle_requests(b, 20000, args.idle) for b in bins)))

    print(f"  {'checkout':<32} {'LIST':>6} {'GET':>6} {'watch':>6} {'write':>6} {'total':>7}")
    for bin_dir, counts in zip(bins, asyncio.run(both()), strict=True):
        per_hour = {k: v * 3600 / args.idle for k, v in counts.items()}
        name = "this checkout" if bin_dir == VENV_BIN else str(bin_dir)
        cells = " ".join(f"{per_hour.get(k, 0):6.0f}" for k in ("LIST", "GET", "watch", "write"))
        print(f"  {name:<32} {cells} {sum(per_hour.values()):7.0f}")
        missed += bin_dir == VENV_BIN and counts["LIST"] > 0
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
