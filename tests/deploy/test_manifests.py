"""deploy/: the two kustomizations, built by kustomize, give objects valid against the Kubernetes
schemas (offline, strict: unknown fields are errors) of the oldest and newest versions each
supports: the device plugin alone (deploy/, every supported cluster) and with the DRA component
(deploy/with-dra/, Kubernetes >= 1.34). The DaemonSet gives the plugin and the DRA driver exactly
what they need from the node and the API, and the component adds only what DRA needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cdi_plugin import __version__
from cdi_plugin.cli.plugin import main
from cdi_plugin.deviceplugin.settings import DEFAULT_PLUGIN_DIR, build
from cdi_plugin.dra.kubelet import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR
from cdi_plugin.dra.names import DEFAULT_DRIVER
from cdi_plugin.dra.objects import admission_policy, device_class_name, rbac
from cdi_plugin.generate.config import default_classes, parse_classes
from cdi_plugin.metrics import HEALTHZ, READYZ, parse_address
from cdi_plugin.store.configfile import parse_config
from cdi_plugin.store.files import DEFAULT_SPEC_DIRS, SPEC_DIRS_ENV, STATIC_DIR
from tests.deploy.kustomize import DEPLOY, kustomize_build, one
from tests.deviceplugin.fake_kubelet import is_extended_resource_name

DEVICE_PLUGIN = DEPLOY
WITH_DRA = DEPLOY / "with-dra"
NAMESPACE = "kube-system"
#: The oldest Kubernetes each kustomization is for (the device plugin with CDI: 1.28 with the
#: DevicePluginCDIDevices gate; DRA's resource.k8s.io/v1: 1.34) and the newest schema there is.
OLDEST = {DEVICE_PLUGIN: "1.28", WITH_DRA: "1.34"}
NEWEST = "1.37"
KUSTOMIZATIONS = [DEVICE_PLUGIN, WITH_DRA]
#: What the device plugin needs from the node: mount path -> read-only.
DEVICE_PLUGIN_MOUNTS = {
    "/sys": True,
    "/dev": True,
    "/run/udev": True,
    "/etc/cdi": False,
    "/var/run/cdi": True,
    "/var/lib/kubelet/device-plugins": False,
}
#: What the DRA driver needs on top: its socket's and its registration's directories.
DRA_MOUNTS = {"/var/lib/kubelet/plugins": False, "/var/lib/kubelet/plugins_registry": False}
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
#: Peak RSS of `cdi-plugin serve --scan` generating and serving 1000 devices, and of its child
#: that checks the configuration (bench/bench_memory.py), as the DaemonSet's comment, docs/deploy.md
#: and docs/troubleshooting.md say.
MEASURED_PEAK_MIB = 60.5
CONFIG_CHECK_PEAK_MIB = 24
#: The same with DRA (deploy/with-dra): every device also served through the DRA driver, as
#: deploy/dra/patch-daemonset.yaml and docs/deploy.md say.
MEASURED_DRA_PEAK_MIB = 78.4


def _id(path: Path) -> str:
    return str(path.relative_to(DEPLOY.parent))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _mib(quantity: str) -> float:
    match = _QUANTITY.match(quantity)
    assert match, f"not a plain binary quantity: {quantity!r}"
    scale = {None: 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024}[match.group(2)]
    return int(match.group(1)) * scale


def _pod_spec(kustomization: Path = DEVICE_PLUGIN) -> dict[str, Any]:
    spec: dict[str, Any] = one(kustomize_build(kustomization), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _container(kustomization: Path = DEVICE_PLUGIN) -> dict[str, Any]:
    (container,) = _pod_spec(kustomization)["containers"]
    return dict(container)


def _serve_args(kustomization: Path) -> dict[str, Any]:
    """The DaemonSet's command line as `cdi-plugin` parses it (unknown options and values fail)."""
    args = _container(kustomization)["args"]
    assert args[0] == "serve"
    return main.commands["serve"].make_context("serve", args[1:]).params


