"""kill -9 at random points of a loop of NodePrepareResources and NodeUnprepareResources against
real ``cdi-plugin serve --api dra`` processes: after every restart no device is prepared for two
claims, and no released device is refused.

The test plays the kubelet: it remembers what the driver answered, and repeats a call the kill
interrupted (a Prepare, or an Unprepare instead, as the kubelet does when the pod went meanwhile).
After each restart it asks, for every device, for a claim the scheduler should not have allocated
(a rival of the claim the device is prepared for: it must be refused) or, for a free device, for
a new claim (it must be prepared). Then a few calls, the last of them killed after a random delay
of up to twice a call's usual time, so kills land before, during and after the state's write.

Each instance is forked from a process that imported the serving code already (``forkserver``),
so that 200 restarts take seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdi_plugin.aio.sockets import someone_listens
from cdi_plugin.dra import api
from cdi_plugin.dra.prepared import read_prepared
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.serving import DraNode, dra_node
from tests.dra.test_kubelet import claim_obj

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(300)

KILLS = 200
DEVICES = ("d0", "d1", "d2")
FUSE = "cdi-plugin.io/fuse"
FORKSERVER = Path(__file__).with_name("forkserver.py")


class ForkServer:
    """``tests/dra/forkserver.py``: starts serving processes, which this side kills by pidfd."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(FORKSERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._ask(None) == {"ready": True}

    def _ask(self, request: dict[str, Any] | None) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if request is not None:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def start(self, args: list[str], log: Path) -> tuple[int, int]:
        """A new serving process: its pid and a pidfd (the pid stays its own until reaped)."""
        pid = self._ask({"start": args, "log": str(log)})["pid"]
        return pid, os.pidfd_open(pid)

    def end(self, pid: int, pidfd: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Signal the process, wait for it to end; its wait status."""
        signal.pidfd_send_signal(pidfd, sig)
        try:
            return int(self._ask({"reap": pid})["status"])
        finally:
            os.close(pidfd)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # kills and reaps what is left
        self.proc.wait(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def prepared(device: str) -> tuple[api.PreparedDevice, ...]:
    return (api.PreparedDevice(("fuse",), NODE, f"fuse-{device}", (f"{FUSE}={device}",)),)


class Kubelet:
    """What the kubelet knows: which claim each device was prepared for, and the call a kill
    interrupted (to be repeated); the claims themselves live in the fake API server."""

    def __init__(self, node: DraNode) -> None:
        self.node = node
        self.holder: dict[str, api.Claim | None] = dict.fromkeys(DEVICES)
        self.device: dict[str, str] = {}  # claim UID -> its device
        self.pending: tuple[str, list[api.Claim]] | None = None
        self.count = 0
        self.client = FakeKubelet(node.registry)

    def new_claim(self, device: str) -> api.Claim:
        self.count += 1
        ref = api.Claim("default", f"c{self.count}", f"uid-{self.count}")
        self.node.api.add_claim(claim_obj(ref, ("fuse", NODE, f"fuse-{device}")))
        self.device[ref.uid] = device
        return ref

    def forget(self, ref: api.Claim) -> None:
        self.node.api.delete_claim(ref.namespace, ref.name)
        del self.device[ref.uid]

    async def prepare(self, refs: list[api.Claim]) -> None:
        """Prepare claims allocated free devices (or prepared already): each must be prepared."""
        answer = await self.client.prepare(*refs)
        assert answer == {r.uid: prepared(self.device[r.uid]) for r in refs}, answer
        for ref in refs:
            self.holder[self.device[ref.uid]] = ref

    async def unprepare(self, refs: list[api.Claim]) -> None:
        assert await self.client.unprepare(*refs) == {r.uid: "" for r in refs}
        for ref in refs:
            if self.holder[self.device[ref.uid]] == ref:
                self.holder[self.device[ref.uid]] = None
            self.forget(ref)

    async def repeat_interrupted(self, rng: random.Random) -> None:
        if self.pending is None:
            return
        method, refs = self.pending
        self.pending = None
        await (self.prepare(refs) if method == "prepare" and rng.random() < 0.7 else self.unprepare(refs))

    async def check(self) -> None:
        """Every prepared device refused to a rival claim; every free one prepared for a new claim."""
        rivals = {d: self.new_claim(d) for d, h in self.holder.items() if h is not None}
        new = {d: self.new_claim(d) for d, h in self.holder.items() if h is None}
        answer = await self.client.prepare(*rivals.values(), *new.values())
        expected: dict[str, Any] = {ref.uid: prepared(d) for d, ref in new.items()}
        for d, ref in rivals.items():
            holder = self.holder[d]
            assert holder is not None
            expected[ref.uid] = (
                f"claim default/{ref.name}: device {NODE}/fuse-{d} ({FUSE}={d}): "
                f"already prepared for claim {holder.uid}"
            )
        assert answer == expected
        for ref in rivals.values():
            self.forget(ref)
        for d, ref in new.items():
            self.holder[d] = ref

    def next_call(self, rng: random.Random) -> tuple[str, list[api.Claim]]:
        """A random call: release some prepared claims, prepare new ones, or repeat a prepare."""
        held = [h for h in self.holder.values() if h is not None]
        free = [d for d, h in self.holder.items() if h is None]
        choice = rng.random()
        if free and (choice < 0.5 or not held):
            return "prepare", [self.new_claim(d) for d in rng.sample(free, rng.randint(1, len(free)))]
        if held and choice < 0.9:
            return "unprepare", rng.sample(held, rng.randint(1, len(held)))
        return "prepare", [rng.choice(held)]

    def call(self, method: str, refs: list[api.Claim]) -> Awaitable[None]:
        return self.prepare(refs) if method == "prepare" else self.unprepare(refs)


async def serving(node: DraNode, pidfd: int, log: Path, timeout: float = 30.0) -> None:
    """Return once the registration socket is served; fail when the process ended or took too long."""
    deadline = time.monotonic() + timeout
    while not someone_listens(node.registration_socket):
        ended = select.select([pidfd], [], [], 0)[0]  # a pidfd is readable once its process ended
        if ended or time.monotonic() > deadline:
            why = "it ended" if ended else f"not within {timeout}s"
            raise AssertionError(f"serving: {why}; log:\n{log.read_text()[-5000:]}")
        await asyncio.sleep(0.002)


def test_kill_9_at_random_points_prepares_no_device_twice_and_refuses_no_released_one(
    dra_node: DraNode, tmp_path: Path
) -> None:
    for d in DEVICES:
        make_node(dra_node.dev / d)
    write_spec(dra_node.specs, FUSE, {d: str(dra_node.dev / d) for d in DEVICES})
    dra_node.api.add_node(NODE)
    log = tmp_path / "serve.log"
    args: list[str] = []
    rng = random.Random(21)
    kubelet = Kubelet(dra_node)
    durations = [0.005]
    interrupted = 0

    async def life() -> tuple[int, int]:
        pid, pidfd = forks.start(args, log)
        await serving(dra_node, pidfd, log)
        await kubelet.client.register(dra_node.registration_socket, DRIVER)
        await kubelet.repeat_interrupted(rng)
        await kubelet.check()
        return pid, pidfd

    async def scenario() -> None:
        nonlocal interrupted
        # Without the program's path; no TLS to set up (the fake API server speaks HTTP) at each start.
        args.extend(dra_node.args("dra")[1:])
        config = json.loads(dra_node.config.read_text())
        config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        dra_node.config.write_text(json.dumps(config))
        for _ in range(KILLS):
            pid, pidfd = await life()
            for _ in range(rng.randint(0, 2)):  # calls that complete
                started = time.monotonic()
                await kubelet.call(*kubelet.next_call(rng))
                durations.append(time.monotonic() - started)
            method, refs = kubelet.next_call(rng)
            call = asyncio.ensure_future(kubelet.call(method, refs))
            await asyncio.sleep(rng.uniform(0, 2 * statistics.median(durations)))
            forks.end(pid, pidfd)  # kill -9
            try:
                await call
            except grpc.aio.AioRpcError:
                kubelet.pending = (method, refs)  # no answer: the kubelet calls again
                interrupted += 1
        pid, pidfd = await life()
        status = forks.end(pid, pidfd, signal.SIGTERM)
        assert status == 0, log.read_text()[-5000:]

    forks = ForkServer()
    try:
        with running(dra_node.api):
            run(scenario(), timeout=280)
    finally:
        forks.close()
    state = dra_node.plugins / DRIVER / "prepared.json"
    on_disk = read_prepared(state)
    assert {d: uid for (_, d), uid in on_disk.holders.items()} == {
        f"fuse-{d}": h.uid for d, h in kubelet.holder.items() if h is not None
    }
    assert interrupted >= KILLS // 10, f"only {interrupted} of {KILLS} kills interrupted a call"
