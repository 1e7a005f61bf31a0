"""The plugin serving a fake kubelet (lists, Allocate and GetPreferredAllocation, specs and device
nodes changing while it serves), over real gRPC on real unix sockets in a temporary directory.
Registration and sockets: test_registration.py."""

from __future__ import annotations

import logging
import os
import subprocess
import time

import grpc
import pytest

from cdi_plugin.deviceplugin import api
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

KIND = "cdi-plugin.io/test"
OTHER = "cdi-plugin.io/other"

pytestmark = pytest.mark.timeout(180)


def test_allocate_answers_only_with_cdi_names(layout: Layout) -> None:
    n1, n2 = make_node(layout.dev / "n1"), make_node(layout.dev / "n2")
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 2)
            preferred = await client.preferred(["b", "a"], [], 1)
            assert preferred == ["a"]
            answer = await client.allocate(["b", "a"])
            assert [d.name for d in answer.cdi_devices] == [f"{KIND}=b", f"{KIND}=a"]
            assert len(answer.annotations) == 1
            ((key, value),) = answer.annotations.items()
            assert key.startswith("cdi.k8s.io/cdi-plugin.io_test_")
            assert value == f"{KIND}=b,{KIND}=a"
            assert not answer.envs
            assert not answer.mounts
            assert not answer.devices

    run(scenario())


@pytest.mark.parametrize(
    ("strategy", "field", "annotations"), [("cri", True, False), ("annotations", False, True)]
)
def test_cdi_strategy_picks_the_field_or_the_annotation(
    layout: Layout, strategy: str, field: bool, annotations: bool
) -> None:
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir) as kubelet,
            running_plugin(layout.settings(cdi_strategy=strategy)),
        ):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 1)
            answer = await client.allocate(["a"])
            assert bool(answer.cdi_devices) is field
            assert bool(answer.annotations) is annotations

    run(scenario())


def test_unknown_or_unhealthy_ids_fail_the_whole_request(layout: Layout) -> None:
    n1, n2 = make_node(layout.dev / "n1"), make_node(layout.dev / "n2")
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 2)
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await client.allocate(["a", "nope"], as_kubelet=False)
            assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "'nope'" in (unknown.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as many:
                await client.allocate([f"bogus{i}" for i in range(10000)], as_kubelet=False)
            assert many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # an ID longer than gRPC lets a status message be, with a line break and an escape
            with pytest.raises(grpc.aio.AioRpcError) as huge:
                await client.allocate(["\n\x1b[2J" + "x" * 100_000], as_kubelet=False)
            assert huge.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = huge.value.details() or ""
            assert details.startswith("unknown device ID '\\n\\x1b[2Jxxx")
            assert "(100005 characters)" in details
            assert len(details) < 200
            n2.unlink()
            with pytest.raises(grpc.aio.AioRpcError) as unhealthy:
                await client.allocate(["a", "b"], as_kubelet=False)
            assert unhealthy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "'b'" in (unhealthy.value.details() or "")
            assert "n2" in (unhealthy.value.details() or "")
            await client.wait_until(lambda d: d["b"].health == api.UNHEALTHY)
            assert (await client.allocate(["a"])).cdi_devices[0].name == f"{KIND}=a"

    run(scenario())


def test_spec_added_changed_and_removed_while_serving(layout: Layout) -> None:
    nodes = [make_node(layout.dev / f"n{i}") for i in range(3)]
    write_spec(layout.etc, spec_of(KIND, {"a": [nodes[0]]}))

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir) as kubelet,
            running_plugin(layout.settings(grace_period=0.4)),
        ):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: set(d) == {"a"})
            write_spec(layout.etc, spec_of(KIND, {"a": [nodes[0]], "b": [nodes[1]]}))
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            # a new kind written while serving gets its own resource and registration
            write_spec(layout.run, spec_of(OTHER, {"x": [nodes[2]]}))
            other = await kubelet.wait_registered(OTHER)
            await other.wait_until(lambda d: healthy(d) == {"x"})
            # a device removed from the spec: Unhealthy for the grace period, then dropped
            write_spec(layout.etc, spec_of(KIND, {"a": [nodes[0]]}))
            started = time.monotonic()
            await client.wait_until(lambda d: d.get("b") is not None and d["b"].health == api.UNHEALTHY)
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await client.allocate(["b"], as_kubelet=False)
            assert gone.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            await client.wait_until(lambda d: set(d) == {"a"})
            assert time.monotonic() - started >= 0.3
            # the whole spec file removed: the resource goes after the grace period
            (layout.run / "cdi-plugin.io-other.json").unlink()
            await other.wait_until(lambda d: d.get("x") is not None and d["x"].health == api.UNHEALTHY)
            await other.wait_until(lambda d: not d)
            await eventually(
                lambda: not any("other" in s for s in layout.sockets()), "other's socket removed"
            )

    run(scenario())


