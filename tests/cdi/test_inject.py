"""The CDI library's injection, step by step: the order of the edits, how each kind is merged into
the OCI runtime spec, and how device nodes are completed from the host (given, not read)."""

from __future__ import annotations

from typing import Any

import pytest

from cdi_plugin.cdi.inject import (
    Container,
    HostNode,
    InjectError,
    Origin,
    Placed,
    Requested,
    edits_in_order,
    fill,
    inject,
    non_root_access,
)
from cdi_plugin.cdi.model import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
)

NULL = HostNode("c", 1, 3, 0o20666)
HOSTS = {"/dev/null": NULL, "/dev/zero": HostNode("c", 1, 5, 0o20666), "/dev/loop0": HostNode("b", 7, 0)}
A, B = Origin("/etc/cdi/a.json", "acme.example/a=one"), Origin("/etc/cdi/a.json", "acme.example/a=two")


def spec(kind: str, *devices: tuple[str, ContainerEdits], top: ContainerEdits | None = None) -> Spec:
    return Spec(
        cdi_version="0.3.0",
        kind=kind,
        devices=tuple(Device(name=n, container_edits=e) for n, e in devices),
        container_edits=top,
    )


def requested(path: str, s: Spec, name: str) -> Requested:
    [device] = [d for d in s.devices if d.name == name]
    return Requested(f"{s.kind}={name}", s, device, path)


def values(entries: list[Placed]) -> list[Any]:
    return [p.value for p in entries]


def test_a_specs_top_level_edits_come_once_before_its_first_device() -> None:
    top_a = ContainerEdits(env=("FROM=a",))
    one, two, three = (ContainerEdits(env=(f"DEV={n}",)) for n in ("one", "two", "three"))
    a = spec("acme.example/a", ("one", one), ("two", two), top=top_a)
    b = spec("acme.example/b", ("three", three))  # no top-level edits
    order = edits_in_order(
        [requested("/a.json", a, "two"), requested("/b.json", b, "three"), requested("/a.json", a, "one")]
    )
    assert order == [
        (Origin("/a.json"), top_a),
        (Origin("/a.json", "acme.example/a=two"), two),
        (Origin("/b.json", "acme.example/b=three"), three),
        (Origin("/a.json", "acme.example/a=one"), one),
    ]


def test_env_set_again_keeps_its_place_and_takes_the_last_value() -> None:
    c = Container(env=[Placed("PATH=/bin"), Placed("X=old")])
    errors = inject(
        c,
        [(A, ContainerEdits(env=("X=a", "Y=a"))), (B, ContainerEdits(env=("Y=b", "X=b", "Z=b=c")))],
        {},
    )
    assert errors == []
    assert values(c.env) == ["PATH=/bin", "X=b", "Y=b", "Z=b=c"]
    assert [p.origin for p in c.env] == [None, B, B, B]


def test_device_nodes_are_completed_from_the_host_and_one_per_path_the_last_moved_last() -> None:
    c = Container()
    edits = [
        (A, ContainerEdits(device_nodes=(DeviceNode(path="/dev/x", host_path="/dev/null"),))),
        (A, ContainerEdits(device_nodes=(DeviceNode(path="/dev/loop0", permissions="r"),))),
        (
            B,
            ContainerEdits(device_nodes=(DeviceNode(path="/dev/x", host_path="/dev/zero", file_mode=0o600),)),
        ),
    ]
    assert inject(c, edits, HOSTS) == []
    assert values(c.devices) == [
        {"path": "/dev/loop0", "type": "b", "major": 7, "minor": 0},
        {"path": "/dev/x", "type": "c", "major": 1, "minor": 5, "fileMode": 0o600},
    ]
    assert [p.host_path for p in c.devices] == ["/dev/loop0", "/dev/zero"]
    # every node gets its cgroup rule, the replaced one's included (the library appends them)
    assert values(c.device_rules) == [
        {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
        {"allow": True, "type": "b", "major": 7, "minor": 0, "access": "r"},
        {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "rwm"},
    ]


def test_a_node_without_uid_or_gid_belongs_to_the_process_user_unless_root() -> None:
    node = DeviceNode(path="/dev/null")
    for uid, gid, expected in ((0, 0, {}), (1000, 0, {"uid": 1000}), (1000, 44, {"uid": 1000, "gid": 44})):
        c = Container(uid=uid, gid=gid)
        inject(c, [(A, ContainerEdits(device_nodes=(node,)))], HOSTS)
        assert values(c.devices) == [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3, **expected}]
    c = Container(uid=1000, gid=1000)
    inject(c, [(A, ContainerEdits(device_nodes=(DeviceNode(path="/dev/null", uid=0, gid=5),)))], HOSTS)
    assert (c.devices[0].value["uid"], c.devices[0].value["gid"]) == (0, 5)


