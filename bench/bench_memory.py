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
  that add and remove a device (rescan, spec rewrite, ListAndWatch); then the same serving one
  device, which splits the figure into what any node pays and what the devices add;
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
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cdi_plugin.cdi import codec  # noqa: E402
from cdi_plugin.deviceplugin import api  # noqa: E402
from cdi_plugin.store.atomic import write_atomic  # noqa: E402
from cdi_plugin.store.ownership import OwnedFile, digest, read_record, write_record  # noqa: E402
from tests.deviceplugin.fake_kubelet import FakeKubelet  # noqa: E402
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec  # noqa: E402

KIND = "cdi-plugin.io/bench"
VENV_BIN = Path(sys.executable).parent


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key}")


def mib(kib: int) -> str:
    return f"{kib / 1024:6.1f} MiB"


def daemonset_config(directory: Path) -> list[str]:
    """``--config FILE``, FILE the configuration of deploy/base/configmap.yaml (a ``plugin`` section;
    the embedded default device classes)."""
    import yaml

    path = directory / "config.yaml"
    configmap = yaml.safe_load((ROOT / "deploy" / "base" / "configmap.yaml").read_text())
    path.write_text(configmap["data"]["config.yaml"])
    return ["--config", str(path)]


async def plugin(
    devices: int,
    calls: int,
    rewrites: int,
    with_metrics: bool,
    bin_dir: Path = VENV_BIN,
    *,
    config: bool = False,
) -> tuple[int, int, int]:
    """(VmRSS once registered, VmRSS after the workload, VmHWM) in KiB of ``bin_dir``'s cdi-plugin
    (``config``: with the DaemonSet's configuration file)."""
    with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
        layout = Layout.under(Path(raw))
        nodes = {f"dev{i}": [make_node(layout.dev / f"n{i}", os.makedev(1, 3))] for i in range(devices)}
        spec = spec_of(KIND, nodes)
        write_spec(layout.etc, spec)
        extra = ["--metrics-address", "127.0.0.1:0"] if with_metrics else []
        extra += daemonset_config(Path(raw)) if config else []
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(bin_dir / "cdi-plugin"), "serve", "--spec-dir", str(layout.etc),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs), *extra,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stderr is not None
            try:
                base = ""
                if with_metrics:
                    line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
                    found = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line)
                    assert found, line
                    base = found.group(1)
                drain = asyncio.create_task(proc.stderr.read())
                client = await kubelet.wait_registered(KIND, timeout=60)
                await client.wait_until(lambda d: len(d) == devices, timeout=60)
                registered = status_kib(proc.pid, "VmRSS")
                ids = sorted(client.devices)
                for i in range(calls):
                    request = api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
                    )
                    await client.stub.Allocate(request, timeout=5)
                    if base and i % 20 == 0:
                        for path in ("/metrics", "/healthz", "/readyz"):
                            await asyncio.to_thread(lambda p=path: urllib.request.urlopen(base + p).read())
                for i in range(rewrites):
                    names = {**nodes, f"extra{i}": nodes["dev0"]} if i % 2 == 0 else nodes
                    data = codec.encode(spec_of(KIND, names))
                    name = KIND.replace("/", "-") + ".json"
                    write_atomic(layout.etc / name, data)
                    record = read_record(layout.etc)
                    record[name] = OwnedFile(name, KIND, digest(data))
                    write_record(layout.etc, record)
                    extra = f"extra{i - i % 2}"
                    if i % 2 == 0:
                        await client.wait_until(lambda d, x=extra: x in d, timeout=10)
                    else:
                        await client.wait_until(lambda d, x=extra: d[x].health == api.UNHEALTHY, timeout=10)
                after = status_kib(proc.pid, "VmRSS")
                peak = status_kib(proc.pid, "VmHWM")
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)
                if "drain" in locals():
                    await drain
    return registered, after, peak


def peak_of(command: list[str]) -> tuple[int, int]:
    """(exit status, peak RSS in KiB) of a process, measured by GNU time: the peak that wait4
    reports for a child of this process would include this (larger) process, which it forked from."""
    with tempfile.NamedTemporaryFile("r") as report:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", report.name, *command], capture_output=True, check=False
        )
        return proc.returncode, int(report.read().split()[-1])


