"""An OCI runtime spec as the CDI library edits it: what is read, checked and written back."""

from __future__ import annotations

from typing import Any

import pytest

from cdi_plugin.cdi.inject import HostNode, Origin, inject
from cdi_plugin.cdi.model import ContainerEdits, DeviceNode, Hook, Mount
from cdi_plugin.cdi.oci import OciSpecError, container_of, has_user_namespace, with_container

ORIGIN = Origin("/etc/cdi/x.json", "acme.example/x=x")
EDITS = ContainerEdits(
    env=("PATH=/cdi/bin", "CDI=1"),
    device_nodes=(DeviceNode(path="/dev/null"),),
    mounts=(Mount(host_path="/h", container_path="/mnt/h"),),
    hooks=(Hook(hook_name="poststop", path="/bin/true"),),
)


def test_the_edits_go_into_a_spec_that_keeps_everything_else() -> None:
    doc: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 7, "gid": 8}, "env": ["PATH=/bin", "HOME=/"], "args": ["sh"]},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}],
        },
    }
    container = container_of(doc)
    assert inject(container, [(ORIGIN, EDITS)], {"/dev/null": HostNode("c", 1, 3)}) == []
    out = with_container(doc, container)
    assert out == {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 7, "gid": 8}, "env": ["PATH=/cdi/bin", "HOME=/", "CDI=1"], "args": ["sh"],
        },
        "root": {"path": "rootfs"},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/mnt/h", "source": "/h"},
        ],
        "linux": {
            "devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3, "uid": 7, "gid": 8}],
            "resources": {"devices": [
                {"allow": False, "access": "rwm"},
                {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            ]},
            "namespaces": [{"type": "pid"}],
        },
        "hooks": {"poststop": [{"path": "/bin/true"}]},
    }  # fmt: skip
    assert doc["process"]["env"] == ["PATH=/bin", "HOME=/"], "the document given is not changed"


def test_nothing_to_add_adds_no_empty_parts() -> None:
    doc = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}}
    container = container_of(doc)
    inject(container, [(ORIGIN, ContainerEdits(env=("A=1",)))], {})
    assert with_container(doc, container) == {**doc, "process": {"env": ["A=1"]}}


@pytest.mark.parametrize("part", ["process", "linux", "hooks"])
def test_a_null_part_is_taken_as_absent(part: str) -> None:
    doc: dict[str, Any] = {"ociVersion": "1.0.2", part: None}
    container = container_of(doc)
    inject(container, [(ORIGIN, EDITS)], {"/dev/null": HostNode("c", 1, 3)})
    out = with_container(doc, container)
    assert out["process"]["env"] == ["PATH=/cdi/bin", "CDI=1"]
    assert out["linux"]["devices"] == [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}]
    assert out["hooks"] == {"poststop": [{"path": "/bin/true"}]}
    nothing = with_container(doc, container_of(doc))
    assert nothing == {"ociVersion": "1.0.2"}, "an empty part that was null is left out"


def test_a_null_user_or_resources_is_taken_as_absent() -> None:
    doc: dict[str, Any] = {"process": {"user": None}, "linux": {"resources": None}}
    container = container_of(doc)
    inject(container, [(ORIGIN, EDITS)], {"/dev/null": HostNode("c", 1, 3)})
    out = with_container(doc, container)
    assert out["linux"]["resources"]["devices"][0]["major"] == 1
    assert with_container(doc, container_of(doc)) == {"process": {}, "linux": {}}


def test_a_null_uid_or_gid_is_root_as_the_cdi_library_reads_it() -> None:
    doc: dict[str, Any] = {"process": {"user": {"uid": None, "gid": None}}}
    container = container_of(doc)
    assert (container.uid, container.gid) == (0, 0)
    inject(container, [(ORIGIN, EDITS)], {"/dev/null": HostNode("c", 1, 3)})
    assert with_container(doc, container)["process"]["user"] == {"uid": None, "gid": None}


ID = "expected an integer from 0 to 4294967295"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "not a JSON object"),
        ({"process": []}, "/process: expected an object"),
        ({"process": {"env": "A=1"}}, "/process/env: expected a list"),
        ({"process": {"env": ["A=1", 2]}}, "/process/env/1: expected a string"),
        ({"process": {"user": {"uid": -1}}}, f"/process/user/uid: {ID}"),
        ({"process": {"user": {"gid": True}}}, f"/process/user/gid: {ID}"),
        ({"process": {"user": {"additionalGids": [1 << 32]}}}, f"/process/user/additionalGids/0: {ID}"),
        ({"mounts": [{"source": "/x"}]}, "/mounts/0: expected an object with a destination"),
        ({"linux": {"devices": [{"path": 1}]}}, "/linux/devices/0: expected an object with a path"),
        ({"linux": {"resources": {"devices": ["c 1:3"]}}}, "/linux/resources/devices/0: expected an object"),
        ({"linux": {"netDevices": {"eth0": "x"}}}, "/linux/netDevices/eth0: expected an object"),
        ({"linux": {"intelRdt": []}}, "/linux/intelRdt: expected an object"),
        ({"linux": {"namespaces": ["user"]}}, "/linux/namespaces/0: expected an object"),
        ({"hooks": {"poststop": {}}}, "/hooks/poststop: expected a list"),
    ],
)  # fmt: skip
def test_a_part_of_the_wrong_type_is_named(doc: Any, message: str) -> None:
    with pytest.raises(OciSpecError) as caught:
        container_of(doc)
    assert str(caught.value) == message


def test_user_namespace() -> None:
    assert has_user_namespace({"linux": {"namespaces": [{"type": "pid"}, {"type": "user"}]}})
    assert not has_user_namespace({"linux": {"namespaces": [{"type": "pid"}]}})
    assert not has_user_namespace({})
