"""Benchmark what the DRA driver's metrics cost: NodePrepareResources with and without
``--metrics-address``, side by side, and a scrape of ``/metrics``.

Two ``cdi-plugin serve --api dra`` processes of this checkout, each on its own stand-in node (its
own fake API server, real HTTP in this process, and a fake kubelet, gRPC on its unix sockets), 100
devices each; one exports metrics. Calls alternate between the two (which goes first alternates
too), so both see the same load: each a new claim of 1 device, read by the driver with a GET,
then unprepared (untimed). Then ``/metrics`` of the exporting one is scraped (its claims counted,
histograms filled): the time of a GET from this process, and the size of the answer. p50/p99.
Last, what the driver does for the metrics of one Prepare, in this process: ``DraMetrics.prepare``
and ``claims_prepared``, timed over many calls.

    .venv/bin/python bench/bench_dra_metrics.py [--calls 1000] [--scrapes 500]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from figures import load, row  # noqa: E402

from cdi_plugin.dra import api  # noqa: E402
from cdi_plugin.metrics import DraMetrics, Probes  # noqa: E402
from tests.deviceplugin.helpers import make_node  # noqa: E402
from tests.dra.conftest import DRIVER, NODE, write_spec  # noqa: E402
from tests.dra.fakeapiserver import FakeApiServer, running  # noqa: E402
from tests.dra.fakekubelet import FakeKubelet  # noqa: E402
from tests.dra.serving import DraNode, Serve  # noqa: E402
from tests.dra.test_kubelet import claim_obj  # noqa: E402

KIND = "cdi-plugin.io/bench"
DEVICES = 100


class Driver:
    """One driver process on its own node, registered with a fake kubelet."""

    def __init__(self, raw: Path, calls: int, metrics: bool) -> None:
        self.server = FakeApiServer()
        self.server.add_node(NODE, "v1.36.2")
        self.node = DraNode(raw / "cdi", raw / "dev", raw / "k", raw / "kubeconfig", self.server)
        for d in (self.node.dev, self.node.device_plugins):
            d.mkdir(parents=True)
        write_spec(
            self.node.specs, KIND, {f"d{i}": str(make_node(self.node.dev / f"d{i}")) for i in range(DEVICES)}
        )
        self.claims = []
        for i in range(calls):
            ref = api.Claim("default", f"c{i}", f"uid-{i}")
            self.server.add_claim(claim_obj(ref, ("req", NODE, f"bench-d{i % DEVICES}")))
            self.claims.append(ref)
        self.metrics = metrics
        self.url = ""
        self.stub: Any = None
        self.version = ""

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Driver]:
        extra = ["--metrics-address", "127.0.0.1:0"] if self.metrics else []
        with running(self.server):
            serve = await Serve.start(self.node.args("dra", *extra))
            try:
                await serve.wait_for(self.node.registration_socket.exists, "registration socket", 60)
                kubelet = FakeKubelet(self.node.registry)
                await kubelet.register(self.node.registration_socket, DRIVER)
                await serve.wait_for(lambda: self.server.watches, "the slices watched", 60)
                if self.metrics:
                    line = next(m for m in serve.messages() if m.startswith("serving metrics on "))
                    match = re.match(r"serving metrics on (\S+)/metrics", line)
                    assert match, line
                    self.url = match.group(1) + "/metrics"
                async with grpc.aio.insecure_channel(f"unix://{kubelet.endpoint}") as channel:
                    self.stub, self.version = api.dra_stub(kubelet.version, channel), kubelet.version
                    yield self
            finally:
                assert await serve.stop() == 0, serve.lines

    async def prepare(self, i: int) -> float:
        """Milliseconds to prepare claim ``i`` (a new one); then it is unprepared, untimed."""
        ref = self.claims[i]
        t0 = time.perf_counter()
        answer = await self.stub.NodePrepareResources(api.prepare_request(self.version, [ref]), timeout=30)
        took = (time.perf_counter() - t0) * 1000
        assert not answer.claims[ref.uid].error, answer
        await self.stub.NodeUnprepareResources(api.unprepare_request(self.version, [ref]), timeout=30)
        return took


def scrape(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as response:
        size = len(response.read())
    return (time.perf_counter() - t0) * 1000, size


async def bench(calls: int, scrapes: int) -> None:
    raws = [Path(tempfile.mkdtemp(prefix="dra-m-")) for _ in range(2)]  # short: unix socket paths
    try:
        plain, exported = Driver(raws[0], calls, False), Driver(raws[1], calls, True)
        async with plain.serving(), exported.serving():
            times: dict[str, list[float]] = {"without": [], "with": []}
            for i in range(calls):
                pair = [("without", plain), ("with", exported)]
                for label, driver in pair if i % 2 else reversed(pair):
                    took = await driver.prepare(i)
                    if i >= calls // 10:  # warm-up excluded
                        times[label].append(took)
                    await asyncio.sleep(0.001)
            print("NodePrepareResources, new claim of 1 device (ms)      p50      p99      n")
            print(row("serve --api dra", times["without"], peak=False))
            print(row("serve --api dra --metrics-address", times["with"], peak=False))
            ratio = statistics.median(times["with"]) / statistics.median(times["without"])
            print(f"  p50 with / without: {ratio:.3f}x")
            scraped = [await asyncio.to_thread(scrape, exported.url) for _ in range(scrapes)]
            print(f"GET /metrics after {calls} claims (ms)                   p50      p99      n")
            print(row("one scrape, from the request to the last byte", [t for t, _ in scraped], peak=False))
            print(f"  answer: {scraped[-1][1]} bytes")
    finally:
        for raw in raws:
            shutil.rmtree(raw)


def report_cost(rounds: int = 20, calls: int = 10000) -> None:
    from prometheus_client import CollectorRegistry

    metrics = DraMetrics(CollectorRegistry(), Probes(), DRIVER)
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(calls):
            metrics.prepare(["ok"], 0.004)
            metrics.claims_prepared(i)
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    print(f"the metrics of one Prepare, in process (us): p50 {statistics.median(per_call):.2f}, "
          f"max {max(per_call):.2f} ({rounds} rounds of {calls})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; load average before: {load()}")
    asyncio.run(bench(args.calls, args.scrapes))
    report_cost()
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