def test_device_node_removed_and_restored_flips_health(layout: Layout) -> None:
    n1, n2 = make_node(layout.dev / "sub" / "n1"), make_node(layout.dev / "n2")
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            n1.unlink()
            await client.wait_until(lambda d: healthy(d) == {"b"})
            make_node(n1)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            # the node's whole directory goes and comes back
            n1.unlink()
            n1.parent.rmdir()
            await client.wait_until(lambda d: healthy(d) == {"b"})
            make_node(n1)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            # a node of the wrong type is not healthy
            n2.unlink()
            n2.write_text("not a device")
            await client.wait_until(lambda d: healthy(d) == {"a"})

    run(scenario())


def test_health_watch_follows_a_node_moved_to_another_directory(layout: Layout) -> None:
    first, second = make_node(layout.dev / "one" / "n"), make_node(layout.dev / "two" / "n")
    write_spec(layout.etc, spec_of(KIND, {"a": [first]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            write_spec(layout.etc, spec_of(KIND, {"a": [second]}))
            await client.allocate(["a"])  # answered once the plugin has taken the change in
            second.unlink()  # the next list: a is Unhealthy now
            await client.wait_until(lambda d: healthy(d) == set())
            assert len(client.lists) == 2, "same ID, same health after the move: nothing to tell the kubelet"
            first.unlink()
            make_node(second)
            await client.wait_until(lambda d: healthy(d) == {"a"})

    run(scenario())


def test_a_spec_dir_swapped_for_a_symbolic_link_serves_nothing_until_a_directory_is_back(
    layout: Layout,
) -> None:
    """Runtimes' CDI library reads nothing from a spec directory that is a symbolic link: its
    devices must not be served, and come back when a directory takes the link's place."""
    node = make_node(layout.dev / "n0")
    write_spec(layout.etc, spec_of(KIND, {"a": [node]}))
    real = layout.root / "real-cdi"

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir) as kubelet,
            running_plugin(layout.settings(grace_period=0.4)),
        ):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            layout.etc.rename(real)
            layout.etc.symlink_to(real)
            await client.wait_until(lambda d: d.get("a") is not None and d["a"].health == api.UNHEALTHY)
            await eventually(lambda: sock(layout, KIND) not in layout.sockets(), "the socket removed")
            # a file written into the directory the link points to is not served either
            write_spec(real, spec_of(KIND, {"a": [node], "b": [node]}))
            registrations = kubelet.registrations
            layout.etc.unlink()
            write_spec(
                layout.etc, spec_of(KIND, {"a": [node], "b": [node]}), name="new.json"
            )  # a new directory
            client = await kubelet.wait_registered(KIND, after=registrations)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})

    run(scenario())


