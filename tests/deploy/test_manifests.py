"""deploy/: every manifest is valid against the Kubernetes 1.31 schema (offline, strict: unknown
fields are errors; the DRA objects against 1.36), and the DaemonSet gives the plugin and the DRA
driver exactly what they need from the node and the API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cdi_plugin import __version__
from cdi_plugin.deviceplugin.settings import DEFAULT_PLUGIN_DIR, build
from cdi_plugin.dra.kubelet import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR
from cdi_plugin.dra.objects import device_class_name, rbac
from cdi_plugin.generate.config import default_classes, parse_classes
from cdi_plugin.metrics import HEALTHZ, READYZ, parse_address
from cdi_plugin.store.configfile import parse_config
from cdi_plugin.store.files import DEFAULT_SPEC_DIRS, SPEC_DIRS_ENV, STATIC_DIR
from tests.deviceplugin.fake_kubelet import is_extended_resource_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = "1.31"
#: resource.k8s.io/v1 is served from 1.34; DeviceClass's extendedResourceName is beta from 1.36.
KUBERNETES_DRA = "1.36"
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")
#: What `serve --scan` needs from the node: mount path -> read-only.
HOST_MOUNTS = {
    "/sys": True,
    "/dev": True,
    "/run/udev": True,
    "/etc/cdi": False,
    "/var/run/cdi": True,
    "/var/lib/kubelet/device-plugins": False,
    "/var/lib/kubelet/plugins": False,
    "/var/lib/kubelet/plugins_registry": False,
}
HOST_PATH_TYPES = {
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
}
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi)?$")
#: Peak RSS of `cdi-plugin serve --scan` generating and serving 1000 devices
#: (bench/bench_memory.py), as the DaemonSet's comment says.
MEASURED_PEAK_MIB = 72


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(kind: str) -> dict[str, Any]:
    found = [d for p in MANIFESTS for d in _documents(p) if d["kind"] == kind and "examples" not in p.parts]
    assert len(found) == 1, kind
    return found[0]


def _mib(quantity: str) -> float:
    match = _QUANTITY.match(quantity)
    assert match, f"not a plain binary quantity: {quantity!r}"
    scale = {None: 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024}[match.group(2)]
    return int(match.group(1)) * scale


def _container() -> dict[str, Any]:
    (container,) = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return container


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _one("DaemonSet")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for document in documents:
        version = KUBERNETES_DRA if document["apiVersion"].startswith("resource.k8s.io/") else KUBERNETES
        assert kubernetes_validate.validate(document, version, strict=True) == version


def test_the_kustomize_base_lists_every_manifest_and_sets_the_image() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    # the DeviceClasses (resource.k8s.io/v1, Kubernetes >= 1.34) are applied on their own
    assert sorted(kustomization["resources"]) == sorted(
        [p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml"] + ["dra/rbac.yaml"]
    )
    assert {p.name for p in (DEPLOY / "dra").glob("*.yaml")} == {"rbac.yaml", "deviceclass-fuse.yaml"}
    namespace = kustomization["namespace"]
    for name in kustomization["resources"]:
        for document in _documents(DEPLOY / name):
            assert document["metadata"].get("namespace", namespace) == namespace
    (image,) = kustomization["images"]
    assert image["newTag"] == __version__
    assert _container()["image"] == f"{image['name']}:{__version__}"


def test_the_driver_runs_as_its_service_account_with_only_the_rbac_it_needs() -> None:
    pod = _pod_spec()
    account = _one("ServiceAccount")
    namespace = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True  # the driver's API credentials
    assert account["metadata"]["namespace"] == namespace
    binding, role = _one("ClusterRoleBinding"), _one("ClusterRole")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": namespace}]  # fmt: skip
    grants = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert grants == {
        ("resource.k8s.io", "resourceslices"): {"get", "list", "watch", "create", "update", "delete"},
        ("resource.k8s.io", "resourceclaims"): {"get"},
        ("", "nodes"): {"get"},
    }
    kinds = {d["kind"] for p in MANIFESTS for d in _documents(p)}
    assert not {"Role", "RoleBinding"} & kinds
    assert rbac("cdi-plugin.io", namespace, account["metadata"]["name"]) == [account, role, binding]


def test_the_driver_learns_its_node_from_the_downward_api() -> None:
    (env,) = [e for e in _container()["env"] if e["name"] == "NODE_NAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_daemonset_runs_serve_scan_with_the_configmap() -> None:
    container, pod = _container(), _pod_spec()
    args = container["args"]
    assert args[:4] == ["serve", "--scan", "--config", "/etc/cdi-plugin/config.yaml"]
    assert "--allow-hooks-and-mounts" not in args
    assert "# - --allow-hooks-and-mounts" in (DEPLOY / "daemonset.yaml").read_text()
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert mount["mountPath"] == "/etc/cdi-plugin"
    assert "subPath" not in mount  # a subPath mount never sees ConfigMap updates
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    configmap = _one("ConfigMap")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert "config.yaml" in configmap["data"]
    assert pod["hostNetwork"] is True
    assert {"operator": "Exists"} in pod["tolerations"]


def test_the_configmap_is_a_valid_configuration_that_keeps_the_mounted_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SPEC_DIRS_ENV)  # the image sets none
    text = _one("ConfigMap")["data"]["config.yaml"]
    config = parse_config(text.encode(), "deploy/configmap.yaml")
    settings = build(config.get("plugin"), "deploy/configmap.yaml")
    assert settings.spec_dirs == DEFAULT_SPEC_DIRS
    assert settings.plugin_dir == DEFAULT_PLUGIN_DIR
    classes = parse_classes(config, "deploy/configmap.yaml") if "classes" in config else default_classes()
    assert classes
    for cls in classes:
        for edits in (cls.edits, cls.class_edits):
            assert edits is None or not (edits.mounts or edits.hooks), cls.kind


def test_the_container_is_root_without_any_capability() -> None:
    context = _container()["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["seLinuxOptions"] == {"type": "spc_t"}


def test_host_mounts_are_exactly_what_the_plugin_needs() -> None:
    container, pod = _container(), _pod_spec()
    volumes = {v["name"]: v for v in pod["volumes"]}
    host: dict[str, bool] = {}
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("hostPath")
        if source is None:
            continue
        assert source["path"] == mount["mountPath"], "host paths appear at the same path inside"
        assert source["type"] in HOST_PATH_TYPES
        host[mount["mountPath"]] = mount.get("readOnly", False)
    assert host == HOST_MOUNTS
    # the spec directories the plugin reads, the one cdi-gen writes (with its .cdi-gen-owned
    # record inside it) and the kubelet's plugin directory are all there
    assert {str(d) for d in DEFAULT_SPEC_DIRS} <= set(host)
    assert host[str(STATIC_DIR)] is False
    assert host[str(DEFAULT_PLUGIN_DIR)] is False
    # the DRA driver's socket directory and the kubelet's plugin watcher's, read-write
    assert host[str(DEFAULT_PLUGINS_DIR)] is host[str(DEFAULT_REGISTRY_DIR)] is False
    # with /dev the host's and read-only, nothing may be mounted into it
    assert not container["terminationMessagePath"].startswith("/dev/")
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


def test_probes_and_the_metrics_address_agree() -> None:
    container = _container()
    args = container["args"]
    host, port = parse_address(args[args.index("--metrics-address") + 1])
    assert host == "127.0.0.1"
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert (get["host"], get["port"]) == (host, port), probe
        paths[probe] = get["path"]
    assert paths == {"startupProbe": HEALTHZ, "livenessProbe": HEALTHZ, "readinessProbe": READYZ}
    assert [p["containerPort"] for p in container["ports"]] == [port]


def test_memory_request_and_limit_follow_the_measurement() -> None:
    resources = _container()["resources"]
    request, limit = _mib(resources["requests"]["memory"]), _mib(resources["limits"]["memory"])
    assert request >= MEASURED_PEAK_MIB
    assert limit == 2 * request
    assert "cpu" not in resources["limits"]
    assert f"at {MEASURED_PEAK_MIB} MiB" in (DEPLOY / "daemonset.yaml").read_text()


def test_the_example_pod_requests_a_default_kind() -> None:
    pod = _documents(DEPLOY / "examples" / "pod-fuse.yaml")[0]
    kinds = {c.kind for c in default_classes() if c.enabled}
    for container in pod["spec"]["containers"]:
        requested = container["resources"]["limits"]
        assert requested
        for resource in requested:
            assert resource in kinds
            assert is_extended_resource_name(resource)
        assert re.search(r":[0-9][^:]*$", container["image"]), "the example's image is pinned"


def test_the_dra_example_claims_a_default_kind_through_the_device_class_of_deploy() -> None:
    (device_class,) = _documents(DEPLOY / "dra" / "deviceclass-fuse.yaml")
    template, pod = _documents(DEPLOY / "examples" / "claim-fuse.yaml")
    kind = device_class["spec"]["extendedResourceName"]
    assert kind in {c.kind for c in default_classes() if c.enabled}
    assert device_class["metadata"]["name"] == device_class_name(kind)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == device_class["metadata"]["name"]
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    # the device plugin's example asks for the same kind by its extended resource name
    device_plugin_pod = _documents(DEPLOY / "examples" / "pod-fuse.yaml")[0]
    assert set(device_plugin_pod["spec"]["containers"][0]["resources"]["limits"]) == {kind}