def _host_mounts(kustomization: Path) -> dict[str, bool]:
    container, pod = _container(kustomization), _pod_spec(kustomization)
    volumes = {v["name"]: v for v in pod["volumes"]}
    host: dict[str, bool] = {}
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("hostPath")
        if source is None:
            continue
        assert source["path"] == mount["mountPath"], "host paths appear at the same path inside"
        assert source["type"] in HOST_PATH_TYPES
        host[mount["mountPath"]] = mount.get("readOnly", False)
    assert len(volumes) == len(container["volumeMounts"]), "every volume is mounted"
    return host


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=_id)
def test_every_object_kubectl_apply_k_sends_is_valid_kubernetes(kustomization: Path) -> None:
    objects = kustomize_build(kustomization)
    assert objects
    for obj in objects:
        for version in (OLDEST[kustomization], NEWEST):
            assert kubernetes_validate.validate(obj, version, strict=True) == version, obj["kind"]
        if obj["kind"] in {"ConfigMap", "DaemonSet", "ServiceAccount"}:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]
        else:  # cluster-scoped
            assert "namespace" not in obj["metadata"], obj["kind"]


def test_the_device_plugin_is_the_daemonset_and_its_configmap_alone() -> None:
    assert sorted(o["kind"] for o in kustomize_build(DEVICE_PLUGIN)) == ["ConfigMap", "DaemonSet"]
    pod = _pod_spec()
    # no account of its own and no token: the device plugin never talks to the API server
    assert "serviceAccountName" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert "env" not in _container()
    assert _serve_args(DEVICE_PLUGIN)["api"] is None  # the configuration's, below: device-plugin
    configmap = one(kustomize_build(DEVICE_PLUGIN), "ConfigMap")
    config = parse_config(configmap["data"]["config.yaml"].encode(), "deploy/base/configmap.yaml")
    assert build(config.get("plugin"), "deploy/base/configmap.yaml").api == "device-plugin"


def test_the_dra_component_adds_only_what_the_driver_needs() -> None:
    """The DaemonSet with DRA is the device plugin's, plus the account and its token, the node's
    name and the pod's UID, the kubelet's plugin directories and --api=both, without the port
    declaration (a hostPort under hostNetwork) that would keep an update's new pod from starting
    beside the old one; the objects are the device plugin's plus the RBAC, the admission policy
    and the DeviceClasses."""
    kinds = sorted(o["kind"] for o in kustomize_build(WITH_DRA))
    admission = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    rbac_kinds = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    assert kinds == sorted(["ConfigMap", "DaemonSet", *rbac_kinds, *admission, "DeviceClass"])
    assert one(kustomize_build(WITH_DRA), "ConfigMap") == one(kustomize_build(DEVICE_PLUGIN), "ConfigMap")
    plain, dra = _pod_spec(), _pod_spec(WITH_DRA)
    assert (dra["serviceAccountName"], dra["automountServiceAccountToken"]) == ("cdi-plugin", True)
    changed = {"serviceAccountName", "automountServiceAccountToken", "containers", "volumes"}
    assert {k: v for k, v in dra.items() if k not in changed} == {
        k: v for k, v in plain.items() if k not in changed
    }
    added = [v for v in dra["volumes"] if v not in plain["volumes"]]
    assert [v for v in dra["volumes"] if v not in added] == plain["volumes"]
    assert sorted(v["hostPath"]["path"] for v in added) == sorted(DRA_MOUNTS)
    container, base = _container(WITH_DRA), _container()
    assert container["args"] == [*base["args"], "--api=both"]
    assert [m for m in container["volumeMounts"] if m not in base["volumeMounts"]] == [
        {"name": v["name"], "mountPath": v["hostPath"]["path"]} for v in added
    ]
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    assert "ports" not in container
    assert base["ports"]
    rest = {"args", "volumeMounts", "env", "ports", "resources"}
    assert {k: v for k, v in container.items() if k not in rest} == {
        k: v for k, v in base.items() if k not in rest
    }
    assert _serve_args(WITH_DRA)["api"] == "both"
    assert _serve_args(WITH_DRA)["pod_uid"] is None  # from $POD_UID, as --node-name from $NODE_NAME


