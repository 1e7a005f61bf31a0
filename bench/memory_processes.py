"""The processes bench_memory.py measures, each run once and its resident memory read from /proc:
``cdi-plugin serve`` and ``cdi-plugin serve --scan`` under a workload (:func:`plugin`,
:func:`serve_scan`), ``cdi-gen scan``'s peak (:func:`peak_of`), and the floor of any Python device
plugin (:func:`floor`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from figures import status_kib

from cdi_plugin.cdi import codec
from cdi_plugin.deviceplugin import api
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.ownership import OwnedFile, digest, read_record, write_record
from tests.deviceplugin.fake_kubelet import FakeKubelet, PluginClient
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec
from tests.dra.fakeapiserver import FakeApiServer

ROOT = Path(__file__).resolve().parent.parent
KIND = "cdi-plugin.io/bench"
VENV_BIN = Path(sys.executable).parent


def daemonset_config(directory: Path) -> list[str]:
    """``--config FILE``, FILE the configuration of deploy/base/configmap.yaml (a ``plugin`` section;
    the embedded default device classes)."""
    import yaml

    path = directory / "config.yaml"
    configmap = yaml.safe_load((ROOT / "deploy" / "base" / "configmap.yaml").read_text())
    path.write_text(configmap["data"]["config.yaml"])
    return ["--config", str(path)]


async def all_listed(kubelet: FakeKubelet, resource: str, devices: int) -> PluginClient:
    """The plugin of ``resource`` once registered and listing its ``devices`` devices."""
    client = await kubelet.wait_registered(resource, timeout=60)
    await client.wait_until(lambda d: len(d) == devices, timeout=60)
    return client


def allocations(client: PluginClient, calls: int) -> Iterator[api.AllocateRequest]:
    """``calls`` Allocate requests of one device each, the listed devices in turn."""
    ids = sorted(client.devices)
    for i in range(calls):
        yield api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
        )


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
                client = await all_listed(kubelet, KIND, devices)
                registered = status_kib(proc.pid, "VmRSS")
                for i, request in enumerate(allocations(client, calls)):
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


def dra_options(directory: Path, api_url: str) -> list[str]:
    """The options of the DRA component's ``serve --scan --api both`` on a stand-in node in
    ``directory`` against the API server at ``api_url``, with the DaemonSet's configuration and
    every binder device served through both APIs."""
    from tests.dra.conftest import NODE
    from tests.dra.serving import kubeconfig

    options = daemonset_config(directory)
    with open(options[1], "a") as config:
        config.write('    "cdi-plugin.io/binder": {api: both}\n')
    for name in ("kplugins", "kregistry"):
        (directory / name).mkdir()
    return [
        *options, "--allow-exclusive-kinds-on-both-apis", "--api", "both", "--node-name", NODE,
        "--kubeconfig", str(kubeconfig(directory / "kubeconfig", api_url)),
        "--kubelet-plugins-dir", str(directory / "kplugins"),
        "--kubelet-registry-dir", str(directory / "kregistry"),
    ]  # fmt: skip


async def dra_published(directory: Path, server: FakeApiServer, devices: int) -> None:
    """Register the driver of :func:`dra_options` with a fake kubelet; return once its slices
    hold ``devices`` devices."""
    from tests.dra.fakekubelet import FakeKubelet as DraKubelet

    socket = directory / "kregistry" / "cdi-plugin.io-reg.sock"
    for _ in range(600):
        if socket.exists():
            break
        await asyncio.sleep(0.1)
    await DraKubelet(directory / "kregistry").register(socket, "cdi-plugin.io")
    for _ in range(600):
        if sum(len(s["spec"]["devices"]) for s in server.slices.values()) >= devices:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{devices} devices not published within 60 s")


async def serve_scan(
    devices: int,
    calls: int,
    rewrites: int,
    bin_dir: Path = VENV_BIN,
    *,
    config: bool = False,
    dra: FakeApiServer | None = None,
) -> tuple[int, int, int]:
    """``bin_dir``'s ``cdi-plugin serve --scan`` generating and serving ``devices`` binder devices
    from a fixture (watched like the host), metrics endpoint on, with the DaemonSet's
    configuration file if ``config``; with ``dra`` (a running fake API server), as the DRA
    component runs it, every device also published as ResourceSlices (:func:`dra_options`): (VmRSS
    once registered, VmRSS after the workload, VmHWM) in KiB. The workload: Allocates, then
    fixture rewrites that add and remove a device, each followed through rescan, spec rewrite and
    ListAndWatch (and a publish with ``dra``)."""
    with tempfile.TemporaryDirectory(prefix="cdi-bench-mem-") as raw:
        layout = Layout.under(Path(raw))
        fixture = Path(raw) / "host.json"
        base = binder_nodes(layout.dev, devices)
        extra = binder_nodes(layout.dev, 1, prefix="binderx")
        fixture.write_text(json.dumps(base))
        options = daemonset_config(Path(raw)) if config else []
        if dra is not None:
            options = dra_options(Path(raw), dra.url)
            dra.delete_slices()  # those of an earlier run
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(bin_dir / "cdi-plugin"), "serve", "--scan", "--spec-dir", str(layout.etc),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                "--source", f"fixture:{fixture}", "--metrics-address", "127.0.0.1:0",
                *options, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                client = await all_listed(kubelet, "cdi-plugin.io/binder", devices)
                if dra is not None:
                    await dra_published(Path(raw), dra, devices)
                registered = status_kib(proc.pid, "VmRSS")
                for request in allocations(client, calls):
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
