"""Which socket names an instance uses: the pod UID, and the kubelet version read from its Node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.dra.kubelet import Paths
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.rolling import check_pod_uid, fixed_names_reason, kubelet_version, parse_version

UID = "0c8f1f0e-1111-4a7e-9c55-0123456789ab"


def test_the_sockets_are_named_after_the_pod_uid_as_the_kubelet_plugin_helper_names_them() -> None:
    paths = Paths("gpu.example.com", Path("/reg"), Path("/plugins"), UID)
    assert paths.dra_socket == Path(f"/plugins/gpu.example.com/dra-{UID}.sock")
    assert paths.registration_socket == Path(f"/reg/gpu.example.com-{UID}-reg.sock")
    assert paths.lock_file == Path("/plugins/gpu.example.com/serialize.lock")
    assert paths.state_file == Path("/plugins/gpu.example.com/prepared.json")  # shared by the instances
    fixed = Paths("gpu.example.com", Path("/reg"), Path("/plugins"))
    assert (fixed.dra_socket, fixed.registration_socket) == (
        Path("/plugins/gpu.example.com/dra.sock"),
        Path("/reg/gpu.example.com-reg.sock"),
    )


@pytest.mark.parametrize("uid", [UID, "a", "node-a-1", "A0"])
def test_a_pod_uid_is_letters_digits_and_inner_dashes(uid: str) -> None:
    assert check_pod_uid(uid) == uid


@pytest.mark.parametrize("uid", ["", "-a", "a-", "../x", "a/b", "a b", ".a", "a\n", "é", "x" * 65])
def test_anything_else_cannot_name_a_socket(uid: str) -> None:
    with pytest.raises(DraConfigError, match=r"^pod UID .*: not a UID \(at most 64 letters"):
        check_pod_uid(uid)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("v1.33.0", (1, 33)),
        ("v1.36.2", (1, 36)),
        ("v1.34.1-gke.1200", (1, 34)),
        ("v1.32.4+k3s1", (1, 32)),
        ("1.35.0", (1, 35)),
        ("v1.33", (1, 33)),
        ("v2.0.0-alpha.1", (2, 0)),
        ("", None),
        ("latest", None),
        ("v1", None),
        ("v1.x.0", None),
        ("v1.33abc", None),
        ("v99999.1.0", None),
    ],
)
def test_kubelet_versions_as_nodes_report_them(text: str, parsed: tuple[int, int] | None) -> None:
    assert parse_version(text) == parsed


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("v1.33.0", None),
        ("v1.36.2", None),
        ("v2.0.0", None),
        ("v1.32.9", "kubelet v1.32.9 is older than 1.33"),
        ("v1.9.0", "kubelet v1.9.0 is older than 1.33"),
        ("v1.32.0\n\x1b[31mforged", "kubelet v1.32.0\\n\\x1b[31mforged is older than 1.33"),
        ("", "its version is unknown (status.nodeInfo.kubeletVersion not given); 1.33 or later is needed"),
        ("dev", "its version is unknown (status.nodeInfo.kubeletVersion 'dev'); 1.33 or later is needed"),
    ],
)
def test_only_a_kubelet_from_1_33_on_gets_sockets_named_after_the_pod(
    version: str, reason: str | None
) -> None:
    assert fixed_names_reason(version) == reason


@pytest.mark.parametrize(
    ("node", "version"),
    [
        ({"status": {"nodeInfo": {"kubeletVersion": "v1.36.2", "osImage": "Debian"}}}, "v1.36.2"),
        ({"metadata": {"name": "a"}}, ""),
        ({"status": None}, ""),
        ({"status": {"nodeInfo": ["v1.36.2"]}}, ""),
        ({"status": {"nodeInfo": {"kubeletVersion": 136}}}, ""),
        ({"status": {"nodeInfo": {"kubeletVersion": "v1.36.2" + "x" * 60}}}, ""),
        ({"status": "<html>"}, ""),
    ],
)
def test_the_kubelet_version_is_read_from_the_node_with_its_types_checked(
    node: dict[str, Any], version: str
) -> None:
    assert kubelet_version(node) == version
