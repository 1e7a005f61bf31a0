"""The driver's kubelet side over real unix sockets: registration and NodePrepare/Unprepare."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cdi_plugin import recurring
from cdi_plugin.aio.sockets import MAX_SOCKET_PATH, identity
from cdi_plugin.cli.serve_dra import dra_options
from cdi_plugin.dra import api
from cdi_plugin.dra.kubelet import KubeletPlugin, Paths, SocketInUseError
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.prepare import ClaimReadError
from cdi_plugin.dra.prepared import MAX_STATE_BYTES, PreparedClaims
from cdi_plugin.dra.serialize import SerializeError, Serializer
from cdi_plugin.dra.service import MAX_CLAIMS, DraService
from cdi_plugin.inventory import SpecInventory
from cdi_plugin.store import slotfile
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakekubelet import FakeKubelet, RegistrationRefused
from tests.dra.specinventory import spec_inventory

pytestmark = pytest.mark.asyncio


def state_doc(path: Path) -> Any:
    """The prepared-claims document in the file (its newest record), as JSON."""
    return json.loads(slotfile.read(path, MAX_STATE_BYTES, "a prepared-claims file").record)


def claim_obj(
    ref: api.Claim, *results: tuple[str, str, str], driver: str = DRIVER, uid: str = "", admin: bool = False
) -> dict[str, Any]:
    """A ResourceClaim allocated to (request, pool, device) triples (with admin access: ``admin``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": uid or ref.uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": driver, "pool": p, "device": d}
                        | ({"adminAccess": True} if admin else {})
                        for r, p, d in results
                    ]
                }
            }
        },
    }


