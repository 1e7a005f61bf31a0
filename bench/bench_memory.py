"""Resident memory of the processes the deployment runs: the figures behind deploy/'s limits.

Prints, in one run:

* the baseline: the floor of any Python device plugin, a process that imports asyncio and grpcio
  and serves one gRPC method on a unix socket (VmRSS once serving), beside every figure below;
  and the same floor without OpenSSL, as ``serve`` runs when it needs no TLS;
* ``cdi-plugin serve`` serving 1000 devices to a fake kubelet, without and with
  ``--metrics-address``, and with the DaemonSet's ``--config``: VmRSS once registered, and VmRSS
  and VmHWM (the peak) after a workload of Allocate calls, spec rewrites (the 1000-device spec
  rewritten as cdi-gen does) and, with metrics, scrapes of /metrics, /healthz and /readyz;
* ``cdi-gen scan`` as a process (peak RSS from wait4): the real host, the bundled simulated
  workstation, and 1000 recorded binder devices;
* ``cdi-plugin serve --scan`` generating the specs of 1000 devices (recorded in a fixture, which it
  watches as it watches the host) and serving them, with the embedded default classes and with
  the DaemonSet's ``--config``: once registered, and after Allocates and rewrites of the fixture
  that add and remove a device (rescan, spec rewrite, ListAndWatch); then as the DRA component
  runs it (``--api both``, every device also published as ResourceSlices to a fake API server,
  the driver registered with a fake kubelet), the figure behind deploy/dra/patch-daemonset.yaml's
  memory; then serving one device, which splits the figure into what any node pays and what the
  devices add;
* what reading the configuration costs, its schema check in the process and in a child process
  (as ``serve`` does): the first reading (at start) and the next ones (reloads);
* where the memory goes: VmRSS of a fresh interpreter after each import ``serve`` (then
  ``--metrics-address``, then ``--scan``) needs, in order, and the Python heap the 1000-device
  inventory holds (tracemalloc).

Run as root (device nodes are made with mknod in a temporary directory):

    .venv/bin/python bench/bench_memory.py [--devices 1000] [--calls 2000] [--rewrites 20]
        [--repeat N] [--compare OTHER/.venv/bin] [--scan-only]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory_processes import (  # noqa: E402
    VENV_BIN,
    binder_fixture,
    daemonset_config,
    floor,
    peak_of,
    plugin,
    serve_scan,
)

from tests.dra.conftest import NODE  # noqa: E402
from tests.dra.fakeapiserver import FakeApiServer, running  # noqa: E402


def mib(kib: int) -> str:
    return f"{kib / 1024:6.1f} MiB"


#: What ``cdi-plugin serve`` imports, in order, OpenSSL kept out as ``serve`` does without TLS (the
#: DRA driver, lightkube, prometheus_client, the generated gRPC stubs and the JSON Schema validator
#: are not among them); then, in another interpreter, the same with OpenSSL, what
#: ``--metrics-address`` adds, then ``--scan``.
SERVE_IMPORTS = (
    "asyncio", "click", "grpc", "cdi_plugin.deviceplugin.api", "asyncinotify",
    "cdi_plugin.cdi.codec", "cdi_plugin.deviceplugin.daemon", "cdi_plugin.cli.service",
)  # fmt: skip
METRICS_IMPORTS = ("prometheus_client",)
SCAN_IMPORTS = ("yaml", "pyudev", "cdi_plugin.cli.serve_scan")


_STEPS = """
import importlib, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
print("python", rss())
names = sys.argv[1:]
if names[0] == "--forgo-openssl":
    from cdi_plugin.process import forgo_openssl
    names = names[1:]
    forgo_openssl()
for name in names:
    importlib.import_module(name)
    print(name, rss())
"""

_HEAP = """
import os, sys, tempfile, tracemalloc
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec
with tempfile.TemporaryDirectory() as raw:
    layout = Layout.under(Path(raw))
    nodes = {f"d{i}": [make_node(layout.dev / f"n{i}")] for i in range(int(sys.argv[1]))}
    write_spec(layout.etc, spec_of("cdi-plugin.io/bench", nodes))
    settings = layout.settings()
    tracemalloc.start()
    state = DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs))
    state.sync()
    now, peak = tracemalloc.get_traced_memory()
    print(now, peak)
