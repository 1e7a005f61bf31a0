"""The prepared claims of a real ``cdi-plugin serve --api dra`` process never lie: after a kill, a
full disk, a directory in the file's way, a kubelet that wiped its directories, and with a state
file that cannot be used at start (reported in one line; Prepare and Unprepare refused until the
operator moves it away)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import stat
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

import pytest

from cdi_plugin.aio.sockets import someone_listens
from cdi_plugin.dra import api
from cdi_plugin.dra.prepared import read_prepared
from cdi_plugin.dra.preparedstate import PreparedState, encode
from cdi_plugin.store.slotfile import HEADER, MIN_SLOT, record_slot
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.serving import DraNode, Serve, dra_node
from tests.dra.test_kubelet import claim_obj

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE = "cdi-plugin.io/fuse"
UNTIL = "nothing is prepared or released until it is repaired or moved away"


def state_file(node: DraNode) -> Path:
    return node.plugins / DRIVER / "prepared.json"


def fuse_node(node: DraNode) -> None:
    for name in ("fuse", "fuse2"):
        make_node(node.dev / name)
    write_spec(node.specs, FUSE, {n: str(node.dev / n) for n in ("fuse", "fuse2")})
    node.api.add_node(NODE)


def claim(node: DraNode, name: str, device: str = "fuse-fuse") -> api.Claim:
    ref = api.Claim("default", name, f"uid-{name}")
    node.api.add_claim(claim_obj(ref, ("fuse", NODE, device)))
    return ref


def devices(device: str = "fuse") -> tuple[api.PreparedDevice, ...]:
    return (api.PreparedDevice(("fuse",), NODE, f"fuse-{device}", (f"{FUSE}={device}",)),)


def refused(rival: api.Claim, holder: api.Claim) -> str:
    return (
        f"claim default/{rival.name}: device {NODE}/fuse-fuse ({FUSE}=fuse): "
        f"already prepared for claim {holder.uid}"
    )


@contextlib.asynccontextmanager
async def serving(node: DraNode) -> AsyncIterator[Serve]:
    """``serve --api dra`` on ``node``, stopped at the end: exit status 0 unless the block failed."""
    serve = await Serve.start(node.args("dra"))
    try:
        yield serve
    finally:
        code = await serve.stop()
    assert code == 0, serve.lines


async def registered(node: DraNode, serve: Serve) -> FakeKubelet:
    """Register once the registration socket is served (a killed instance leaves its socket)."""
    await serve.wait_for(lambda: someone_listens(node.registration_socket), "registration socket")
    kubelet = FakeKubelet(node.registry)
    await kubelet.register(node.registration_socket, DRIVER)
    return kubelet


def held(node: DraNode) -> dict[str, list[str]]:
    """Claim UID -> device names, as the state file holds them."""
    path = state_file(node)
    if not path.exists():
        return {}
    state = read_prepared(path)
    return {uid: [d.device_name for d in devs] for uid, devs in state.claims.items()}


def test_a_kill_right_after_the_reply_loses_no_prepared_claim(dra_node: DraNode) -> None:
    fuse_node(dra_node)
    first, rival = claim(dra_node, "first"), claim(dra_node, "rival")

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra"))
        try:
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(first) == {first.uid: devices()}
            serve.proc.kill()  # at once: no time left for a write after the reply
        finally:
            await serve.exit()
        async with serving(dra_node) as serve:
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(rival) == {rival.uid: refused(rival, first)}
            assert await kubelet.prepare(first) == {first.uid: devices()}

    with running(dra_node.api):
        run(scenario(), timeout=90)


def limit(serve: Serve, size: int) -> None:
    """A file size limit (0: every write of the file fails, as on a full disk, with EFBIG)."""
    resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))


def test_a_full_disk_fails_the_claims_of_that_call_and_keeps_memory_as_the_file(dra_node: DraNode) -> None:
    fuse_node(dra_node)
    first, second, rival = (
        claim(dra_node, "first"),
        claim(dra_node, "second", "fuse-fuse2"),
        claim(dra_node, "rival"),
    )
    path = state_file(dra_node)
    full = f"{path}: cannot write: File too large"

    async def scenario() -> None:
        async with serving(dra_node) as serve:
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(first) == {first.uid: devices()}
            limit(serve, 0)
            assert await kubelet.prepare(second, first) == {
                second.uid: f"claim default/second: not prepared: {full}",
                first.uid: devices(),  # prepared before: answered as before
            }
            assert await kubelet.unprepare(first) == {
                first.uid: f"claim default/first: still prepared: {full}"
            }
            assert await kubelet.prepare(rival) == {rival.uid: refused(rival, first)}
            assert held(dra_node) == {first.uid: ["fuse-fuse"]}
            assert sorted(p.name for p in path.parent.iterdir()) == [
                "dra.sock",
                "prepared.json",
                "serialize.lock",
            ]  # no temp file
            await serve.logged(f"prepare failed: cannot record 1 claim: {full}")

            limit(serve, resource.RLIM_INFINITY)  # space again: the kubelet's retries go through
            assert await kubelet.unprepare(first) == {first.uid: ""}
            assert await kubelet.prepare(rival, second) == {
                rival.uid: devices(),
                second.uid: devices("fuse2"),
            }
            assert held(dra_node) == {rival.uid: ["fuse-fuse"], second.uid: ["fuse-fuse2"]}

    with running(dra_node.api):
        run(scenario(), timeout=90)


def test_a_directory_at_the_files_path_fails_prepare_until_it_goes(dra_node: DraNode) -> None:
    fuse_node(dra_node)
    first = claim(dra_node, "first")
    path = state_file(dra_node)

    async def scenario() -> None:
        async with serving(dra_node) as serve:
            kubelet = await registered(dra_node, serve)
            path.mkdir()
            assert await kubelet.prepare(first) == {
                first.uid: f"claim default/first: {path}: is a directory, not a prepared-claims file; "
                "nothing is prepared or released until it is repaired or moved away"
            }
            path.rmdir()
            assert await kubelet.prepare(first) == {first.uid: devices()}
            assert held(dra_node) == {first.uid: ["fuse-fuse"]}

    with running(dra_node.api):
        run(scenario(), timeout=90)


def test_the_file_is_written_again_after_the_kubelet_wiped_its_directories(dra_node: DraNode) -> None:
    fuse_node(dra_node)
    first, rival = claim(dra_node, "first"), claim(dra_node, "rival")

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra"))
        try:
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(first) == {first.uid: devices()}
            limit(serve, 0)  # and the disk is full: written again once it is not
            shutil.rmtree(dra_node.plugins)  # a starting kubelet whose directories were wiped
            shutil.rmtree(dra_node.registry)
            dra_node.registry.mkdir()
            path = state_file(dra_node)
            await serve.logged(
                f"cannot write the prepared claims again: {path}: cannot write: File too large"
            )
            assert not path.exists()
            limit(serve, resource.RLIM_INFINITY)
            await serve.wait_for(lambda: held(dra_node) == {first.uid: ["fuse-fuse"]}, "the file again")
            await serve.logged(f"{path} was gone: written again, 1 prepared claim")
            await registered(dra_node, serve)
            serve.proc.kill()
        finally:
            await serve.exit()
        async with serving(dra_node) as serve:
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(rival) == {rival.uid: refused(rival, first)}

    with running(dra_node.api):
        run(scenario(), timeout=90)


def _mistyped(path: Path) -> str:
    entry = {"request_names": ["fuse"], "pool_name": [NODE], "device_name": "fuse-fuse",
             "cdi_device_ids": [f"{FUSE}=fuse"], "admin_access": False}  # fmt: skip
    path.write_text(json.dumps({"uid-old": [entry]}))
    return 'claims["uid-old"][0].pool_name: an array where a pool name belongs'


def _oversized(path: Path) -> str:
    with path.open("wb") as fh:
        fh.truncate(4 * 1024 * 1024 + 1)
    return "the file is larger than 4 MiB, too large for a prepared-claims file"


def _both_slots_damaged(path: Path) -> str:
    slots = [
        bytearray(record_slot(n, encode(PreparedState()), MIN_SLOT).ljust(MIN_SLOT, b"\0")) for n in (1, 2)
    ]
    for data in slots:
        data[HEADER.size] ^= 1  # a bit of each record flipped
    path.write_bytes(b"".join(slots))
    return "no slot holds a whole record (slot 0: checksum mismatch; slot 1: checksum mismatch)"


def _deep(path: Path) -> str:
    path.write_text("[" * 200_000 + "]" * 200_000)
    return "nested more than 64 levels deep, which no prepared-claims file is"


def _zero(path: Path) -> str:
    make_node(path, os.makedev(1, 5))
    return "is a character device, not a prepared-claims file"


def _link(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "is a symbolic link, which is not followed"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO, not a prepared-claims file"


def _directory(path: Path) -> str:
    path.mkdir()
    return "is a directory, not a prepared-claims file"


BAD_FILES: dict[str, Callable[[Path], str]] = {
    "fifo": _fifo,
    "device": _zero,
    "link-to-dev-zero": _link,
    "oversized": _oversized,
    "too-deep": _deep,
    "mistyped": _mistyped,
    "both-slots-damaged": _both_slots_damaged,
    "directory": _directory,
}


def _time(record: dict[str, str]) -> datetime:
    return datetime.fromisoformat(record["time"].replace("Z", "+00:00"))


@pytest.mark.parametrize("bad", list(BAD_FILES))
def test_a_state_file_that_cannot_be_used_is_reported_and_refuses_prepare_until_moved_away(
    dra_node: DraNode, bad: str
) -> None:
    fuse_node(dra_node)
    first = claim(dra_node, "first")
    path = state_file(dra_node)
    path.parent.mkdir(parents=True)
    reason = f"{path}: {BAD_FILES[bad](path)}"
    before = path.lstat()

    async def scenario() -> None:
        async with serving(dra_node) as serve:
            await serve.logged(f"{reason}; {UNTIL}")
            logged = [json.loads(line) for line in serve.lines if line.startswith("{")]
            [started] = [r for r in logged if r["msg"].startswith(f"DRA driver {DRIVER} on node {NODE}")]
            [error] = [r for r in logged if reason in r["msg"]]
            assert error["level"] == "error"
            assert (_time(error) - _time(started)).total_seconds() < 2
            kubelet = await registered(dra_node, serve)
            assert await kubelet.prepare(first) == {first.uid: f"claim default/first: {reason}; {UNTIL}"}
            assert await kubelet.unprepare(first) == {first.uid: f"claim default/first: {reason}; {UNTIL}"}
            after = path.lstat()  # left as it was: not read, not replaced
            assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
            if bad == "mistyped":  # the operator moves it away: the next call goes through
                path.rename(path.with_name("prepared.json.bad"))
                assert await kubelet.prepare(first) == {first.uid: devices()}
                await serve.logged(f"{path}: usable again, 0 prepared claims")

    with running(dra_node.api):
        run(scenario(), timeout=90)