@pytest.mark.root
def test_a_directory_mounted_over_a_spec_dir_is_read(layout: Layout) -> None:
    """A mount over a watched directory sends it no inotify event, but runtimes read what is
    mounted there: its devices replace those of the directory it hides, until it is unmounted."""
    one, two = make_node(layout.dev / "one"), make_node(layout.dev / "two")
    write_spec(layout.etc, spec_of(KIND, {"a": [one]}))
    other = layout.root / "other"
    write_spec(other, spec_of(KIND, {"a": [two], "b": [two]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            subprocess.run(["mount", "--bind", str(other), str(layout.etc)], check=True)
            try:
                await client.wait_until(lambda d: healthy(d) == {"a", "b"})
                # the device a runtime injects now is the one at /dev/two: it is checked there
                two.unlink()
                await client.wait_until(lambda d: healthy(d) == set())
                make_node(two)
                await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            finally:
                subprocess.run(["umount", str(layout.etc)], check=True)
            await client.wait_until(lambda d: healthy(d) == {"a"})

    run(scenario())


def test_the_file_a_spec_file_links_to_is_followed(layout: Layout) -> None:
    """Runtimes read a spec file that is a symbolic link through the link: when the file it points
    to, in a directory of its own, is replaced, the devices are those of the new file, checked at
    the nodes a runtime now injects."""
    one, two = make_node(layout.dev / "one"), make_node(layout.dev / "two")
    vendor = layout.root / "vendor"
    target = write_spec(vendor, spec_of(KIND, {"a": [one]}), owned=False, name="spec.json")
    (layout.etc / "vendor.json").symlink_to(target)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(kinds=(KIND,))):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            write_spec(vendor, spec_of(KIND, {"a": [two], "b": [two]}), owned=False, name="spec.json")
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            two.unlink()  # the node both now inject
            await client.wait_until(lambda d: healthy(d) == set())

    run(scenario())


def test_every_link_of_a_chain_a_spec_file_goes_through_is_followed(layout: Layout) -> None:
    """etc/vendor.json -> links/current.json -> vendor/one.json: a runtime reads through both
    links, so retargeting the one in the middle (an atomic rename, as update-alternatives does)
    changes the devices, and so does the file it points to now."""
    one, two = make_node(layout.dev / "one"), make_node(layout.dev / "two")
    vendor, links = layout.root / "vendor", layout.root / "links"
    first = write_spec(vendor, spec_of(KIND, {"a": [one]}), owned=False, name="one.json")
    second = write_spec(vendor, spec_of(KIND, {"b": [two]}), owned=False, name="two.json")
    links.mkdir()
    (links / "current.json").symlink_to(first)
    (layout.etc / "vendor.json").symlink_to(links / "current.json")

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(kinds=(KIND,))):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            (links / "next.json").symlink_to(second)
            (links / "next.json").rename(links / "current.json")
            await client.wait_until(lambda d: healthy(d) == {"b"})
            write_spec(vendor, spec_of(KIND, {"b": [two], "c": [two]}), owned=False, name="two.json")
            await client.wait_until(lambda d: healthy(d) == {"b", "c"})

    run(scenario())


def test_spec_changed_right_after_registration_reaches_the_stream(layout: Layout) -> None:
    n1, n2, n3 = (make_node(layout.dev / f"n{i}") for i in range(3))
    write_spec(layout.etc, spec_of(KIND, {"a": [n1]}))

    async def change_between_register_and_watch(channel: grpc.aio.Channel) -> None:
        write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))
        # Allocate answers once the plugin has taken the change in: b is known before the stream opens
        request = api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=["b"])])
        await api.DevicePluginStub(channel).Allocate(request, timeout=60)

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir, before_watch=change_between_register_and_watch) as kubelet,
            running_plugin(layout.settings()),
        ):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            assert set(client.lists[0]) == {"a", "b"}
            # and again after the first list arrived, twice in a row
            write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2], "c": [n3]}))
            write_spec(layout.etc, spec_of(KIND, {"a": [n1], "c": [n3]}))
            final = await client.wait_until(lambda d: "c" in d and d["b"].health == api.UNHEALTHY)
            assert healthy(final) == {"a", "c"}

    run(scenario())


def test_device_ids_in_any_order_give_the_same_answer(layout: Layout) -> None:
    names = [f"d{i}" for i in (10, 2, 1, 33)]
    write_spec(layout.etc, spec_of(KIND, {n: [make_node(layout.dev / n)] for n in names}), owned=False)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(kinds=(KIND,))):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 4)
            first = await client.allocate(["d10", "d1", "d2"])
            second = await client.allocate(["d2", "d10", "d1"])
            assert first.annotations.keys() == second.annotations.keys()
            assert sorted(d.name for d in first.cdi_devices) == sorted(d.name for d in second.cdi_devices)
            third = await client.allocate(["d33"])
            assert third.annotations.keys() != first.annotations.keys()
            p1 = await client.preferred(["d33", "d2", "d10", "d1"], ["d10"], 3)
            p2 = await client.preferred(["d1", "d10", "d33", "d2"], ["d10"], 3)
            assert p1 == p2 == ["d10", "d1", "d2"]

    run(scenario())