class Claims:
    """The API server's claims, at the boundary: a dict, or down."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.down = False
        self.reads = 0

    def add(self, obj: dict[str, Any]) -> None:
        self.objects[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj

    async def read_claim(
        self, namespace: str, name: str, *, until: float | None = None
    ) -> Mapping[str, Any] | None:
        self.reads += 1
        if self.down:
            raise ClaimReadError("connection refused")
        return self.objects.get((namespace, name))


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(DRIVER, registry_dir=tmp_path / "plugins_registry", plugins_dir=tmp_path / "plugins")


@pytest.fixture
def inventory(spec_dir: Path, host_nodes: Path) -> SpecInventory:
    for name in ("fuse", "card0", "card1"):
        make_node(host_nodes / name)
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    write_spec(
        spec_dir, "cdi-plugin.io/gpu", {n: str(host_nodes / n) for n in ("card0", "card1", "gone")}
    )  # /dev/gone does not exist: gpu-gone is unhealthy
    return spec_inventory([spec_dir])


@pytest.fixture
def claims() -> Claims:
    return Claims()


def _plugin(paths: Paths, inventory: SpecInventory, claims: Claims) -> KubeletPlugin:
    service = DraService(DRIVER, NODE, inventory, claims, PreparedClaims(paths.state_file))
    return KubeletPlugin(paths, service)


@pytest_asyncio.fixture
async def plugin(paths: Paths, inventory: SpecInventory, claims: Claims) -> AsyncIterator[KubeletPlugin]:
    async with _plugin(paths, inventory, claims) as p:
        yield p


@pytest_asyncio.fixture
async def kubelet(paths: Paths, plugin: KubeletPlugin) -> FakeKubelet:
    k = FakeKubelet(paths.registry_dir)
    [socket] = k.sockets()
    await k.register(socket, DRIVER)
    return k


async def test_sockets_are_for_root_alone_whatever_the_umask(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    """Mode 0600 from the start, as the device plugin's: with umask 0, any local user could
    otherwise prepare and release claims."""
    old = os.umask(0)
    try:
        async with _plugin(paths, inventory, claims):
            sockets = (paths.dra_socket, paths.registration_socket)
            modes = {p.name: os.lstat(p).st_mode & 0o777 for p in sockets}
    finally:
        os.umask(old)
    assert modes == {"dra.sock": 0o600, f"{DRIVER}-reg.sock": 0o600}


async def test_registration(paths: Paths, plugin: KubeletPlugin) -> None:
    kubelet = FakeKubelet(paths.registry_dir)
    assert kubelet.sockets() == [paths.registry_dir / f"{DRIVER}-reg.sock"]
    await kubelet.register(kubelet.sockets()[0], DRIVER)
    [info] = kubelet.infos
    assert (info.type, info.name, info.endpoint) == (
        "DRAPlugin",
        DRIVER,
        str(paths.plugins_dir / DRIVER / "dra.sock"),
    )
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert (kubelet.version, kubelet.health_version) == ("v1.DRAPlugin", "v1.DRAResourceHealth")
    assert plugin.registrar.registered.is_set()


async def test_an_older_kubelet_takes_v1beta1(paths: Paths, plugin: KubeletPlugin, claims: Claims) -> None:
    kubelet = FakeKubelet(paths.registry_dir, known_versions=["v1beta1.DRAPlugin"])
    await kubelet.register(kubelet.sockets()[0], DRIVER)
    assert kubelet.version == "v1beta1.DRAPlugin"
    ref = api.Claim("ns", "c", "uid-1")
    claims.add(claim_obj(ref, ("fuse", NODE, "fuse-fuse")))
    assert await kubelet.prepare(ref) == {
        "uid-1": (api.PreparedDevice(("fuse",), NODE, "fuse-fuse", ("cdi-plugin.io/fuse=fuse",)),)
    }


async def test_refusal_is_logged(
    paths: Paths, plugin: KubeletPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet = FakeKubelet(paths.registry_dir, known_versions=["v1alpha4.DRAPlugin"])
    with caplog.at_level(logging.ERROR), pytest.raises(RegistrationRefused):
        await kubelet.register(kubelet.sockets()[0], DRIVER)
    assert not plugin.registrar.registered.is_set()
    assert "none of the versions" in plugin.registrar.error
    assert f"the kubelet refused DRA driver {DRIVER}: none of the versions" in caplog.text


async def test_a_lasting_refusal_is_logged_once_then_summarised_then_its_end(
    paths: Paths, plugin: KubeletPlugin, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin watcher tries again and again, refused for the same reason: one error line, one
    summary once the (shrunk) interval has passed, one line when a registration succeeds."""
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    refusing = FakeKubelet(paths.registry_dir, known_versions=["v1alpha4.DRAPlugin"])
    refused = f"the kubelet refused DRA driver {DRIVER}: none of the versions"

    def said(start: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage().startswith(start)]

    async def attempt() -> None:
        with pytest.raises(RegistrationRefused):
            await refusing.register(refusing.sockets()[0], DRIVER)

    with caplog.at_level(logging.DEBUG, "cdi_plugin.dra.kubelet"):
        for _ in range(4):
            await attempt()
        assert [r.levelno for r in said(refused)] == [logging.ERROR] + [logging.DEBUG] * 3
        monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.0)
        await attempt()
        monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
        await attempt()
        (summary,) = said("still ")
        assert summary.levelno == logging.ERROR
        assert re.fullmatch(
            rf"still {refused}.* \(5 times since {when}, for [\d.]+ s\)", summary.getMessage()
        )
        assert said(refused)[-1].levelno == logging.DEBUG, "the next summary waits a whole interval"
        await FakeKubelet(paths.registry_dir).register(refusing.sockets()[0], DRIVER)
        (end,) = said("recovered after ")
        assert re.fullmatch(
            rf"recovered after [\d.]+ s \(6 times since {when}\): {refused}.*", end.getMessage()
        )
        assert caplog.messages[-1] == f"registered with the kubelet as DRA driver {DRIVER}"
    assert plugin.registrar.registered.is_set()


