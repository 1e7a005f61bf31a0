"""``serve --api dra|both`` without credentials for the API server: one line saying what is
missing and what to do, in a pod (the DRA component's account and token) and elsewhere
(--kubeconfig)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.dra.serving import DraNode, dra_node

__all__ = ["dra_node"]


def test_no_credentials_is_one_line_saying_where_they_come_from(dra_node: DraNode, tmp_path: Path) -> None:
    args = dra_node.args("both")
    at = args.index("--kubeconfig")
    del args[at : at + 2]
    home = tmp_path / "home"  # no ~/.kube/config; no $KUBECONFIG; no service account on this host
    home.mkdir()
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=30, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )  # fmt: skip
    assert result.returncode == 1
    line, end = result.stderr.partition("\n")[::2]
    assert end == ""
    # what is missing: ~/.kube/config here (in a pod with a token: $KUBERNETES_SERVICE_HOST)
    assert line.startswith(
        "cdi-plugin: error: Kubernetes credentials (no service account, $KUBECONFIG or ~/.kube/config): "
    )
    assert line.endswith(
        "; in a pod, run with the service account and token that deploy/dra gives the DaemonSet "
        "(serviceAccountName, automountServiceAccountToken: true), elsewhere give --kubeconfig"
    )
    assert dra_node.kubelet_sockets() == []


def test_a_kubeconfig_that_is_not_yaml_is_named_with_its_line(dra_node: DraNode) -> None:
    args = dra_node.args("dra")  # writes a kubeconfig, replaced here
    dra_node.config.write_text("apiVersion: v1\nclusters: [\n  {name: a\n")
    result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1
    assert result.stderr == (
        f"cdi-plugin: error: --kubeconfig {dra_node.config}: not YAML: line 4 column 1: "
        "expected ',' or '}', but got '<stream end>'\n"
    )