def test_with_dra_an_update_starts_the_new_pod_before_the_old_one_stops() -> None:
    """maxSurge 1 with maxUnavailable 0 on each node; the old pod goes once the new one has been
    ready for minReadySeconds. No container declares a port: with hostNetwork that would be a
    hostPort, which the new pod could not get while the old one holds it."""
    plain = one(kustomize_build(DEVICE_PLUGIN), "DaemonSet")["spec"]
    dra = one(kustomize_build(WITH_DRA), "DaemonSet")["spec"]
    assert plain["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert "minReadySeconds" not in plain
    assert dra["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert dra["minReadySeconds"] >= 5
    assert dra["template"]["spec"]["hostNetwork"] is True
    assert all("ports" not in c for c in dra["template"]["spec"]["containers"])
    changed = {"updateStrategy", "minReadySeconds", "template"}
    assert {k: v for k, v in dra.items() if k not in changed} == {
        k: v for k, v in plain.items() if k not in changed
    }


def test_every_file_of_deploy_is_in_a_kustomization() -> None:
    """The two entry points, the base, the component; every manifest outside examples/ is a
    resource or a patch of one of them."""
    listed: set[Path] = set()
    kinds, components = {}, set()
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        content = yaml.safe_load(kustomization.read_text())
        kinds[_id(kustomization.parent)] = (content["apiVersion"], content["kind"])
        here = kustomization.parent
        for entry in content.get("resources", []) + [p["path"] for p in content.get("patches", [])]:
            target = (here / entry).resolve()
            listed.add(target / "kustomization.yaml" if target.is_dir() else target)
        components |= {_id((here / c).resolve()) for c in content.get("components", [])}
    assert components == {"deploy/dra"}
    assert kinds == {
        "deploy": ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
        "deploy/base": ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
        "deploy/with-dra": ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
        "deploy/dra": ("kustomize.config.k8s.io/v1alpha1", "Component"),
    }
    manifests = {
        p for p in DEPLOY.rglob("*.yaml") if "examples" not in p.parts and p.name != "kustomization.yaml"
    }
    assert manifests - listed == set()


def test_the_image_is_set_once_for_both() -> None:
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert image["newTag"] == __version__
    (daemonset,) = _documents(DEPLOY / "base" / "daemonset.yaml")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == f"{image['name']}:{__version__}"
    for built in KUSTOMIZATIONS:
        assert _container(built)["image"] == f"{image['newName']}:{__version__}"


@pytest.mark.parametrize("path", sorted((DEPLOY / "examples").glob("*.yaml")), ids=_id)
def test_every_example_is_valid_kubernetes(path: Path) -> None:
    for document in _documents(path):
        assert kubernetes_validate.validate(document, NEWEST, strict=True) == NEWEST


def test_the_driver_runs_as_its_service_account_with_only_the_rbac_it_uses() -> None:
    objects = kustomize_build(WITH_DRA)
    pod, account = _pod_spec(WITH_DRA), one(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    binding, role = one(objects, "ClusterRoleBinding"), one(objects, "ClusterRole")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]  # fmt: skip
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
    assert not {"Role", "RoleBinding"} & {o["kind"] for o in objects}
    assert _serve_args(WITH_DRA)["driver_name"] is None  # the default driver, which the RBAC names
    assert rbac(DEFAULT_DRIVER, NAMESPACE, account["metadata"]["name"]) == [account, role, binding]


def test_the_admission_policy_binds_the_drivers_own_account() -> None:
    """The policy names the account the DaemonSet runs as (system:serviceaccount:NS:NAME): with
    any other, it would not apply and every node could write every node's slices."""
    objects = kustomize_build(WITH_DRA)
    account = one(objects, "ServiceAccount")["metadata"]
    policy, binding = (
        one(objects, "ValidatingAdmissionPolicy"),
        one(objects, "ValidatingAdmissionPolicyBinding"),
    )
    assert [policy, binding] == admission_policy(DEFAULT_DRIVER, account["namespace"], account["name"])
    user = f"system:serviceaccount:{account['namespace']}:{_pod_spec(WITH_DRA)['serviceAccountName']}"
    ((condition,),) = [policy["spec"]["matchConditions"]]
    assert condition["expression"] == f'request.userInfo.username == "{user}"'
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_the_daemonset_runs_serve_scan_with_the_configmap() -> None:
    container, pod = _container(), _pod_spec()
    args = container["args"]
    assert args[:4] == ["serve", "--scan", "--config", "/etc/cdi-plugin/config.yaml"]
    assert "--allow-hooks-and-mounts" not in args
    assert "# - --allow-hooks-and-mounts" in (DEPLOY / "base" / "daemonset.yaml").read_text()
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert mount["mountPath"] == "/etc/cdi-plugin"
    assert "subPath" not in mount  # a subPath mount never sees ConfigMap updates
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    configmap = one(kustomize_build(DEVICE_PLUGIN), "ConfigMap")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert "config.yaml" in configmap["data"]
    assert pod["hostNetwork"] is True
    assert {"operator": "Exists"} in pod["tolerations"]


def test_the_configmap_is_a_valid_configuration_that_keeps_the_mounted_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SPEC_DIRS_ENV)  # the image sets none
    text = one(kustomize_build(DEVICE_PLUGIN), "ConfigMap")["data"]["config.yaml"]
    config = parse_config(text.encode(), "deploy/base/configmap.yaml")
    settings = build(config.get("plugin"), "deploy/base/configmap.yaml")
    assert settings.spec_dirs == DEFAULT_SPEC_DIRS
    assert settings.plugin_dir == DEFAULT_PLUGIN_DIR
    classes = (
        parse_classes(config, "deploy/base/configmap.yaml") if "classes" in config else default_classes()
    )
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


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=_id)
def test_host_mounts_are_exactly_what_the_plugin_needs(kustomization: Path) -> None:
    host = _host_mounts(kustomization)
    assert host == (DEVICE_PLUGIN_MOUNTS | DRA_MOUNTS if kustomization == WITH_DRA else DEVICE_PLUGIN_MOUNTS)
    # the spec directories the plugin reads, the one cdi-gen writes (with its .cdi-gen-owned
    # record inside it) and the kubelet's plugin directory are all there
    assert {str(d) for d in DEFAULT_SPEC_DIRS} <= set(host)
    assert host[str(STATIC_DIR)] is False
    assert host[str(DEFAULT_PLUGIN_DIR)] is False
    if kustomization == WITH_DRA:  # the DRA driver's socket directory and the plugin watcher's
        assert host[str(DEFAULT_PLUGINS_DIR)] is host[str(DEFAULT_REGISTRY_DIR)] is False
    # with /dev the host's and read-only, nothing may be mounted into it
    container = _container(kustomization)
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