async def test_a_refusals_reason_is_logged_on_one_line_of_bounded_length(
    paths: Paths, plugin: KubeletPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    reason = "bad\nERROR forged line\x1b[31m" + "x" * 100_000
    async with grpc.aio.insecure_channel(f"unix://{paths.registration_socket}") as channel:
        with caplog.at_level(logging.ERROR):
            await api.RegistrationStub(channel).NotifyRegistrationStatus(
                api.RegistrationStatus(plugin_registered=False, error=reason), timeout=10
            )
    [record] = [r for r in caplog.records if "refused DRA driver" in r.getMessage()]
    message = record.getMessage()
    assert "\n" not in message
    assert "\x1b" not in message
    assert "bad\\nERROR forged line\\x1b[31mxx" in message
    assert len(message) < 600
    assert message.endswith("characters)")
    assert plugin.registrar.error.startswith("bad\\n")
    assert len(plugin.registrar.error) < 450


async def test_prepare_answers_with_cdi_names(kubelet: FakeKubelet, claims: Claims) -> None:
    one, two = api.Claim("ns", "one", "uid-1"), api.Claim("ns", "two", "uid-2")
    claims.add(
        claim_obj(
            one, ("gpu/big", NODE, "gpu-card0"), ("gpu/small", NODE, "gpu-card0"), ("x", NODE, "gpu-card1")
        )
    )
    claims.add(claim_obj(two, ("fuse", NODE, "fuse-fuse")))
    assert await kubelet.prepare(one, two) == {
        "uid-1": (
            api.PreparedDevice(("gpu",), NODE, "gpu-card0", ("cdi-plugin.io/gpu=card0",)),
            api.PreparedDevice(("x",), NODE, "gpu-card1", ("cdi-plugin.io/gpu=card1",)),
        ),
        "uid-2": (api.PreparedDevice(("fuse",), NODE, "fuse-fuse", ("cdi-plugin.io/fuse=fuse",)),),
    }


async def test_bad_claims_get_one_line_errors_and_do_not_stop_the_good_one(
    kubelet: FakeKubelet, claims: Claims
) -> None:
    refs = {
        n: api.Claim("ns", n, f"uid-{n}")
        for n in ("good", "missing", "replaced", "other", "unknown", "sick", "pool", "unallocated")
    }
    claims.add(claim_obj(refs["good"], ("r", NODE, "fuse-fuse")))
    claims.add(claim_obj(refs["replaced"], ("r", NODE, "fuse-fuse"), uid="uid-new"))
    claims.add(claim_obj(refs["other"], ("r", NODE, "fuse-fuse"), driver="gpu.example.com"))
    claims.add(claim_obj(refs["unknown"], ("r", NODE, "gpu-card1"), ("r", NODE, "net-eth0")))
    claims.add(claim_obj(refs["sick"], ("r", NODE, "gpu-gone")))
    claims.add(claim_obj(refs["pool"], ("r", "node-b", "fuse-fuse")))
    claims.add(
        {"metadata": {"namespace": "ns", "name": "unallocated", "uid": "uid-unallocated"}, "status": {}}
    )
    answer = await kubelet.prepare(*refs.values())
    assert answer.pop("uid-good") == (
        api.PreparedDevice(("r",), NODE, "fuse-fuse", ("cdi-plugin.io/fuse=fuse",)),
    )
    assert answer == {
        "uid-missing": "claim ns/missing: not found in the API server (deleted after allocation?)",
        "uid-replaced": "claim ns/replaced: UID uid-new in the API server, uid-replaced requested "
        "(the claim was replaced)",
        "uid-other": f"claim ns/other: no device allocated by driver {DRIVER}",
        "uid-unknown": f"claim ns/unknown: device {NODE}/net-eth0: not served by driver {DRIVER} "
        "on this node (removed?)",
        "uid-sick": f"claim ns/sick: device {NODE}/gpu-gone (cdi-plugin.io/gpu=gone): unhealthy: "
        f"host device node {kubelet_dev(kubelet)}/gone is missing",
        "uid-pool": f"claim ns/pool: device node-b/fuse-fuse: pool node-b is not this node's pool {NODE}",
        "uid-unallocated": "claim ns/unallocated: not allocated",
    }


def kubelet_dev(kubelet: FakeKubelet) -> Path:
    return kubelet.registry_dir.parent / "dev"


class SlowClaims(Claims):
    """Each read takes ``seconds``; counts the reads in flight."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.in_flight = self.most = 0

    async def read_claim(
        self, namespace: str, name: str, *, until: float | None = None
    ) -> Mapping[str, Any] | None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
            return await super().read_claim(namespace, name, until=until)
        finally:
            self.in_flight -= 1


async def test_claims_not_read_within_the_calls_budget_fail_with_the_reason(
    paths: Paths, inventory: SpecInventory
) -> None:
    """The first 16 reads start at once (3 s to spare on a busy machine) and are cut short when the
    budget ends; the other claims' reads would start after it."""
    claims = SlowClaims(60)  # an API server that answers after the kubelet gave up
    refs = [api.Claim("ns", f"c{i}", f"uid-{i}") for i in range(20)]
    service = DraService(DRIVER, NODE, inventory, claims, PreparedClaims(paths.state_file), call_budget=3.0)
    answer = await asyncio.wait_for(service.prepare(refs), 30)
    assert (claims.most, claims.in_flight, claims.reads) == (16, 0, 0)  # 16 started, none answered
    assert answer["uid-0"] == (
        "claim ns/c0: cannot read it: no answer within the time the kubelet gives the call"
    )
    assert answer["uid-19"] == (
        "claim ns/c19: cannot read it: the call's other claims took the time the kubelet gives the call"
    )


async def test_a_call_naming_thousands_of_claims_reads_16_at_a_time_and_answers_each(
    paths: Paths, inventory: SpecInventory
) -> None:
    claims = SlowClaims(0.001)
    refs = [api.Claim("ns", f"c{i}", f"uid-{i}") for i in range(3000)]
    claims.add(claim_obj(refs[-1], ("fuse", NODE, "fuse-fuse")))
    async with _plugin(paths, inventory, claims):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        answer = await kubelet.prepare(*refs)
    assert (claims.reads, claims.most) == (3000, 16)
    assert answer.pop("uid-2999") == (
        api.PreparedDevice(("fuse",), NODE, "fuse-fuse", ("cdi-plugin.io/fuse=fuse",)),
    )
    assert set(answer.values()) == {
        f"claim ns/c{i}: not found in the API server (deleted after allocation?)" for i in range(2999)
    }


@pytest.mark.parametrize("method", ["NodePrepareResources", "NodeUnprepareResources"])
async def test_a_call_naming_more_claims_than_the_bound_is_refused_before_any_read(
    kubelet: FakeKubelet, claims: Claims, paths: Paths, method: str
) -> None:
    """50,000 claims: their one-line answers would take more than the kubelet's 4 MiB, and the
    whole call would fail on its side with gRPC's own error."""
    refs = [api.Claim("ns", f"c{i}", f"uid-{i}") for i in range(50_000)]
    call = kubelet.prepare if method == "NodePrepareResources" else kubelet.unprepare
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(*refs)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        f"{method} names 50000 claims, more than the {MAX_CLAIMS} the driver takes in one call; "
        "nothing was done"
    )
    assert claims.reads == 0
    assert not paths.state_file.exists()
    # the bound itself is served
    answer = await call(*refs[:MAX_CLAIMS])
    assert len(answer) == MAX_CLAIMS