def test_permissions_none_gives_a_rule_without_access_and_a_fifo_no_rule() -> None:
    c = Container()
    nodes = (DeviceNode(path="/dev/null", permissions="none"), DeviceNode(path="/run/fifo", type="p"))
    assert inject(c, [(A, ContainerEdits(device_nodes=nodes))], HOSTS) == []
    assert values(c.device_rules) == [{"allow": True, "type": "c", "major": 1, "minor": 3}]
    assert values(c.devices)[1] == {"path": "/run/fifo", "type": "p", "major": 0, "minor": 0}
    assert [p.cgroup_access for p in c.devices] == ["", None]


def test_a_minimally_specified_node_is_not_looked_up() -> None:
    assert fill(DeviceNode(path="/dev/gone", type="c", major=10, minor=200), {}) == ("c", 10, 200)
    assert fill(DeviceNode(path="/dev/fifo", type="p"), {}) == ("p", 0, 0)
    c = Container()
    assert (
        inject(c, [(A, ContainerEdits(device_nodes=(DeviceNode(path="/dev/gone", type="b", major=8),)))], {})
        == []
    )
    assert values(c.devices) == [{"path": "/dev/gone", "type": "b", "major": 8, "minor": 0}]


@pytest.mark.parametrize(
    ("node", "hosts", "message"),
    [
        (DeviceNode(path="/dev/gone"), {"/dev/gone": "no such file or directory"},
         'failed to stat CDI host device "/dev/gone": no such file or directory'),
        (DeviceNode(path="/dev/d"), {"/dev/d": HostNode(None, what="a directory")},
         'failed to stat CDI host device "/dev/d": not a device node (a directory)'),
        (DeviceNode(path="/dev/x", host_path="/dev/null", type="b"), HOSTS,
         'CDI device ("/dev/x", "/dev/null"), host type mismatch (b, c)'),
        # "u" (unbuffered char) is never what lstat reports: the library refuses it unless minimal
        (DeviceNode(path="/dev/null", type="u"), HOSTS,
         'CDI device ("/dev/null", "/dev/null"), host type mismatch (u, c)'),
    ],
)  # fmt: skip
def test_a_node_the_runtime_cannot_create(node: DeviceNode, hosts: dict[str, Any], message: str) -> None:
    with pytest.raises(InjectError) as caught:
        fill(node, hosts)
    assert str(caught.value) == message
    c = Container()
    ok = DeviceNode(path="/dev/zero")
    assert inject(c, [(A, ContainerEdits(device_nodes=(node, ok)))], {**HOSTS, **hosts}) == [message]
    assert [p.value["path"] for p in c.devices] == ["/dev/zero"]


def test_type_given_and_major_zero_takes_the_hosts_numbers() -> None:
    assert fill(DeviceNode(path="/dev/null", type="c"), HOSTS) == ("c", 1, 3)
    assert fill(DeviceNode(path="/dev/null", type="c", major=0, minor=9), HOSTS) == ("c", 1, 3)