"""


def import_steps(*imports: str) -> list[tuple[str, int]]:
    """(module, VmRSS in KiB once imported) for each of ``imports`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _STEPS, *imports], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    return list(zip(out[::2], map(int, out[1::2]), strict=True))


def where_it_goes(devices: int) -> None:
    print("where the memory goes: VmRSS of a fresh interpreter after each import, in order")
    for (_, before), (name, after) in itertools.pairwise(import_steps("--forgo-openssl", *SERVE_IMPORTS)):
        print(f"  {name:44} {mib(after)}  +{(after - before) / 1024:4.1f} MiB")
    print("  the same with OpenSSL (asyncio imports ssl), then --metrics-address and --scan:")
    steps = import_steps(*SERVE_IMPORTS, *METRICS_IMPORTS, *SCAN_IMPORTS)
    print(f"  {'(the imports of serve, with OpenSSL)':44} {mib(steps[len(SERVE_IMPORTS)][1])}")
    for (_, before), (name, after) in itertools.pairwise(steps[len(SERVE_IMPORTS) :]):
        scan = (
            " (--scan)" if name in SCAN_IMPORTS else " (--metrics-address)" if name in METRICS_IMPORTS else ""
        )
        print(f"  {name + scan:44} {mib(after)}  +{(after - before) / 1024:4.1f} MiB")
    now, peak = map(
        int,
        subprocess.run(
            [sys.executable, "-c", _HEAP, str(devices), str(ROOT)], capture_output=True, text=True, check=True
        ).stdout.split(),
    )
    print(f"  Python heap of the {devices}-device inventory (tracemalloc): {now / 2**20:.1f} MiB held, "
          f"{peak / 2**20:.1f} MiB at the peak of reading the spec")  # fmt: skip


_CHECK_TIME = """
import json, statistics, sys, time
from pathlib import Path
from cdi_plugin.process import check_config_in_child
from cdi_plugin.store import configcheck
from cdi_plugin.store.configfile import parse_config
data = Path(sys.argv[1]).read_bytes()
check_config_in_child(sys.argv[2] == "child")
times = []
for _ in range(11):
    configcheck._last.clear()  # each reading a changed file
    start = time.perf_counter()
    parse_config(data, "config.yaml")
    times.append(time.perf_counter() - start)
print(json.dumps([times[0], statistics.median(times[1:])]))
"""


def config_check_time(runs: int = 11) -> None:
    """What reading the DaemonSet's configuration (parsing, checking against the schema) costs
    with the check in the process and in a child process: the first reading in a fresh
    interpreter (as ``serve`` starts), then readings of a changed file (reloads)."""
    with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
        path = Path(daemonset_config(Path(raw))[1])
        measured: dict[str, list[list[float]]] = {"in-process": [], "child": []}
        for _ in range(runs):
            for how, results in measured.items():
                command = [sys.executable, "-c", _CHECK_TIME, str(path), how]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                results.append([t * 1000 for t in json.loads(done.stdout)])
    print("reading the DaemonSet's configuration (parse, schema check), medians, first (start) and again:")
    for how, results in measured.items():
        first, again = (statistics.median(column) for column in zip(*results, strict=True))
        print(f"  {'checked ' + ('in a child process' if how == 'child' else 'in the process'):40} "
              f"{first:6.1f} ms {again:6.2f} ms")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rewrites", type=int, default=20)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of serve (with and without --config) and of serve --scan; medians printed",
    )
    parser.add_argument(
        "--compare", type=Path, metavar="BIN_DIR",
        help="also measure serve and serve --scan of another installation (e.g. an older checkout's "
        ".venv/bin), its runs alternating with this one's",
    )  # fmt: skip
    parser.add_argument("--scan-only", action="store_true", help="measure serve --scan alone")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}")
    base = floor()
    print(f"baseline: python + asyncio + grpcio serving one method on a unix socket: {mib(base)}; "
          f"without OpenSSL: {mib(floor('--forgo-openssl')).strip()}")  # fmt: skip
    bins = [VENV_BIN, *([args.compare] if args.compare else [])]

    def compare(
        label: str, measure: Callable[[Path], Coroutine[Any, Any, tuple[int, int, int]]]
    ) -> tuple[int, ...]:
        """``measure`` of each installation, ``--repeat`` times alternating; prints the medians and
        returns this installation's."""
        runs: dict[Path, list[tuple[int, int, int]]] = {bin_dir: [] for bin_dir in bins}
        for _ in range(args.repeat):
            for bin_dir, results in runs.items():
                results.append(asyncio.run(measure(bin_dir)))
        for bin_dir, results in runs.items():
            registered, after, peak = (int(statistics.median(c)) for c in zip(*results, strict=True))
            name = label if bin_dir == VENV_BIN else f"  {bin_dir}"
            print(f"  {name:40} {mib(registered):>12} {mib(after):>12} {mib(peak):>12} {mib(base):>12}")
        return tuple(int(statistics.median(column)) for column in zip(*runs[VENV_BIN], strict=True))

    work = (args.devices, args.calls, args.rewrites)
    header = f"  {'':40} {'registered':>12} {'after':>12} {'peak (HWM)':>12} {'baseline':>12}"
    if not args.scan_only:
        print(f"cdi-plugin serve, {args.devices} devices, {args.calls} Allocates, {args.rewrites} rewrites:")
        print(header)
        compare("without metrics endpoint", lambda bin_dir: plugin(*work, False, bin_dir))
        compare("with --config (the DaemonSet's)", lambda bin_dir: plugin(*work, False, bin_dir, config=True))
        registered, after, peak = asyncio.run(plugin(*work, True))
        label = "with --metrics-address"
        print(f"  {label:40} {mib(registered):>12} {mib(after):>12} {mib(peak):>12} {mib(base):>12}")
        print("cdi-gen scan, one process each (peak RSS):")
        with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
            fixture = Path(raw) / "binders.json"
            binder_fixture(fixture, args.devices)
            cases = [
                ("real host (embedded default)", "udev"),
                ("simulated workstation", "simulated"),
                (f"{args.devices} recorded binder devices", f"fixture:{fixture}"),
            ]
            for i, (label, source) in enumerate(cases):
                code, peak = peak_of(
                    [str(VENV_BIN / "cdi-gen"), "scan", "--source", source, "--output-dir", f"{raw}/out{i}"]
                )
                print(f"  {label:40} {mib(peak)}   (exit {code})")
    print(f"cdi-plugin serve --scan, generating and serving {args.devices} devices, metrics endpoint on:")
    print(header)
    registered, *_ = compare("the embedded default classes", lambda bin_dir: serve_scan(*work, bin_dir))
    compare("with --config (the DaemonSet's)", lambda bin_dir: serve_scan(*work, bin_dir, config=True))
    server = FakeApiServer()
    server.add_node(NODE)
    with running(server):
        compare("with DRA (deploy/with-dra), both APIs", lambda b: serve_scan(*work, b, dra=server))
    one, _, _ = asyncio.run(serve_scan(1, 0, 0))
    added = mib(registered - one).strip()
    print(f"  {'one device, registered':40} {mib(one):>12}   (so {args.devices} devices add {added})")
    if not args.scan_only:
        config_check_time()
        where_it_goes(args.devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