def test_replicas_share_one_cdi_device(layout: Layout) -> None:
    write_spec(
        layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")], "b": [make_node(layout.dev / "n2")]})
    )

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(replicas=3)):
            client = await kubelet.wait_registered(KIND)
            devices = await client.wait_until(lambda d: len(d) == 6)
            assert set(devices) == {"a#0", "a#1", "a#2", "b#0", "b#1", "b#2"}
            answer = await client.allocate(["a#2", "a#0"])
            assert [d.name for d in answer.cdi_devices] == [f"{KIND}=a"]
            assert list(answer.annotations.values()) == [f"{KIND}=a"]
            # distinct physical devices before a second replica of one
            assert await client.preferred(sorted(devices), [], 2) == ["a#0", "b#0"]

    run(scenario())


def test_only_cdi_gen_kinds_are_served_unless_named(layout: Layout, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    node = make_node(layout.dev / "n1")
    write_spec(layout.etc, spec_of(KIND, {"a": [node]}))
    write_spec(layout.run, spec_of("nvidia.com/gpu", {"0": [node]}), owned=False)
    write_spec(layout.run, spec_of("k8s.example.com/claim", {"c1": [node]}), owned=False)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            async with running_plugin(layout.settings()):
                await kubelet.wait_registered(KIND)
                assert any(
                    "not serving kind nvidia.com/gpu: cdi-gen did not write it" in r.getMessage()
                    for r in caplog.records
                )
                # a cdi-gen file edited by someone else is no longer cdi-gen's, at once: its devices
                # turn Unhealthy for the grace period, and the device it gained is never advertised
                path = layout.etc / "cdi-plugin.io-test.json"
                path.write_text(path.read_text().replace('"a"', '"z"'))
                client = kubelet.clients[KIND]
                await client.wait_until(lambda d: "a" in d and d["a"].health == api.UNHEALTHY)
                assert "z" not in client.devices
                assert any(
                    "its spec file was changed since cdi-gen wrote it" in r.getMessage()
                    for r in caplog.records
                )
            assert {r.resource_name for r in kubelet.requests} == {KIND}, "only cdi-gen's kind was served"
            async with running_plugin(layout.settings(kinds=("nvidia.com/*",))):
                await kubelet.wait_registered("nvidia.com/gpu", after=1)

    run(scenario())


def test_malformed_or_conflicting_specs_are_logged_and_skipped(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    n1, n2 = make_node(layout.dev / "n1"), make_node(layout.dev / "n2")
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})
            (layout.etc / "broken.json").write_text('{"cdiVersion": "0.5.0", "kind": ')
            # the same device b in a second file at the same priority: a runtime resolves neither
            write_spec(layout.etc, spec_of(KIND, {"b": [n2]}), name="zz-dup.json", owned=False)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any(f"{layout.etc / 'broken.json'}" in m and "invalid JSON" in m for m in messages)
            both = (
                f"defined in both {layout.etc / 'cdi-plugin.io-test.json'} and {layout.etc / 'zz-dup.json'}"
            )
            assert (
                f"skipping device {KIND}=b: {both} at the same priority, so no runtime resolves it"
                in messages
            )
            assert (await client.allocate(["a"])).cdi_devices[0].name == f"{KIND}=a"
            (layout.etc / "zz-dup.json").unlink()
            await client.wait_until(lambda d: healthy(d) == {"a", "b"})

    run(scenario())


def test_a_spec_dir_that_does_not_exist_yet_is_watched(layout: Layout) -> None:
    later = layout.root / "not" / "yet" / "cdi"

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir) as kubelet,
            running_plugin(layout.settings(spec_dirs=(layout.etc, later))),
        ):
            write_spec(later, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: healthy(d) == {"a"})
            assert [r.resource_name for r in kubelet.requests] == [KIND]

    run(scenario())


