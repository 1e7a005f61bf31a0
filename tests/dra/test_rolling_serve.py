"""Two real ``cdi-plugin serve`` processes on one stand-in node, as during a DaemonSet update with
``maxSurge: 1``: the old pod's instance and the new one's, each named by its pod UID, against the
fake API server, a fake kubelet that keeps both endpoints as the 1.33+ kubelet does, and the
device plugin's fake kubelet. Also: two instances started by hand with the same sockets, the lock
that makes Prepare calls of two instances take turns, and a kubelet older than 1.33."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import stat
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cdi_plugin.aio.sockets import someone_listens
from cdi_plugin.dra import api
from cdi_plugin.dra.prepared import read_prepared
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.fakekubelet import FakeKubelet, RegistrationRefused
from tests.dra.serving import DraNode, Serve, dra_node, free_port, published
from tests.dra.test_kubelet import claim_obj
from tests.dra.test_serialize import locked_elsewhere
from tests.dra.test_serve import claim_path

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(180)

CARD = "cdi-plugin.io/card"  # served through DRA, one claim per device
FUSE = "cdi-plugin.io/fuse"  # served by the device plugin
CARDS = ("d0", "d1", "d2", "d3")
OLD, NEW = "0c8f1f0e-1111-4a7e-9c55-0123456789ab", "5d2e3f40-2222-4b8f-8d66-0123456789cd"
KUBELET = "v1.36.2"


def card_node(node: DraNode, kubelet_version: str = KUBELET) -> None:
    for name in CARDS:
        make_node(node.dev / name)
    write_spec(node.specs, CARD, {n: str(node.dev / n) for n in CARDS})
    node.api.add_node(NODE, kubelet_version)


def config(node: DraNode) -> list[str]:
    path = node.config.with_name("config.yaml")
    path.write_text(f'plugin: {{resources: {{"{CARD}": {{api: dra}}}}}}\n')
    return ["--config", str(path)]


def fuse_fixture(node: DraNode) -> list[str]:
    """What ``serve --scan`` finds: one FUSE device (a char device node standing in for /dev/fuse)."""
    fuse = node.dev / "fuse"
    os.mknod(fuse, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fixture = node.config.with_name("host.json")
    host_node = {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0}
    fixture.write_text(json.dumps([{
        "subsystem": "misc", "sys_name": "fuse", "sys_path": "/sys/devices/virtual/misc/fuse",
        "devnode": str(fuse), "node": host_node, "properties": {"MAJOR": "1", "MINOR": "3"},
    }]))  # fmt: skip
    return ["--scan", "--source", f"fixture:{fixture}"]


def sockets_of(node: DraNode, uid: str) -> tuple[Path, Path]:
    return node.plugins / DRIVER / f"dra-{uid}.sock", node.registry / f"{DRIVER}-{uid}-reg.sock"


def card(device: str) -> tuple[api.PreparedDevice, ...]:
    return (api.PreparedDevice(("card",), NODE, f"card-{device}", (f"{CARD}={device}",)),)


def new_claim(node: DraNode, name: str, device: str) -> api.Claim:
    ref = api.Claim("default", name, f"uid-{name}")
    node.api.add_claim(claim_obj(ref, ("card", NODE, f"card-{device}")))
    return ref


def held(node: DraNode) -> dict[str, list[str]]:
    """Claim UID -> its devices, as the shared state file holds them (checked as the driver reads it)."""
    path = node.plugins / DRIVER / "prepared.json"
    state = read_prepared(path)
    return {uid: [d.device_name for d in devices] for uid, devices in state.claims.items()}


async def http_status(url: str) -> int:
    def get() -> int:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)

    return await asyncio.to_thread(get)


async def registered(node: DraNode, serve: Serve, kubelet: FakeKubelet, uid: str = "") -> str:
    """Register the instance whose registration socket is named after ``uid``; its endpoint."""
    socket = sockets_of(node, uid)[1] if uid else node.registration_socket
    await serve.wait_for(lambda: someone_listens(socket), f"registration socket {socket.name}")
    await kubelet.register(socket, DRIVER)
    return kubelet.endpoints[-1].path


@contextlib.asynccontextmanager
async def two_instances(node: DraNode) -> AsyncIterator[tuple[list[Serve], list[FakeKubelet]]]:
    """The old and the new instance side by side, each registered with a kubelet of its own that
    calls it directly; both stopped at the end, each with status 0."""
    args = [node.args("dra", *config(node), "-v", "--pod-uid", uid) for uid in (OLD, NEW)]
    serves = [await Serve.start(a) for a in args]
    try:
        kubelets = [FakeKubelet(node.registry) for _ in serves]
        for serve, kubelet, uid in zip(serves, kubelets, (OLD, NEW), strict=True):
            await registered(node, serve, kubelet, uid)
        yield serves, kubelets
    finally:
        for serve in serves:
            assert await serve.stop() == 0, serve.lines


@dataclass
class Loop:
    """The kubelet's side of the update: claims prepared and unprepared one after another, each on
    a free device; every answer is checked (every Prepare must give the device, every Unprepare
    must succeed)."""

    node: DraNode
    kubelet: FakeKubelet
    devices: tuple[str, ...]
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    prepared_at: dict[str, str] = field(default_factory=dict)  # claim UID -> endpoint that prepared it
    crossed: list[str] = field(default_factory=list)  # claims unprepared by another endpoint than preparer
    _held: list[tuple[api.Claim, str]] = field(default_factory=list)
    _count: int = 0

    async def step(self) -> None:
        free = [d for d in self.devices if d not in {device for _, device in self._held}]
        if free:
            self._count += 1
            ref = new_claim(self.node, f"loop-{self._count}", free[0])
            answer = await self.kubelet.prepare(ref)
            self.prepared_at[ref.uid] = self.kubelet.called[-1]
            if answer != {ref.uid: card(free[0])}:
                self.failures.append(f"prepare {ref.uid} on {self.kubelet.called[-1]}: {answer}")
            self._held.append((ref, free[0]))
        if len(self._held) >= 2:
            ref, _ = self._held.pop(0)
            answer = await self.kubelet.unprepare(ref)
            if self.kubelet.called[-1] != self.prepared_at[ref.uid]:
                self.crossed.append(ref.uid)
            if answer != {ref.uid: ""}:
                self.failures.append(f"unprepare {ref.uid} on {self.kubelet.called[-1]}: {answer}")
        self.calls += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step()

    async def until(self, calls: int) -> None:
        while self.calls < calls:
            await asyncio.sleep(0.01)


def test_an_update_with_two_instances_prepares_every_claim_and_hands_all_over(dra_node: DraNode) -> None:
    card_node(dra_node)
    port = free_port()
    extra = [*config(dra_node), *fuse_fixture(dra_node), "--metrics-address", f"127.0.0.1:{port}"]
    fuse_spec = dra_node.specs / "cdi-plugin.io-fuse.json"
    dra_dir = dra_node.plugins / DRIVER

    async def scenario() -> tuple[Serve, Serve]:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            old = await Serve.start(dra_node.args("both", *extra, "--pod-uid", OLD))
            new: Serve | None = None
            try:
                kubelet = FakeKubelet(dra_node.registry)
                old_endpoint = await registered(dra_node, old, kubelet, OLD)
                assert old_endpoint == str(sockets_of(dra_node, OLD)[0])
                client = await dp_kubelet.wait_registered(FUSE, timeout=30)
                await client.wait_until(lambda d: "fuse" in d)
                await old.logged("serving metrics on")
                assert await http_status(f"http://127.0.0.1:{port}/healthz") == 200
                scanned = fuse_spec.read_bytes()
                kept = new_claim(dra_node, "kept", "d3")
                assert await kubelet.prepare(kept) == {kept.uid: card("d3")}

                loop = Loop(dra_node, kubelet, CARDS[:3])
                stop = asyncio.Event()
                calls = asyncio.create_task(loop.run(stop))
                await loop.until(3)
                new = await Serve.start(dra_node.args("both", *extra, "--pod-uid", NEW))
                await new.logged(f"127.0.0.1:{port}: in use")
                await new.logged(f"another process is serving {client.endpoint}")
                new_endpoint = await registered(dra_node, new, kubelet, NEW)
                assert [e.path for e in kubelet.endpoints] == [old_endpoint, new_endpoint]
                await old.wait_for(lambda: new_endpoint in kubelet.called, "a call to the new instance")
                registrations = dp_kubelet.registrations
                assert await old.stop() == 0, old.lines  # SIGTERM while the loop goes on
                await loop.until(loop.calls + 6)
                stop.set()
                await calls

                assert loop.failures == []
                assert {old_endpoint, new_endpoint} <= set(kubelet.called)
                from_old = [uid for uid, at in loop.prepared_at.items() if at == old_endpoint]
                assert set(from_old) & set(loop.crossed), "a claim the old one prepared, the new one released"
                # The old instance's claim is still held: the new one read the shared state.
                rival = new_claim(dra_node, "rival", "d3")
                [refused] = (await kubelet.prepare(rival)).values()
                assert refused == (
                    f"claim default/rival: device {NODE}/card-d3 ({CARD}=d3): "
                    f"already prepared for claim {kept.uid}"
                )
                assert kubelet.called[-1] == new_endpoint
                assert await kubelet.unprepare(kept) == {kept.uid: ""}
                assert await kubelet.prepare(rival) == {rival.uid: card("d3")}
                state = held(dra_node)
                devices = [d for ds in state.values() for d in ds]
                assert len(devices) == len(set(devices)), state

                # What the old instance left: the new one's sockets, the lock (free), the slices.
                assert not any(p.exists() for p in sockets_of(dra_node, OLD))
                assert all(someone_listens(p) for p in sockets_of(dra_node, NEW))
                assert not locked_elsewhere(dra_node.plugins / DRIVER / "serialize.lock")
                assert published(dra_node) == {f"card-{d}": CARD for d in CARDS}
                # The device plugin and the metrics endpoint pass to the new instance.
                client = await dp_kubelet.wait_registered(FUSE, after=registrations, timeout=30)
                await client.wait_until(lambda d: "fuse" in d)
                assert [d.name for d in (await client.allocate(["fuse"])).cdi_devices] == [f"{FUSE}=fuse"]
                await new.logged("serving metrics on")
                assert await http_status(f"http://127.0.0.1:{port}/readyz") in (200, 503)
                assert await http_status(f"http://127.0.0.1:{port}/healthz") == 200
                # Both scanners wrote the same spec, taking turns; the old one removed nothing.
                assert fuse_spec.read_bytes() == scanned
            finally:
                with contextlib.suppress(ProcessLookupError):
                    await old.stop()
                if new is not None:
                    assert await new.stop() == 0, new.lines
            return old, new

    with running(dra_node.api):
        old, new = run(scenario(), timeout=150)
    assert dra_node.kubelet_sockets() == []
    assert sorted(p.name for p in dra_dir.iterdir()) == ["prepared.json", "serialize.lock"]
    # The one line each waiting side of the new instance logged, once; the device plugin's wait
    # ends with a line that says so.
    waits = [m for m in new.messages() if "in use" in m or "another process is serving" in m]
    ended = [m for m in waits if m.startswith(f"{FUSE}: recovered after ")]
    assert len(waits) - len(ended) == 2, waits
    assert len(ended) == 1, waits
    assert not [line for line in old.lines + new.lines if '"level": "error"' in line]


def test_two_instances_calling_prepare_at_once_take_turns(dra_node: DraNode) -> None:
    """Each instance is called directly (a kubelet of its own), with claims for the same device
    while the test holds the lock: once it is free, one claim gets the device, the other is
    refused, whichever instance ran first."""
    card_node(dra_node)
    lock = dra_node.plugins / DRIVER / "serialize.lock"

    async def scenario() -> None:
        async with two_instances(dra_node) as (serves, kubelets):
            for round_, device in enumerate(CARDS):
                claims = [new_claim(dra_node, f"c{round_}-{i}", device) for i in range(2)]
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    waiting = [len(s.messages()) for s in serves]
                    calls = [asyncio.create_task(k.prepare(c)) for k, c in zip(kubelets, claims, strict=True)]
                    for serve, seen in zip(serves, waiting, strict=True):
                        await serve.wait_for(
                            lambda s=serve, n=seen: any(f"waiting for {lock}" in m for m in s.messages()[n:]),
                            "the call waiting for the lock",
                        )
                finally:
                    os.close(fd)
                answers = [await c for c in calls]
                won = [i for i, a in enumerate(answers) if a == {claims[i].uid: card(device)}]
                assert len(won) == 1, answers
                loser = claims[1 - won[0]]
                assert answers[1 - won[0]] == {
                    loser.uid: f"claim default/{loser.name}: device {NODE}/card-{device} ({CARD}={device}): "
                    f"already prepared for claim {claims[won[0]].uid}"
                }
            state = held(dra_node)  # one claim per device, each device once
            assert sorted(d for ds in state.values() for d in ds) == [f"card-{d}" for d in CARDS]

    with running(dra_node.api):
        run(scenario(), timeout=120)


def test_a_second_instance_by_hand_on_the_same_sockets_says_so_once_and_its_device_plugin_serves(
    dra_node: DraNode, tmp_path: Path
) -> None:
    card_node(dra_node)
    make_node(dra_node.dev / "fuse")
    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse")})
    other_plugin_dir = tmp_path / "dp2"
    other_plugin_dir.mkdir()

    async def scenario() -> Serve:
        first = await Serve.start(dra_node.args("both", *config(dra_node)))
        second: Serve | None = None
        try:
            kubelet = FakeKubelet(dra_node.registry)
            await registered(dra_node, first, kubelet)
            args = dra_node.args("both", *config(dra_node))
            args[args.index("--plugin-dir") + 1] = str(other_plugin_dir)
            async with DevicePluginKubelet(other_plugin_dir) as dp_kubelet:
                second = await Serve.start(args)
                await second.logged("another process is serving it")
                client = await dp_kubelet.wait_registered(FUSE, timeout=30)  # its device plugin serves
                await client.wait_until(lambda d: "fuse" in d)
                assert [d.name for d in (await client.allocate(["fuse"])).cdi_devices] == [f"{FUSE}=fuse"]
                ref = new_claim(dra_node, "first", "d0")
                assert await kubelet.prepare(ref) == {ref.uid: card("d0")}  # the first one still serves
                assert kubelet.called == [str(dra_node.dra_socket)]
                # Once the first one has stopped, the second one serves the driver.
                assert await first.stop() == 0, first.lines
                await second.logged("the other process is gone; serving")
                await registered(dra_node, second, kubelet)  # the first one's endpoint went with its socket
                assert [e.path for e in kubelet.endpoints] == [str(dra_node.dra_socket)]
                assert await kubelet.unprepare(ref) == {ref.uid: ""}
                assert second.proc.returncode is None
        finally:
            with contextlib.suppress(ProcessLookupError):
                await first.stop()
            if second is not None:
                assert await second.stop() == 0, second.lines
        assert second is not None
        return second

    with running(dra_node.api):
        second = run(scenario(), timeout=120)
    [line] = [m for m in second.messages() if "another process is serving it" in m]
    assert line == (
        f"DRA driver {DRIVER}: {dra_node.dra_socket}: another process is serving it (another instance of "
        "the driver?); not replacing it; serving once it is gone"
    )


def test_two_instances_may_not_register_one_endpoint(dra_node: DraNode) -> None:
    """The fake kubelet refuses what the 1.33+ kubelet refuses: an endpoint registered twice."""
    card_node(dra_node)

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra", *config(dra_node), "--pod-uid", OLD))
        try:
            kubelet = FakeKubelet(dra_node.registry)
            await registered(dra_node, serve, kubelet, OLD)
            with pytest.raises(RegistrationRefused, match="already registered for DRA driver plugin"):
                await kubelet.register(sockets_of(dra_node, OLD)[1], DRIVER)
            await serve.logged("the kubelet refused DRA driver")
        finally:
            assert await serve.stop() == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=60)


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("v1.32.4", "kubelet v1.32.4 is older than 1.33"),
        ("", "its version is unknown (status.nodeInfo.kubeletVersion not given); 1.33 or later is needed"),
    ],
)
def test_an_older_kubelet_keeps_the_fixed_socket_names_and_says_so(
    dra_node: DraNode, version: str, why: str
) -> None:
    card_node(dra_node, version)

    async def scenario() -> Serve:
        serve = await Serve.start(dra_node.args("dra", *config(dra_node), "--pod-uid", OLD))
        try:
            kubelet = FakeKubelet(dra_node.registry)
            assert await registered(dra_node, serve, kubelet) == str(dra_node.dra_socket)
            assert sorted(dra_node.kubelet_sockets()) == [
                f"plugins/{DRIVER}/dra.sock",
                f"plugins_registry/{DRIVER}-reg.sock",
            ]
        finally:
            assert await serve.stop() == 0, serve.lines
        return serve

    with running(dra_node.api):
        serve = run(scenario(), timeout=60)
    [line] = [m for m in serve.messages() if "fixed socket names" in m]
    assert line == (
        f"DRA driver {DRIVER}: fixed socket names on node {NODE}, as {why}: during an update the new "
        "instance serves once the old one has stopped (docs/dra.md, Upgrades)"
    )


def test_a_pod_uid_that_cannot_name_a_socket_is_refused_in_one_line(dra_node: DraNode) -> None:
    result = subprocess.run(
        dra_node.args("dra", "--pod-uid", "../x"), capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stderr) == (
        1,
        "cdi-plugin: error: --pod-uid: pod UID '../x': not a UID (at most 64 letters, digits and inner "
        "'-'; the DaemonSet sets $POD_UID from metadata.uid)\n",
    )


def test_a_lock_file_removed_while_one_instance_holds_it_never_prepares_a_device_twice(
    dra_node: DraNode,
) -> None:
    """The old instance holds the node's lock while the API server is slow to answer it (a claim
    the new one released meanwhile, read again under the lock); the lock file is removed (the
    kubelet's directory wiped), and the new instance, taking the file created in its place,
    prepares the device for another claim. The old instance's call fails rather than hand out the
    same device; called again, it is refused."""
    card_node(dra_node)
    lock = dra_node.plugins / DRIVER / "serialize.lock"

    async def scenario() -> None:
        async with two_instances(dra_node) as (serves, (to_old, to_new)):
            x, y = new_claim(dra_node, "x", "d0"), new_claim(dra_node, "y", "d0")
            assert await to_old.prepare(x) == {x.uid: card("d0")}
            assert await to_new.unprepare(x) == {x.uid: ""}  # the old instance's memory still has it
            dra_node.api.misbehave("GET", claim_path(x), faults.hang())  # 10 s, then read again
            call = asyncio.create_task(to_old.prepare(x))
            await serves[0].wait_for(
                lambda: dra_node.api.count("GET", claim_path(x)) == 2, "the claim read again under the lock"
            )
            lock.unlink()
            assert await to_new.prepare(y) == {y.uid: card("d0")}
            assert await asyncio.wait_for(call, 60) == {
                x.uid: f"claim default/x: not prepared: {lock}: removed or replaced while this call held it, "
                "so another call may have run beside it (the kubelet calls again)"
            }
            assert await to_old.prepare(x) == {
                x.uid: f"claim default/x: device {NODE}/card-d0 ({CARD}=d0): already prepared for claim "
                f"{y.uid}"
            }
            assert held(dra_node) == {y.uid: ["card-d0"]}

    with running(dra_node.api):
        run(scenario(), timeout=120)
