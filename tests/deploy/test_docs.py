"""The deployment docs cannot drift from the schemas, the metrics, the runtime facts or the files."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from cdi_plugin.cdi import schema
from cdi_plugin.cli.dra_objects import DEFAULT_DRIVER, dra_objects
from cdi_plugin.deviceplugin.settings import build
from cdi_plugin.dra.kubelet import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR
from cdi_plugin.dra.names import device_names
from cdi_plugin.dra.objects import device_class_name
from cdi_plugin.dra.slices import TAINT_EFFECT, taint_key
from cdi_plugin.metrics import DraMetrics, PluginMetrics, Probes, ScanMetrics
from cdi_plugin.store.configfile import parse_config
from tests.deploy.kustomize import kustomize_build
from tests.docs_helpers import schema_properties

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG_MD = (DOCS / "config.md").read_text()
PLUGIN_SECTION = CONFIG_MD[CONFIG_MD.index("## The `plugin` section") :].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"```{language}\n(.*?)```", text, re.DOTALL)]


def test_the_plugin_section_documents_every_key_of_its_schema() -> None:
    names = set(schema_properties(schema.load("plugin-settings.schema.json")))
    assert {"specDirs", "resources", "cdiStrategy", "gracePeriod", "replicas"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in PLUGIN_SECTION)
    assert not missing, f"docs/config.md's plugin section does not mention {missing}"


def test_the_plugin_sections_example_is_valid_and_sets_every_top_level_key() -> None:
    (example,) = _blocks(PLUGIN_SECTION, "yaml")
    config = parse_config(example.encode(), "docs/config.md")
    section = config["plugin"]
    assert set(section) == set(schema.load("plugin-settings.schema.json")["properties"])
    settings = build(section, "docs/config.md")
    assert settings.replicas_for("cdi-plugin.io/fuse") == 8
    assert settings.replicas_for("cdi-plugin.io/kvm") == 2
    assert settings.grace_period == 300


def _metric_names() -> set[str]:
    registry = CollectorRegistry()
    PluginMetrics(registry)
    ScanMetrics(registry)
    DraMetrics(registry, Probes(), DEFAULT_DRIVER)
    return {f.name + ("_total" if f.type == "counter" else "") for f in registry.collect()}


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    text = (DOCS / "observability.md").read_text()
    names = _metric_names()
    assert len(names) == 24
    missing = sorted(n for n in names if f"| `{n}` |" not in text)
    assert not missing, f"docs/observability.md does not list {missing}"
    documented = set(re.findall(r"^\| `(cdi_(?:plugin|gen)_[a-z_]+)` \|", text, re.MULTILINE))
    assert documented == names


def test_every_runtime_is_covered_with_its_settings() -> None:
    text = (DOCS / "runtimes.md").read_text()
    for needle in [
        "## containerd 1.7", "enable_cdi = true", 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', "1.7.2",
        "## containerd 2.x", "io.containerd.cri.v1.runtime",
        "## CRI-O", "[crio.runtime]", "1.28",
        "## podman", "4.3",
        "## Docker", '"features": {"cdi": true}', "28.2", "25.0",
        "## iSulad", '"enable-cri-v1": true', '"enable-cdi": true', '"cdi-spec-dirs"', "0.6.0",
        "DevicePluginCDIDevices", "1.29", "## Which CDI strategy",
    ]:  # fmt: skip
        assert needle in text, needle


def test_config_snippets_in_the_runtime_guide_parse() -> None:
    text = (DOCS / "runtimes.md").read_text()
    tomls, jsons = _blocks(text, "toml"), _blocks(text, "json")
    assert len(tomls) == 3
    assert len(jsons) == 2
    containerd17, containerd2, crio = (tomllib.loads(t) for t in tomls)
    assert containerd17["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True
    assert containerd2["plugins"]["io.containerd.cri.v1.runtime"]["cdi_spec_dirs"] == [
        "/etc/cdi",
        "/var/run/cdi",
    ]
    assert crio["crio"]["runtime"]["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    docker, isulad = (json.loads(j) for j in jsons)
    assert docker["features"] == {"cdi": True}
    assert isulad == {
        "enable-cri-v1": True,
        "enable-cdi": True,
        "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi"],
    }


DEPLOY_DOCS = ["architecture.md", "config.md", "deploy.md", "observability.md", "quickstart.md",
               "runtimes.md", "troubleshooting.md", "device-plugin.md", "dra.md"]  # fmt: skip


def _slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return text.replace(" ", "-")


@pytest.mark.parametrize("name", DEPLOY_DOCS)
def test_links_and_repository_paths_exist(name: str) -> None:
    text = (DOCS / name).read_text()
    for path in re.findall(r"`((?:deploy|bench|tests|schemas|docs)/[^`\s]*)`", text):
        if "*" not in path and "<" not in path:
            assert (ROOT / path).exists(), path
    for target, anchor in re.findall(r"\]\(([a-z-]+\.md|\.\./[^)#]+)?(?:#([a-z0-9-]+))?\)", text):
        file = DOCS / target if target else DOCS / name
        assert file.exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{name}: {target}#{anchor}"


DRA_MD = (DOCS / "dra.md").read_text()
README = (ROOT / "README.md").read_text()
KUBERNETES_SECTION = README[README.index("## Kubernetes\n") :].split("\n## ", 1)[0]


def _documents(path: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]


@pytest.mark.parametrize("text", [DRA_MD, KUBERNETES_SECTION], ids=["dra.md", "README"])
def test_shell_commands_name_real_files_and_options(text: str) -> None:
    """Every deploy/ file a command names exists; every dra-objects command line parses."""
    lines = [line for block in _blocks(text, "sh") for line in block.splitlines()]
    assert lines
    for line in lines:
        for path in re.findall(r"\b(deploy/[\w./-]*\w)", line):
            assert (ROOT / path).exists(), path
        if "cdi-plugin dra-objects" in line:
            args = shlex.split(line.split("cdi-plugin dra-objects", 1)[1].split("|")[0])
            dra_objects.make_context("dra-objects", args)  # unknown options and bad values raise


def test_the_documented_composition_builds_what_deploy_with_dra_builds(tmp_path: Path) -> None:
    """The kustomization dra.md shows, beside a copy of deploy/, gives the same objects as
    `kubectl apply -k deploy/with-dra/`; the commands name both kustomizations."""
    composition = _blocks(DRA_MD, "yaml")[0]
    shutil.copytree(ROOT / "deploy", tmp_path / "cdi-plugin" / "deploy")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "kustomization.yaml").write_text(composition)
    assert kustomize_build(tmp_path / "site") == kustomize_build(ROOT / "deploy" / "with-dra")
    installing = DRA_MD[DRA_MD.index("## Installing") :].split("\n## ", 1)[0]
    assert "kubectl apply -k deploy/with-dra/" in installing
    assert "`kubectl apply -k deploy/` installs the device plugin alone" in installing
    for text in (KUBERNETES_SECTION, (DOCS / "deploy.md").read_text()):
        assert "kubectl apply -k deploy/" in text
        assert "deploy/with-dra/" in text


def test_the_extended_resource_walkthrough_agrees_with_the_files_and_the_schemas() -> None:
    """The ConfigMap setting serves FUSE through DRA alone; the class is deploy/'s; the pod is the
    device plugin's example; the status is a valid 1.36 pod status naming the scheduler's claim."""
    section = DRA_MD[DRA_MD.index("## A pod asking for the extended resource") :].split("\n## ", 1)[0]
    config, device_class, pod_snippet, status = (yaml.safe_load(b) for b in _blocks(section, "yaml"))
    settings = build(config["plugin"], "docs/dra.md", api="both")
    assert settings.api_for("cdi-plugin.io/fuse") == "dra"
    assert not settings.serves("device-plugin", "cdi-plugin.io/fuse")
    (shipped,) = _documents("deploy/dra/deviceclass-fuse.yaml")
    del shipped["metadata"]["labels"]
    assert device_class == shipped
    pod = _documents("deploy/examples/pod-fuse.yaml")[0]
    ((shown,), (container,)) = pod_snippet["spec"]["containers"], pod["spec"]["containers"]
    assert shown == {k: container[k] for k in shown}
    claim_status = status["status"]["extendedResourceClaimStatus"]
    assert claim_status["resourceClaimName"].startswith(f"{pod['metadata']['name']}-extended-resources-")
    assert claim_status["resourceClaimName"] in section.split("What to check:", 1)[1]
    pod["status"] = status["status"]
    assert kubernetes_validate.validate(pod, "1.36", strict=True) == "1.36"


def test_the_dra_walkthrough_agrees_with_the_files_and_the_code() -> None:
    blocks = _blocks(DRA_MD, "yaml")
    claim_snippet, affinity = yaml.safe_load(blocks[1]), yaml.safe_load(blocks[-1])
    template, pod = _documents("deploy/examples/claim-fuse.yaml")
    assert claim_snippet["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    ((shown,), (container,)) = claim_snippet["spec"]["containers"], pod["spec"]["containers"]
    assert shown == {k: container[k] for k in shown}
    class_name = device_class_name("cdi-plugin.io/fuse")
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == class_name
    assert f"class `{class_name}`" in DRA_MD
    assert f"(`{device_names(['cdi-plugin.io/fuse=fuse'])['cdi-plugin.io/fuse=fuse']}`," in DRA_MD
    # the per-node DaemonSet's affinity is valid in the DaemonSet, for the label the commands set
    daemonset = _documents("deploy/base/daemonset.yaml")[0]
    daemonset["spec"]["template"]["spec"]["affinity"] = affinity["affinity"]
    assert kubernetes_validate.validate(daemonset, "1.31", strict=True)
    (term,) = affinity["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    ((expression,),) = [term["matchExpressions"]]
    assert f"kubectl label node node-a {expression['key']}={expression['values'][0]}" in DRA_MD
    assert f"nodeSelector: {{{expression['key']}: {expression['values'][0]}}}" in DRA_MD
    # health, and the defaults of the driver's options
    assert f"`{taint_key(DEFAULT_DRIVER)}`, effect `{TAINT_EFFECT}`" in DRA_MD
    running = DRA_MD[DRA_MD.index("## Running the driver") :].split("\n## ", 1)[0]
    rows = [
        f"| `--driver-name NAME` | `{DEFAULT_DRIVER}` |",
        f"| `{DEFAULT_PLUGINS_DIR}` |",
        f"| `{DEFAULT_REGISTRY_DIR}` |",
        "| `$NODE_NAME` |",
        "| `--pod-uid UID` | `$POD_UID` |",
        "| `--api device-plugin\\|dra\\|both` |",
    ]
    for row in rows:
        assert row in running, row
    with_dra = next(o for o in kustomize_build(ROOT / "deploy" / "with-dra") if o["kind"] == "DaemonSet")
    env = with_dra["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["NODE_NAME", "POD_UID"]
    upgrades = DRA_MD[DRA_MD.index("## Upgrades") :].split("\n## ", 1)[0]
    strategy = with_dra["spec"]["updateStrategy"]["rollingUpdate"]
    assert f"`maxSurge: {strategy['maxSurge']}`, `maxUnavailable: {strategy['maxUnavailable']}`" in upgrades
    assert f"`minReadySeconds: {with_dra['spec']['minReadySeconds']}`" in upgrades


def test_the_readme_walks_through_both_apis() -> None:
    (limits,) = (yaml.safe_load(b) for b in _blocks(KUBERNETES_SECTION, "yaml"))
    pod = _documents("deploy/examples/pod-fuse.yaml")[0]
    assert limits["resources"] == pod["spec"]["containers"][0]["resources"]
    for link in ["(docs/dra.md)", "(docs/device-plugin.md)", "(docs/deploy.md)", "lightkube"]:
        assert link in KUBERNETES_SECTION, link
    dependencies = README[README.index("## Dependencies") :].split("\n## ", 1)[0]
    assert "**lightkube**" in dependencies
    assert "(docs/dra.md)" in dependencies
