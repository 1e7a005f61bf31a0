"""Registration with a fake kubelet (the requests it checks, its restarts and refusals, a kubelet
not there yet) and the plugin's sockets, over real gRPC on real unix sockets in a temporary directory."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import grpc
import pytest

from cdi_plugin import recurring
from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.lifecycle import socket_name
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import (
    Layout,
    eventually,
    healthy,
    make_node,
    run,
    running_plugin,
    sock,
    spec_of,
    write_spec,
)

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
KIND = "cdi-plugin.io/test"
OTHER = "cdi-plugin.io/other"

pytestmark = pytest.mark.timeout(180)


def test_registers_every_served_kind_and_lists_its_devices(layout: Layout) -> None:
    n1, n2, n3 = (make_node(layout.dev / f"n{i}") for i in (1, 2, 3))
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))
    write_spec(layout.etc, spec_of(OTHER, {"x": [n3]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            test = await kubelet.wait_registered(KIND)
            other = await kubelet.wait_registered(OTHER)
            assert healthy(await test.wait_until(lambda d: len(d) == 2)) == {"a", "b"}
            assert healthy(await other.wait_until(lambda d: len(d) == 1)) == {"x"}
            assert test.options.get_preferred_allocation_available
            assert not test.options.pre_start_required
            for request in kubelet.requests:
                assert request.version == "v1beta1"
                assert request.endpoint == Path(request.endpoint).name
                assert request.options.get_preferred_allocation_available
            assert {r.resource_name for r in kubelet.requests} == {KIND, OTHER}
            assert kubelet.refused == []
            for name in layout.sockets() - {"kubelet.sock"}:
                assert stat.S_IMODE((layout.plugin_dir / name).stat().st_mode) == 0o600

    run(scenario())


def test_kubelet_restart_leads_to_reregistration(layout: Layout) -> None:
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    write_spec(layout.etc, spec_of(OTHER, {"x": [make_node(layout.dev / "n2")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            async with running_plugin(layout.settings()):
                await kubelet.wait_registered(KIND)
                await kubelet.wait_registered(OTHER)
                assert kubelet.registrations == 2
                for _ in range(2):
                    before = kubelet.registrations
                    await kubelet.restart()
                    for resource in (KIND, OTHER):
                        client = await kubelet.wait_registered(resource, after=before)
                        await client.wait_until(lambda d: len(d) == 1)
                    assert layout.sockets() == {
                        "kubelet.sock",
                        sock(layout, KIND),
                        sock(layout, OTHER),
                    }
            assert kubelet.registrations == 6, "each resource registered once per start of the kubelet"

    run(scenario())


def test_plugin_directory_deleted_and_created_again_leads_to_reregistration(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    gone = f"waiting for the kubelet: {layout.plugin_dir} does not exist yet"

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            await kubelet.wait_registered(KIND)
            await kubelet.stop()
            shutil.rmtree(layout.plugin_dir)
            await eventually(lambda: any(gone in r.getMessage() for r in caplog.records), "seen gone")
            before = kubelet.registrations
            await kubelet.start()  # creates the directory again
            client = await kubelet.wait_registered(KIND, after=before)
            await client.wait_until(lambda d: healthy(d) == {"a"})

    run(scenario())


def test_plugin_started_before_the_kubelet_waits_and_registers(
    layout: Layout, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)  # the kubelet's socket is seen, not polled
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))

    async def scenario() -> None:
        async with running_plugin(layout.settings()):
            await eventually(
                lambda: any("waiting for the kubelet" in r.getMessage() for r in caplog.records), "waiting"
            )
            assert sock(layout, KIND) in layout.sockets()
            async with FakeKubelet(layout.plugin_dir) as kubelet:
                client = await kubelet.wait_registered(KIND)
                await client.wait_until(lambda d: healthy(d) == {"a"})

    run(scenario())


def test_unreachable_kubelet_is_retried_with_the_reason_logged(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(layout.plugin_dir / "kubelet.sock"))  # a socket file nobody listens on
    dead.close()

    async def scenario() -> None:
        async with running_plugin(layout.settings()):
            await eventually(
                lambda: any("cannot reach the kubelet" in r.getMessage() for r in caplog.records), "retried"
            )
            os.unlink(layout.plugin_dir / "kubelet.sock")
            async with FakeKubelet(layout.plugin_dir) as kubelet:
                await kubelet.wait_registered(KIND)

    run(scenario())


def test_a_lasting_refusal_is_logged_once_then_summarised_then_its_end(
    layout: Layout, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six refusals in a row: one error line, one summary once the interval has passed (shrunk
    here), and one line when the kubelet accepts the registration at last."""
    caplog.set_level(logging.DEBUG, "cdi_plugin.deviceplugin.lifecycle")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    refusal = "resource cdi-plugin.io/test is busy"
    failed = f"{KIND}: registration failed: the kubelet refused the registration: {refusal}"
    condition = re.escape(failed[len(KIND) + 2 :])

    def lines() -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage()) for r in caplog.records if refusal in r.getMessage()]

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir, refusal=refusal, refusals=6) as kubelet,
            running_plugin(layout.settings()),
        ):
            await eventually(lambda: len(lines()) == 4, "four refusals handled")
            assert kubelet.refused == [refusal] * 4
            said = lines()
            assert said[0] == (logging.ERROR, f"{failed}; retrying in 0.1s"), said
            assert [level for level, _ in said[1:]] == [logging.DEBUG] * 3, "no repeat within the interval"
            # at least 0.1 + 0.2 + 0.4 s went by since the first line: a shorter interval has passed
            monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.05)
            await eventually(lambda: len(lines()) == 5, "the fifth refusal handled")
            monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
            level, summary = lines()[4]
            assert level == logging.ERROR
            assert re.fullmatch(
                rf"{KIND}: still {condition} \(5 times since {WHEN}, for [\d.]+ s\)",
                summary,
            ), summary
            await kubelet.wait_registered(KIND)
            assert kubelet.refused == [refusal] * 6
            recovered = f"{KIND}: recovered after "
            await eventually(lambda: any(m.startswith(recovered) for m in caplog.messages), "the end said")
            *_, (level, sixth), (_, end) = lines()
            assert (level, sixth[: len(failed)]) == (logging.DEBUG, failed), "the interval starts again"
            ended = [m for m in caplog.messages if m.startswith(recovered)]
            assert ended == [end], caplog.messages
            assert re.fullmatch(
                rf"{KIND}: recovered after [\d.]+ s \(6 times since {WHEN}\): {condition}",
                ended[0],
            ), ended

    run(scenario())