def test_mounts_one_per_container_path_then_sorted_by_depth_stably() -> None:
    c = Container(mounts=[Placed({"destination": "/proc", "type": "proc", "source": "proc"})])
    edits = [
        (A, ContainerEdits(mounts=(
            Mount(host_path="/h/deep", container_path="/a/b/c", options=("ro",)),
            Mount(host_path="/h/lib", container_path="/usr/lib/x"),
            Mount(host_path="/h/proc", container_path="/proc", type="bind"),
        ))),
        (B, ContainerEdits(mounts=(Mount(host_path="/h/lib2", container_path="/usr/lib/x"),
                                   Mount(host_path="/h/top", container_path="//top/"),))),
    ]  # fmt: skip
    assert inject(c, edits, {}) == []
    assert values(c.mounts) == [
        {"destination": "/proc", "type": "bind", "source": "/h/proc"},
        {"destination": "//top/", "source": "/h/top"},
        {"destination": "/a/b/c", "source": "/h/deep", "options": ["ro"]},
        {"destination": "/usr/lib/x", "source": "/h/lib2"},
    ]
    assert [p.origin for p in c.mounts] == [A, B, A, B]


def test_hooks_by_stage_in_order_the_last_intel_rdt_and_additional_gids_once() -> None:
    c = Container(additional_gids=[Placed(44)])
    edits = [
        (A, ContainerEdits(
            hooks=(Hook(hook_name="createContainer", path="/bin/a", args=("a", "--x"), env=("K=V",)),
                   Hook(hook_name="poststop", path="/bin/stop", timeout=5)),
            intel_rdt=IntelRdt(clos_id="one", enable_monitoring=True),
            additional_gids=(0, 44, 45),
            net_devices=(NetDevice(host_interface_name="eth1", name="ctr1"),),
        )),
        (B, ContainerEdits(
            hooks=(Hook(hook_name="createContainer", path="/bin/b"),),
            intel_rdt=IntelRdt(clos_id="two", schemata=("L3:0=f",)),
            additional_gids=(45, 46),
            net_devices=(NetDevice(host_interface_name="eth1", name="ctr9"),),
        )),
    ]  # fmt: skip
    assert inject(c, edits, {}) == []
    assert {stage: values(hooks) for stage, hooks in c.hooks.items()} == {
        "createContainer": [{"path": "/bin/a", "args": ["a", "--x"], "env": ["K=V"]}, {"path": "/bin/b"}],
        "poststop": [{"path": "/bin/stop", "timeout": 5}],
    }
    assert c.intel_rdt is not None
    assert (c.intel_rdt.value, c.intel_rdt.origin) == ({"closID": "two", "schemata": ["L3:0=f"]}, B)
    assert values(c.additional_gids) == [44, 45, 46]
    assert {k: (p.value, p.origin) for k, p in c.net_devices.items()} == {"eth1": ({"name": "ctr9"}, B)}


@pytest.mark.parametrize(
    ("device", "cgroup", "expected"),
    [
        # no uid: the container user owns it; the owner bits decide
        ({"type": "c", "fileMode": 0o600}, "rwm", ("rw", "owner", None)),
        ({"type": "c", "fileMode": 0o060, "gid": 44}, "rwm", ("", "owner", None)),
        # no fileMode: runc, crun and iSulad make it 0666
        ({"type": "c", "uid": 0, "gid": 0}, "rwm", ("rw", "other", None)),
        # owned by root: the group is the container user's when the spec gives none
        ({"type": "c", "fileMode": 0o660, "uid": 0}, "rwm", ("rw", "group", None)),
        # a group of the spec's: only with that group added
        ({"type": "c", "fileMode": 0o660, "uid": 0, "gid": 109}, "rwm", ("", "other", 109)),
        ({"type": "c", "fileMode": 0o664, "uid": 0, "gid": 109}, "rwm", ("r", "other", 109)),
        # the cgroup rule limits everyone
        ({"type": "c", "fileMode": 0o666}, "r", ("r", "owner", None)),
        ({"type": "c", "fileMode": 0o666}, "", ("", "owner", None)),
        ({"type": "p", "fileMode": 0o644, "uid": 0, "gid": 0}, None, ("r", "other", None)),
    ],
)  # fmt: skip
def test_what_a_container_user_other_than_root_can_do(
    device: dict[str, Any], cgroup: str | None, expected: tuple[str, str, int | None]
) -> None:
    access = non_root_access({"path": "/dev/x", "major": 1, "minor": 1, **device}, cgroup)
    assert (access.access, access.via, access.group) == expected