#: CPU seconds from start to /healthz answering: 0.32 for `serve --scan` measured on a host, up
#: to 0.45 with the configuration check beside it.
START_CPU_SECONDS = 0.45


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=_id)
def test_the_startup_probe_waits_for_a_start_at_the_cpu_request(kustomization: Path) -> None:
    """On a node whose CPUs are all busy, the start gets its request's share only: the startup
    probe waits at least twice that long, or the kubelet restarts a start that was going well."""
    container = _container(kustomization)
    cpu = container["resources"]["requests"]["cpu"]
    assert cpu.endswith("m")
    probe = container["startupProbe"]
    waited = probe["periodSeconds"] * probe["failureThreshold"]
    assert waited >= 2 * START_CPU_SECONDS / (int(cpu[:-1]) / 1000)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=_id)
def test_memory_request_and_limit_follow_the_measurement(kustomization: Path) -> None:
    """The request covers the measured peak of what the kustomization runs and its configuration
    check together; with DRA the process holds the driver and its API client too."""
    resources = _container(kustomization)["resources"]
    request, limit = _mib(resources["requests"]["memory"]), _mib(resources["limits"]["memory"])
    peak = MEASURED_DRA_PEAK_MIB if kustomization == WITH_DRA else MEASURED_PEAK_MIB
    assert request >= 1.09 * (peak + CONFIG_CHECK_PEAK_MIB)
    assert limit == 2 * request
    assert "cpu" not in resources["limits"]
    assert resources["requests"]["cpu"] == _container()["resources"]["requests"]["cpu"]
    if kustomization == WITH_DRA:
        for text in [(DEPLOY / "dra" / "patch-daemonset.yaml").read_text(),
                     (DEPLOY.parent / "docs" / "deploy.md").read_text()]:  # fmt: skip
            assert f"{MEASURED_DRA_PEAK_MIB} MiB" in " ".join(text.replace("#", " ").split())
        return
    for text in [
        (DEPLOY / "base" / "daemonset.yaml").read_text(),
        *((DEPLOY.parent / "docs" / name).read_text() for name in ("deploy.md", "troubleshooting.md")),
    ]:
        flat = " ".join(text.replace("#", " ").split())
        assert f"{MEASURED_PEAK_MIB} MiB" in flat
        assert f"{CONFIG_CHECK_PEAK_MIB} MiB more" in flat


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
    (device_class,) = [o for o in kustomize_build(WITH_DRA) if o["kind"] == "DeviceClass"]
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