def test_garbage_and_oversized_requests_get_an_error_status(layout: Layout) -> None:
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 1)
            raw = client.channel.unary_unary("/v1beta1.DevicePlugin/Allocate", None, None)
            for payload, code in (
                (b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
                (b"\x0a" * 7 * 1024 * 1024, grpc.StatusCode.RESOURCE_EXHAUSTED),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await raw(payload, timeout=60)
                assert error.value.code() == code
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    assert "malformed v1beta1.AllocateRequest" in (error.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as no_containers:
                await client.stub.Allocate(api.AllocateRequest(), timeout=60)
            assert no_containers.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as unknown_method:
                await client.channel.unary_unary("/v1beta1.DevicePlugin/Nope", None, None)(b"", timeout=60)
            assert unknown_method.value.code() == grpc.StatusCode.UNIMPLEMENTED
            # still serving
            assert (await client.allocate(["a"])).cdi_devices[0].name == f"{KIND}=a"
            assert await client.stub.PreStartContainer(api.PreStartContainerRequest(), timeout=60) == (
                api.PreStartContainerResponse()
            )

    run(scenario())


def test_a_list_larger_than_the_kubelet_takes_is_sent_with_fewer_replicas(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "cdi_plugin")
    names = [f"device-with-a-rather-long-name-{i:04d}-{'x' * 20}" for i in range(70)]
    write_spec(layout.etc, spec_of(KIND, dict.fromkeys(names, ())))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(replicas=1000)):
            client = await kubelet.wait_registered(KIND)
            devices = await client.wait_until(lambda d: len(d) > 0)
            assert not client.stream_ended, client.stream_error
            assert len(devices) < 70 * 1000
            assert {i.partition("#")[0] for i in devices} == set(names)  # every device, fewer replicas
            warned = "device IDs take more than the 4194304 bytes"
            assert any(warned in r.getMessage() for r in caplog.records)
            answer = await client.allocate([f"{names[0]}#0"])
            assert [d.name for d in answer.cdi_devices] == [f"{KIND}={names[0]}"]

    run(scenario())


def test_an_allocate_whose_answer_would_not_fit_in_a_message_is_refused_and_not_logged_as_done(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """And the line logging an allocation is bounded, however many IDs the request repeats. (The
    messages are kept to 16 KiB here, so that requests within the IDs a call takes reach them.)"""
    caplog.set_level(logging.INFO)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))

    async def scenario() -> None:
        settings = layout.settings(max_message_bytes=16384)
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(settings):
            client = await kubelet.wait_registered(KIND)
            await client.wait_until(lambda d: len(d) == 1)
            many = [api.ContainerAllocateRequest(devices_ids=["a"])] * 1000  # 5 KB asked
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await client.stub.Allocate(api.AllocateRequest(container_requests=many), timeout=60)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = error.value.details() or ""
            assert "the answer to 1000 container requests for cdi-plugin.io/test would take" in details
            assert "more than the 16384 the kubelet accepts" in details
            assert (await client.allocate(["a"])).cdi_devices[0].name == f"{KIND}=a"
            repeated = api.ContainerAllocateRequest(devices_ids=["a"] * 1024)
            await client.stub.Allocate(api.AllocateRequest(container_requests=[repeated]), timeout=60)
        assert not any(r.exc_info for r in caplog.records)
        logged = [r.getMessage() for r in caplog.records if "allocated a" in r.getMessage()]
        assert len(logged) == 2
        assert len(logged[1]) < 2200
        assert "... (2047 characters) ->" in logged[1]

    run(scenario())


def test_numa_topology_from_sysfs_and_preferred_allocation(layout: Layout) -> None:
    pci = layout.sysfs / "devices" / "pci0000:00"
    names = {}
    for i, (node, numa) in enumerate([("g0", 0), ("g1", 1), ("g2", 1), ("g3", -1)]):
        fn = pci / f"0000:00:0{i}.0"
        (fn / "misc" / node).mkdir(parents=True)
        (fn / "numa_node").write_text(f"{numa}\n")
        (fn / "misc" / node / "device").symlink_to(fn)
        link = layout.sysfs / "dev" / "char" / f"240:{i}"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(fn / "misc" / node)
        names[node] = [make_node(layout.dev / node, os.makedev(240, i))]
    write_spec(layout.etc, spec_of(KIND, names))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            devices = await client.wait_until(lambda d: len(d) == 4)
            assert {i: d.numa for i, d in devices.items()} == {"g0": (0,), "g1": (1,), "g2": (1,), "g3": ()}
            assert await client.preferred(["g3", "g2", "g1", "g0"], [], 2) == ["g1", "g2"]
            assert await client.preferred(["g3", "g2", "g1", "g0"], ["g0"], 2) == ["g0", "g3"]

    run(scenario())