def binder_fixture(path: Path, n: int) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "subsystem": "misc",
                    "sys_name": f"binder{i}",
                    "sys_path": f"/sys/devices/virtual/misc/binder{i}",
                    "devnode": f"/dev/binderfs/binder{i}",
                    "node": {"type": "c", "major": 10, "minor": 60 + i, "mode": "0666", "uid": 0, "gid": 0},
                    "properties": {"MAJOR": "10", "MINOR": str(60 + i)},
                }
                for i in range(n)
            ]
        )
    )


def binder_nodes(directory: Path, n: int, prefix: str = "binder") -> list[dict[str, object]]:
    """A fixture of ``n`` binder devices whose nodes exist (made in ``directory``)."""
    devices: list[dict[str, object]] = []
    for i in range(n):
        node = make_node(directory / f"{prefix}{i}", os.makedev(1, 3))
        devices.append(
            {
                "subsystem": "misc",
                "sys_name": f"{prefix}{i}",
                "sys_path": f"/sys/devices/virtual/misc/{prefix}{i}",
                "devnode": str(node),
                "node": {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0},
                "properties": {"MAJOR": "1", "MINOR": "3"},
            }
        )
    return devices


async def serve_scan(
    devices: int, calls: int, rewrites: int, bin_dir: Path = VENV_BIN, *, config: bool = False
) -> tuple[int, int, int]:
    """``bin_dir``'s ``cdi-plugin serve --scan`` generating and serving ``devices`` binder devices
    from a fixture (watched like the host), metrics endpoint on, with the DaemonSet's
    configuration file if ``config``: (VmRSS once registered, VmRSS after the workload, VmHWM) in
    KiB. The workload: Allocates, then fixture rewrites that add and remove a device, each
    followed through rescan, spec rewrite and ListAndWatch."""
    with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
        layout = Layout.under(Path(raw))
        fixture = Path(raw) / "host.json"
        base = binder_nodes(layout.dev, devices)
        extra = binder_nodes(layout.dev, 1, prefix="binderx")
        fixture.write_text(json.dumps(base))
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(bin_dir / "cdi-plugin"), "serve", "--scan", "--spec-dir", str(layout.etc),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                "--source", f"fixture:{fixture}", "--metrics-address", "127.0.0.1:0",
                *(daemonset_config(Path(raw)) if config else []), stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                client = await kubelet.wait_registered("cdi-plugin.io/binder", timeout=60)
                await client.wait_until(lambda d: len(d) == devices, timeout=60)
                registered = status_kib(proc.pid, "VmRSS")
                ids = sorted(client.devices)
                for i in range(calls):
                    request = api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
                    )
                    await client.stub.Allocate(request, timeout=5)
                for i in range(rewrites):
                    added = i % 2 == 0
                    fixture.write_text(json.dumps(base + extra if added else base))
                    if added:
                        await client.wait_until(lambda d: "binderx0" in d, timeout=10)
                    else:
                        await client.wait_until(lambda d: d["binderx0"].health == api.UNHEALTHY, timeout=10)
                after = status_kib(proc.pid, "VmRSS")
                peak = status_kib(proc.pid, "VmHWM")
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)
    return registered, after, peak


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

#: The floor: Python, asyncio and grpcio serving one method on a unix socket, nothing else.
_FLOOR = """
import sys
if sys.argv[2:] == ["--forgo-openssl"]:
    sys.modules["ssl"] = sys.modules["_ssl"] = sys.modules["_hashlib"] = None
import asyncio, grpc
async def ping(request, context):
    return b""
async def main():
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Floor", {
        "Ping": grpc.unary_unary_rpc_method_handler(ping)}),))
    server.add_insecure_port("unix://" + sys.argv[1])
    await server.start()
    async with grpc.aio.insecure_channel("unix://" + sys.argv[1]) as channel:
        await channel.unary_unary("/floor.Floor/Ping")(b"", timeout=10)
    print("serving", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def floor(*flags: str) -> int:
    """VmRSS in KiB of the floor process once it served one call (``--forgo-openssl``: without
    OpenSSL, as ``serve`` without TLS runs)."""
    with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
        proc = subprocess.Popen(
            [sys.executable, "-c", _FLOOR, f"{raw}/floor.sock", *flags], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "serving"
            return status_kib(proc.pid, "VmRSS")
        finally:
            proc.terminate()
            proc.wait(20)


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
    one, _, _ = asyncio.run(serve_scan(1, 0, 0))
    added = mib(registered - one).strip()
    print(f"  {'one device, registered':40} {mib(one):>12}   (so {args.devices} devices add {added})")
    if not args.scan_only:
        config_check_time()
        where_it_goes(args.devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