def test_a_new_reason_is_logged_at_once(layout: Layout, caplog: pytest.LogCaptureFixture) -> None:
    """The kubelet refuses once, then cannot be reached: both are said, each once, at once."""
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    refusal = "resource cdi-plugin.io/test is busy"

    async def scenario() -> None:
        async with running_plugin(layout.settings()):
            async with FakeKubelet(layout.plugin_dir, refusal=refusal, refusals=1000) as kubelet:
                await eventually(lambda: len(kubelet.refused) >= 2, "refused twice")
            dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            dead.bind(str(layout.plugin_dir / "kubelet.sock"))  # a socket file nobody listens on
            dead.close()
            await eventually(lambda: any("cannot reach" in m for m in caplog.messages), "unreachable")
            refused = [m for m in caplog.messages if refusal in m]
            assert len(refused) == 1, caplog.messages

    run(scenario())


def test_a_refusal_in_several_lines_or_very_long_is_logged_on_one_bounded_line(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))

    async def scenario() -> None:
        refusal = "first line\nsecond line\x1b[31m" + "y" * 5000
        async with (
            FakeKubelet(layout.plugin_dir, refusal=refusal, refusals=1) as kubelet,
            running_plugin(layout.settings()),
        ):
            await kubelet.wait_registered(KIND)
            assert kubelet.refused == [refusal]
            (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert "the kubelet refused the registration: first line\\nsecond line\\x1b[31myyy" in error
            assert "\n" not in error
            assert "\x1b" not in error
            assert "(5027 characters)" in error
            assert len(error) < 1000

    run(scenario())


def test_an_answer_to_register_that_is_not_a_message_is_a_refusal_without_a_traceback(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    answers: list[bytes] = []

    async def register(request: bytes, context: object) -> bytes:
        answers.append(request)
        return b"\xff\xff\xff"

    async def scenario() -> None:
        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(
            register, request_deserializer=bytes, response_serializer=bytes
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1beta1.Registration", {"Register": handler}),)
        )
        server.add_insecure_port(f"unix://{layout.plugin_dir / 'kubelet.sock'}")
        await server.start()
        try:
            async with running_plugin(layout.settings()):
                await eventually(lambda: len(answers) >= 2, "registration retried")
        finally:
            await server.stop(None)
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert messages
        assert all("answered the registration with a malformed v1beta1.Empty" in m for m in messages)
        assert not any(r.exc_info for r in caplog.records)
        assert not any("registered with the kubelet" in r.getMessage() for r in caplog.records)

    run(scenario())


def test_stale_socket_is_replaced_but_a_live_one_or_a_file_is_not(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    write_spec(layout.etc, spec_of(OTHER, {"x": [make_node(layout.dev / "n2")]}))
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(layout.plugin_dir / sock(layout, KIND)))
    stale.close()
    (layout.plugin_dir / sock(layout, OTHER)).write_text("someone's file")

    async def scenario() -> None:
        refusal = f"{sock(layout, OTHER)} is a regular file, not a socket; not replacing it"
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            async with running_plugin(layout.settings()):
                await kubelet.wait_registered(KIND)
                await eventually(
                    lambda: any(refusal in r.getMessage() for r in caplog.records), "the file reported"
                )
                assert (layout.plugin_dir / sock(layout, OTHER)).read_text() == "someone's file"
            assert OTHER not in {r.resource_name for r in kubelet.requests}
        assert (layout.plugin_dir / sock(layout, OTHER)).exists()

    run(scenario())


def test_a_socket_that_cannot_be_probed_is_reported_and_retried(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """A datagram socket at the path refuses a stream connection with an error of its own: one
    warning naming it, retried (never the endpoint failing with a traceback); once closed, it is a
    stale socket, replaced."""
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    path = layout.plugin_dir / sock(layout, KIND)
    refusal = f"{path}: cannot listen: Protocol wrong type for socket; retrying in"

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as datagram:
                datagram.bind(str(path))
                async with running_plugin(layout.settings()):
                    await eventually(
                        lambda: any(refusal in r.getMessage() for r in caplog.records), "the refusal"
                    )
                    datagram.close()
                    await kubelet.wait_registered(KIND)
        assert not [r for r in caplog.records if r.exc_info]

    run(scenario())


def test_a_stale_socket_that_cannot_be_removed_is_reported_and_retried(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale socket in a directory where nothing can be removed (immutable here; read-only, say,
    on a node): one warning naming it and the reason, retried (never the endpoint failing with a
    traceback); once it can be removed, it is replaced."""
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    path = layout.plugin_dir / sock(layout, KIND)
    refusal = f"cannot remove the stale socket {path}: Operation not permitted; retrying in"

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            with socket.socket(socket.AF_UNIX) as stale:
                stale.bind(str(path))
            chattr = shutil.which("chattr")
            assert chattr is not None, "chattr (e2fsprogs, installed by tests/setup.sh) is missing"
            immutable = subprocess.run([chattr, "+i", layout.plugin_dir], check=False, capture_output=True)
            assert immutable.returncode == 0, f"cannot make the directory immutable: {immutable.stderr!r}"
            try:
                async with running_plugin(layout.settings()):
                    await eventually(
                        lambda: any(refusal in r.getMessage() for r in caplog.records), "the refusal"
                    )
                    subprocess.run([chattr, "-i", layout.plugin_dir], check=True)
                    await kubelet.wait_registered(KIND)
            finally:
                subprocess.run([chattr, "-i", layout.plugin_dir], check=True)
        assert not [r for r in caplog.records if r.exc_info]

    run(scenario())


def test_a_socket_another_process_bound_after_ours_was_removed_stays(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """Ours removed, and another process (the pod that replaces this one) bound the path before
    this one noticed: stopping the server of the removed socket leaves the other one, and this
    plugin waits for it to go instead of serving over it."""
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    path = layout.plugin_dir / sock(layout, KIND)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            await kubelet.wait_registered(KIND)
            with socket.socket(socket.AF_UNIX) as other:
                tmp = path.with_name("other.sock")
                other.bind(str(tmp))
                other.listen()
                os.replace(tmp, path)  # ours removed and the other bound, in one step
                theirs = os.lstat(path).st_ino
                await eventually(
                    lambda: any("another process is serving" in r.getMessage() for r in caplog.records),
                    "the other process's socket seen",
                )
                assert os.lstat(path).st_ino == theirs
                assert kubelet.registrations == 1
                assert layout.sockets() == {"kubelet.sock", sock(layout, KIND)}

    run(scenario())


def test_fake_kubelet_refuses_like_the_kubelet(layout: Layout) -> None:
    """The fake kubelet's own checks, which the other scenarios rely on."""

    async def register(version: str, resource: str) -> str:
        request = api.RegisterRequest(version=version, endpoint="nowhere.sock", resource_name=resource)
        async with grpc.aio.insecure_channel(f"unix://{layout.plugin_dir / 'kubelet.sock'}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await api.RegistrationStub(channel).Register(request, timeout=15)
        assert error.value.code() == grpc.StatusCode.UNKNOWN
        return error.value.details() or ""

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir, dial_timeout=0.5) as kubelet:
            assert 'requested API version "v1alpha" is not supported' in await register("v1alpha", KIND)
            assert 'the ResourceName "kubernetes.io/x" is invalid' in await register(
                "v1beta1", "kubernetes.io/x"
            )
            assert "failed to dial device plugin" in await register("v1beta1", KIND)
            assert kubelet.clients == {}

    run(scenario())


def test_socket_names_always_fit_a_unix_socket_path() -> None:
    with tempfile.TemporaryDirectory(prefix="cdi-plugin-sockets-") as tmp:
        deep = Path(tmp) / ("d" * (60 - len(tmp)))  # room for a hashed name, not for the full one
        deep.mkdir()
        resource = "very-long-vendor-domain.example.com/" + "c" * 63
        name = socket_name(resource, deep)
        assert name.startswith("cdi-plugin-")
        assert name.endswith(".sock")
        assert len(os.fsencode(deep / name)) <= 105
        assert name != socket_name("very-long-vendor-domain.example.com/" + "d" * 63, deep)

        async def bind() -> int:
            server = grpc.aio.server()
            try:
                return server.add_insecure_port(f"unix://{deep / name}")
            finally:
                await server.stop(None)

        assert asyncio.run(bind())
    short = socket_name("cdi-plugin.io/fuse", Path("/var/lib/kubelet/device-plugins"))
    assert short == "cdi-plugin-cdi-plugin.io_fuse.sock"


def test_a_socket_that_cannot_be_bound_is_reported_with_the_reason(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC says only that it failed to bind; the log line says why, as the system does."""
    caplog.set_level(logging.INFO, "cdi_plugin")
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    deep = layout.root / ("d" * 120)  # a socket path longer than a unix socket address holds
    deep.mkdir()

    async def scenario() -> None:
        async with running_plugin(layout.settings(plugin_dir=deep)):
            await eventually(
                lambda: any("cannot listen on" in r.getMessage() for r in caplog.records), "the refusal"
            )
        refusal = next(r.getMessage() for r in caplog.records if "cannot listen on" in r.getMessage())
        assert refusal.endswith(
            f"cannot listen on {deep / socket_name(KIND, deep)}: AF_UNIX path too long; retrying in 0.1s"
        ), refusal
        assert os.listdir(deep) == []

    run(scenario())