async def test_an_answer_larger_than_the_kubelet_takes_fails_the_call_naming_its_size(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    refs = [api.Claim("ns", f"c{i}", f"uid-{i}") for i in range(3)]
    for ref, device in zip(refs, ("fuse-fuse", "gpu-card0", "gpu-card1"), strict=True):
        claims.add(claim_obj(ref, ("r", NODE, device)))
    limit = 150  # one claim's answer fits (about 60 bytes), three do not
    service = DraService(DRIVER, NODE, inventory, claims, PreparedClaims(paths.state_file), max_message=limit)
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        assert isinstance((await kubelet.prepare(refs[0]))["uid-0"], tuple)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kubelet.prepare(*refs)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.value.details() or ""
        assert re.fullmatch(
            rf"the answer to NodePrepareResources for 3 claims would take (\d+) bytes, more than the "
            rf"{limit} the kubelet accepts; their preparation stands",
            details,
        ), details
        assert set(state_doc(paths.state_file)["claims"]) == {"uid-0", "uid-1", "uid-2"}
        assert await kubelet.unprepare(*refs) == {"uid-0": "", "uid-1": "", "uid-2": ""}
        assert state_doc(paths.state_file)["claims"] == {}


async def test_a_uid_named_for_two_claims_in_one_call_is_refused_whatever_the_order(
    kubelet: FakeKubelet, claims: Claims
) -> None:
    real, other = api.Claim("ns", "real", "uid-1"), api.Claim("ns", "other", "uid-1")
    claims.add(claim_obj(real, ("fuse", NODE, "fuse-fuse")))
    claims.add(claim_obj(api.Claim("ns", "other", "uid-2"), ("gpu", NODE, "gpu-card0")))
    assert await kubelet.prepare(real, other) == {
        "uid-1": "claim ns/real: its UID 'uid-1' is named for claim ns/other too in this call"
    }
    assert await kubelet.prepare(other, real) == {
        "uid-1": "claim ns/other: its UID 'uid-1' is named for claim ns/real too in this call"
    }
    assert isinstance((await kubelet.prepare(real))["uid-1"], tuple)  # named once: prepared


async def test_api_server_down_is_a_per_claim_error(kubelet: FakeKubelet, claims: Claims) -> None:
    claims.down = True
    ref = api.Claim("ns", "c", "uid-1")
    assert await kubelet.prepare(ref) == {"uid-1": "claim ns/c: cannot read it: connection refused"}
    claims.down = False
    claims.add(claim_obj(ref, ("r", NODE, "fuse-fuse")))
    assert isinstance((await kubelet.prepare(ref))["uid-1"], tuple)  # retried by the kubelet: now prepared


async def test_prepare_is_idempotent_across_restarts_and_unprepare_releases(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    ref = api.Claim("ns", "c", "uid-1")
    claims.add(claim_obj(ref, ("r", NODE, "gpu-card1")))
    async with _plugin(paths, inventory, claims):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        first = await kubelet.prepare(ref)
        assert await kubelet.prepare(ref) == first
    assert FakeKubelet(paths.registry_dir).sockets() == []
    assert not paths.dra_socket.exists()
    del claims.objects["ns", "c"]  # the claim object is gone; the prepared state is on disk
    reads = claims.reads
    async with _plugin(paths, inventory, claims):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        assert await kubelet.prepare(ref) == first
        assert claims.reads == reads
        assert state_doc(paths.state_file)["claims"]["uid-1"][0]["cdi_device_ids"] == [
            "cdi-plugin.io/gpu=card1"
        ]
        assert await kubelet.unprepare(ref, api.Claim("ns", "never", "uid-never")) == {
            "uid-1": "",
            "uid-never": "",
        }
        assert state_doc(paths.state_file) == {"version": 1, "claims": {}}
        assert (await kubelet.prepare(ref))[
            "uid-1"
        ] == "claim ns/c: not found in the API server (deleted after allocation?)"


async def test_a_stale_socket_is_replaced(paths: Paths, inventory: SpecInventory, claims: Claims) -> None:
    paths.registry_dir.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as stale:  # bound, then closed: nothing listens on it
        stale.bind(str(paths.registration_socket))
    async with _plugin(paths, inventory, claims):
        kubelet = FakeKubelet(paths.registry_dir)
        assert kubelet.sockets() == [paths.registration_socket]
        await kubelet.register(paths.registration_socket, DRIVER)


async def test_a_file_at_a_socket_path_is_left_as_it_is(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    paths.registry_dir.mkdir(parents=True)
    paths.registration_socket.write_text("someone's notes")
    with pytest.raises(OSError, match=r"-reg.sock is a regular file, not a socket; not replacing it"):
        async with _plugin(paths, inventory, claims):
            pass
    assert paths.registration_socket.read_text() == "someone's notes"
    assert not paths.dra_socket.exists()  # the DRA socket, started first, is gone again


async def test_a_file_in_place_of_a_socket_directory_is_an_oserror_naming_it(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    paths.registry_dir.parent.mkdir(parents=True, exist_ok=True)
    paths.registry_dir.write_text("someone's notes")
    refusal = f"{paths.registry_dir} is a regular file, not a directory; cannot listen on "
    with pytest.raises(OSError, match=f"^{re.escape(refusal + str(paths.registration_socket))}$"):
        async with _plugin(paths, inventory, claims):
            pass
    assert paths.registry_dir.read_text() == "someone's notes"


def _socket_dir(root: Path, socket_bytes: int) -> Path:
    """A directory under ``root`` in which the DRA socket's path takes ``socket_bytes`` bytes."""
    plugins = root / "p"
    fill = socket_bytes - len(os.fsencode(plugins / DRIVER / "dra.sock")) - 1
    return plugins / ("d" * fill) if fill > 0 else plugins


async def test_a_socket_path_grpc_cannot_bind_is_an_oserror_naming_it(
    tmp_path: Path, inventory: SpecInventory, claims: Claims
) -> None:
    """gRPC refuses to bind a path of 106 bytes (a RuntimeError of its own), which a unix socket
    allows: the caller, which retries on OSError, gets one naming the socket."""
    paths = Paths(DRIVER, registry_dir=tmp_path / "r", plugins_dir=_socket_dir(tmp_path, 106))
    assert len(os.fsencode(paths.dra_socket)) == 106
    with pytest.raises(OSError, match=r"dra\.sock: cannot listen: longer than gRPC binds \(105 bytes\)$"):
        async with _plugin(paths, inventory, claims):
            pass
    assert not paths.dra_socket.exists()


@pytest.mark.parametrize("socket_bytes", [105, 106])
async def test_dra_options_refuse_a_socket_path_grpc_cannot_bind(tmp_path: Path, socket_bytes: int) -> None:
    plugins = _socket_dir(tmp_path, socket_bytes)
    if socket_bytes > MAX_SOCKET_PATH:
        with pytest.raises(
            DraConfigError, match=rf"--kubelet-plugins-dir: the socket .* \({MAX_SOCKET_PATH} bytes\)"
        ):
            dra_options(DRIVER, NODE, None, plugins, tmp_path / "r")
    else:
        assert (
            len(os.fsencode(dra_options(DRIVER, NODE, None, plugins, tmp_path / "r").paths.dra_socket)) == 105
        )


async def test_a_socket_path_that_cannot_be_bound_is_refused_with_the_reason(
    tmp_path: Path, inventory: SpecInventory, claims: Claims
) -> None:
    deep = tmp_path / ("d" * 120)  # the DRA socket's path is longer than a unix socket address holds
    paths = Paths(DRIVER, registry_dir=tmp_path / "plugins_registry", plugins_dir=deep)
    with pytest.raises(OSError, match=r"/dra.sock: cannot listen: AF_UNIX path too long$"):
        async with _plugin(paths, inventory, claims):
            pass
    assert list(paths.dra_socket.parent.iterdir()) == []


async def test_malformed_request_is_invalid_argument(kubelet: FakeKubelet) -> None:
    async with grpc.aio.insecure_channel(f"unix://{kubelet.endpoint}") as channel:
        call = channel.unary_unary(
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(b"\x0a\x05\xff\xff", timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesRequest" in str(info.value.details())


async def test_sockets_come_back_after_the_kubelet_wiped_them(
    paths: Paths, plugin: KubeletPlugin, kubelet: FakeKubelet, claims: Claims
) -> None:
    assert not await plugin.recover()  # nothing to do
    paths.registration_socket.unlink()
    paths.dra_socket.unlink()
    assert await plugin.recover()
    again = FakeKubelet(paths.registry_dir)
    await again.register(again.sockets()[0], DRIVER)
    ref = api.Claim("ns", "c", "uid-1")
    claims.add(claim_obj(ref, ("r", NODE, "fuse-fuse")))
    assert isinstance((await again.prepare(ref))["uid-1"], tuple)


async def test_the_node_lock_is_taken_only_to_write_prepared_claims_again(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    """Sockets served again with nothing prepared need no lock, even one that cannot be taken (a
    directory at its path); prepared claims whose file is gone are written under it."""
    paths.lock_file.mkdir(parents=True)
    prepared = PreparedClaims(paths.state_file)
    service = DraService(DRIVER, NODE, inventory, claims, prepared, serializer=Serializer(paths.lock_file))
    async with KubeletPlugin(paths, service) as plugin:
        paths.dra_socket.unlink()
        assert await plugin.recover()  # nothing prepared: nothing to write again
        await prepared.put({"uid-1": (api.PreparedDevice(("r",), NODE, "fuse-fuse", ("x.io/fuse=fuse",)),)})
        paths.state_file.unlink()
        with pytest.raises(SerializeError, match=r"serialize\.lock: cannot open the lock: Is a directory"):
            await plugin.recover()
        assert not paths.state_file.exists()


async def test_a_socket_another_instance_serves_is_not_replaced(
    paths: Paths, inventory: SpecInventory, claims: Claims
) -> None:
    async with _plugin(paths, inventory, claims):
        second = _plugin(paths, inventory, claims)
        with pytest.raises(SocketInUseError, match=r"dra\.sock: another process is serving it"):
            await second.start()
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(paths.registration_socket, DRIVER)
        assert await kubelet.prepare() == {}  # the first instance still answers
    assert FakeKubelet(paths.registry_dir).sockets() == []
    assert not paths.dra_socket.exists()


async def test_a_socket_another_process_bound_after_ours_was_removed_is_left_to_it(
    paths: Paths, plugin: KubeletPlugin
) -> None:
    """The kubelet removed the sockets, and another instance (the same names: a kubelet before
    1.33) bound them before this one noticed: stopping the servers of the removed sockets must not
    take the other instance's away, nor must this one serve again over it."""
    others = []
    for path in (paths.dra_socket, paths.registration_socket):
        path.unlink()
        other = socket.socket(socket.AF_UNIX)
        other.bind(str(path))
        other.listen()
        others.append((path, other, identity(path)))
    try:
        with pytest.raises(SocketInUseError, match=r"dra\.sock: another process is serving it"):
            await plugin.recover()
        assert [identity(path) for path, _, _ in others] == [bound for _, _, bound in others]
    finally:
        for _, other, _ in others:
            other.close()


async def test_a_device_prepared_for_one_claim_is_refused_to_another_unless_admin_access(
    kubelet: FakeKubelet, claims: Claims, paths: Paths, plugin: KubeletPlugin
) -> None:
    first, second, admin = (api.Claim("ns", n, f"uid-{n}") for n in ("first", "second", "admin"))
    claims.add(claim_obj(first, ("r", NODE, "gpu-card0")))
    claims.add(claim_obj(second, ("r", NODE, "gpu-card1"), ("r", NODE, "gpu-card0")))
    claims.add(claim_obj(admin, ("r", NODE, "gpu-card0"), admin=True))
    assert isinstance((await kubelet.prepare(first))["uid-first"], tuple)
    assert await kubelet.prepare(second) == {
        "uid-second": "claim ns/second: device node-a/gpu-card0 (cdi-plugin.io/gpu=card0): "
        "already prepared for claim uid-first"
    }
    assert isinstance((await kubelet.prepare(admin))["uid-admin"], tuple)  # admin access may share it
    assert await kubelet.unprepare(first) == {"uid-first": ""}
    assert [d.device_name for d in (await kubelet.prepare(second))["uid-second"]] == [
        "gpu-card1",
        "gpu-card0",
    ]
    state = state_doc(paths.state_file)["claims"]  # written before the reply
    assert [d["admin_access"] for d in state["uid-admin"]] == [True]
