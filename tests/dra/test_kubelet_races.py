"""The kubelet side against what goes wrong around it: the prepared-claims file put back while
serving, calls queued behind an instance that hangs, names far longer than the API allows."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess

import pytest

from cdi_plugin.dra import api
from cdi_plugin.dra.kubelet import KubeletPlugin, Paths
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.serialize import Serializer
from cdi_plugin.dra.service import DraService
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import eventually
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.test_kubelet import Claims, claim_obj, claims, inventory, kubelet, paths, plugin, state_doc
from tests.dra.test_serialize import locked_elsewhere

__all__ = ["claims", "inventory", "kubelet", "paths", "plugin"]

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("put_back", ["renamed", "copied"])
async def test_a_copy_of_an_older_record_put_back_is_refused_until_moved_away(
    kubelet: FakeKubelet, claims: Claims, paths: Paths, plugin: KubeletPlugin, put_back: str
) -> None:
    """Believed, the copy would hand a device prepared since to a second claim and refuse one
    released since; it is refused in one line instead, and moved away, the driver's own record
    is written again."""
    early, held, rival, other = (api.Claim("ns", n, f"uid-{n}") for n in ("early", "held", "rival", "other"))
    for ref, device in (
        (early, "gpu-card1"),
        (held, "fuse-fuse"),
        (rival, "fuse-fuse"),
        (other, "gpu-card1"),
    ):
        claims.add(claim_obj(ref, ("r", NODE, device)))
    assert isinstance((await kubelet.prepare(early))["uid-early"], tuple)
    copy = paths.state_file.read_bytes()
    assert isinstance((await kubelet.prepare(held))["uid-held"], tuple)
    assert await kubelet.unprepare(early) == {"uid-early": ""}
    if put_back == "renamed":
        paths.state_file.with_name("copy").write_bytes(copy)
        os.replace(paths.state_file.with_name("copy"), paths.state_file)
    else:
        paths.state_file.write_bytes(copy)  # in place: same inode, same size
    why = (
        f"{paths.state_file}: record 1, older than record 3 this driver last read or wrote (a copy put "
        "back, or another instance's older state?); nothing is prepared or released until it is "
        "repaired or moved away"
    )
    assert await kubelet.prepare(rival, other) == {
        "uid-rival": f"claim ns/rival: {why}",
        "uid-other": f"claim ns/other: {why}",
    }
    assert await kubelet.unprepare(held) == {"uid-held": f"claim ns/held: {why}"}
    assert paths.state_file.read_bytes() == copy  # never overwritten
    paths.state_file.rename(paths.state_file.with_name("prepared.json.bad"))
    assert await kubelet.prepare(rival, other) == {
        "uid-rival": "claim ns/rival: device node-a/fuse-fuse (cdi-plugin.io/fuse=fuse): "
        "already prepared for claim uid-held",
        "uid-other": (api.PreparedDevice(("r",), NODE, "gpu-card1", ("cdi-plugin.io/gpu=card1",)),),
    }
    assert sorted(state_doc(paths.state_file)["claims"]) == ["uid-held", "uid-other"]


async def test_calls_queued_behind_a_hung_instance_end_within_their_budget_and_change_nothing_later(
    paths: Paths, inventory: SpecInventory, claims: Claims, caplog: pytest.LogCaptureFixture
) -> None:
    """Another instance of the driver holds the node's lock (it hangs). An Unprepare waits for it,
    a Prepare waits behind the Unprepare: each is answered within its budget, before the kubelet's
    deadline, and neither takes effect once the lock is free (the kubelet may have called again
    since: released and prepared again, or the other way round)."""
    held, late = api.Claim("ns", "held", "uid-held"), api.Claim("ns", "late", "uid-late")
    claims.add(claim_obj(held, ("r", NODE, "fuse-fuse")))
    claims.add(claim_obj(late, ("r", NODE, "gpu-card0")))
    serializer = Serializer(paths.lock_file, timeout=600)  # the budget ends the wait
    prepared = PreparedClaims(paths.state_file)
    service = DraService(DRIVER, NODE, inventory, claims, prepared, serializer=serializer, call_budget=2.0)
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        assert isinstance((await kubelet.prepare(held))["uid-held"], tuple)
        hung = subprocess.Popen(["flock", str(paths.lock_file), "cat"], stdin=subprocess.PIPE)
        try:
            await eventually(lambda: locked_elsewhere(paths.lock_file), "the other instance holds the lock")
            caplog.set_level(logging.DEBUG, "cdi_plugin.dra.serialize")
            unprepare = asyncio.create_task(kubelet.unprepare(held))
            await eventually(lambda: "waiting for" in caplog.text, "the Unprepare waits for the lock")
            prepare = asyncio.create_task(kubelet.prepare(late))
            answers = await asyncio.wait_for(asyncio.gather(unprepare, prepare), 30)
        finally:
            hung.communicate(timeout=30)  # the lock is free again
        assert answers[0] == {
            "uid-held": f"claim ns/held: still prepared: {paths.lock_file}: held by another instance of "
            "the driver for more than 2s"
        }
        assert re.fullmatch(
            rf"claim ns/late: not prepared: ({re.escape(str(paths.lock_file))}: held by another instance "
            r"of the driver for more than [\d.]+s|its turn did not come within the time the kubelet gives "
            "the call: the calls before it wait for the node's lock)",
            answers[1]["uid-late"],  # type: ignore[arg-type]
        ), answers[1]
        nothing = api.Claim("ns", "none", "uid-none")
        assert await kubelet.unprepare(nothing) == {"uid-none": ""}  # its turn comes after any queued
    assert sorted(state_doc(paths.state_file)["claims"]) == ["uid-held"]


async def test_names_of_10_kb_get_answers_of_one_line_of_bounded_length(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    """Whatever the kubelet names, each answer is one line that never repeats 10 KB of it: here
    when the node's lock cannot be taken (a directory at its path), or the UID is named twice."""
    paths.lock_file.mkdir(parents=True)
    service = DraService(
        DRIVER,
        NODE,
        inventory,
        claims,
        PreparedClaims(paths.state_file),
        serializer=Serializer(paths.lock_file),
    )
    long = api.Claim("ns\n" + "n" * 10240, "c" * 10240, "u" * 10240)
    twice = [api.Claim("ns", "a" * 10240, "uid-1"), api.Claim("ns", "b" * 10240, "uid-1")]
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        answers = [
            *(await kubelet.prepare(long)).values(),
            *(await kubelet.unprepare(long)).values(),
            *(await kubelet.prepare(*twice)).values(),
        ]
    for answer in answers:
        assert isinstance(answer, str)
        assert "\n" not in answer
        assert len(answer) < 1000, answer[:200]
    assert answers[1].startswith("claim ns\\n" + "n" * 314 + "... (20484 characters): still prepared: ")
