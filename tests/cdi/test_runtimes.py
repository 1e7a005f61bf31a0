"""The runtime table and what each runtime drops: the file format, the cdiVersion and its
spelling, the fields it rejects or ignores."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdi_plugin.cdi import schema
from cdi_plugin.cdi.codec import Format
from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Spec
from cdi_plugin.cdi.runtime_checks import ceiling, format_refusal, refusals
from cdi_plugin.cdi.runtimes import BY_NAME, NAMES, RUNTIMES, targets
from cdi_plugin.cdi.version import SUPPORTED_VERSIONS, minimum_version, version_key

ISULAD, PODMAN, CRIO = BY_NAME["isulad"], BY_NAME["podman-4"], BY_NAME["cri-o"]
NODE = "/devices/0/containerEdits/deviceNodes/0"


def _spec(version: str = "0.3.0", kind: str = "example.com/widget", **edits: object) -> Spec:
    base = ContainerEdits(device_nodes=(DeviceNode(path="/dev/widget", type="c", file_mode=0o600),))
    device = Device(name="w", container_edits=dataclasses.replace(base, **edits))
    return Spec(cdi_version=version, kind=kind, devices=(device,))


def _rules(name: str, spec: Spec, suffix: str = ".json", syntax: Format = "json") -> list[str]:
    return [p.rule for p in refusals(BY_NAME[name], spec, suffix, syntax)]


def test_the_names_the_configuration_takes_are_the_tables() -> None:
    config = schema.load("config.schema.json")
    assert tuple(config["properties"]["runtimes"]["items"]["enum"]) == NAMES
    assert len(set(NAMES)) == len(RUNTIMES)
    for runtime in RUNTIMES:
        assert runtime.max_version in SUPPORTED_VERSIONS
        assert runtime.source, runtime.name


def test_a_series_reads_more_with_each_release() -> None:
    for series in (["containerd-1.7", "containerd-1.7.13", "containerd-1.7.20", "containerd-1.7.34"],
                   ["containerd-2", "containerd-2.1", "containerd-2.3"]):  # fmt: skip
        tops = [version_key(BY_NAME[n].max_version) for n in series]
        assert tops == sorted(tops), series
        assert [BY_NAME[n].v_prefix for n in series] == sorted(BY_NAME[n].v_prefix for n in series)


def test_the_spec_cdi_gen_scan_writes_by_default_is_read_by_every_runtime() -> None:
    spec = _spec()  # cdiVersion 0.3.0, a character device with its mode, in a .json file
    assert {name: _rules(name, spec) for name in NAMES} == {name: [] for name in NAMES}


OLD = {"isulad", "podman-4", "containerd-1.7", "containerd-1.7.13"}  # no 'v', at most 0.6.0
NONE = DeviceNode(path="/dev/w", type="c", file_mode=0o600, permissions="none")
TYPE_U = DeviceNode(path="/dev/w", type="u", file_mode=0o600)
CMT = IntelRdt(clos_id="c", enable_cmt=True)
CREATE, PRESTART = Hook(hook_name="createContainer", path="/x"), Hook(hook_name="prestart", path="/x")


@pytest.mark.parametrize(
    ("case", "suffix", "syntax", "spec", "dropped_by"),
    [
        ("a YAML file", ".yaml", "yaml", _spec(), {"isulad"}),
        ("YAML in a .json file", ".json", "yaml", _spec(), {"isulad"}),
        ("v0.6.0", ".json", "json", _spec("v0.6.0"), OLD),
        ("v0.3.0", ".json", "json", _spec("v0.3.0"), OLD),
        ("0.6.0", ".json", "json", _spec("0.6.0"), {"podman-4", "containerd-1.7"}),
        ("0.7.0", ".json", "json", _spec("0.7.0"), OLD),
        ("1.1.0", ".json", "json", _spec("1.1.0"), set(NAMES) - {"containerd-2.3", "cri-o", "docker"}),
        ("permissions none", ".json", "json", _spec(device_nodes=(NONE,)), set(NAMES)),
        ("createContainer", ".json", "json", _spec(hooks=(CREATE,)), {"isulad"}),
        ("prestart", ".json", "json", _spec(hooks=(PRESTART,)), set()),
        ("type u", ".json", "json", _spec(device_nodes=(TYPE_U,)), {"isulad"}),
        # read by containerd 2.1-2.2 only: older ones read up to 0.8.0, CDI 1.1.0 dropped enableCMT
        (
            "enableCMT at 1.0.0",
            ".json",
            "json",
            _spec("1.0.0", intel_rdt=CMT),
            set(NAMES) - {"containerd-2.1"},
        ),
    ],
)
def test_who_drops_what(case: str, suffix: str, syntax: Format, spec: Spec, dropped_by: set[str]) -> None:
    dropped = {n for n in NAMES if any(rule != "runtime-ignored" for rule in _rules(n, spec, suffix, syntax))}
    assert dropped == dropped_by, case
    for name in dropped:
        problem = next(p for p in refusals(BY_NAME[name], spec, suffix, syntax) if p.is_error)
        assert problem.message.startswith(f"{BY_NAME[name].label} drops this file: "), problem.message


def test_the_reasons_name_what_to_write_instead() -> None:
    [prefix] = refusals(ISULAD, _spec("v0.6.0"), ".json", "json")
    assert (prefix.pointer, prefix.message, prefix.hint) == (
        "/cdiVersion", "isulad (iSulad 2.1.6) drops this file: it rejects the 'v' in 'v0.6.0'", "write 0.6.0"
    )  # fmt: skip
    [above] = refusals(PODMAN, _spec("0.7.0"), ".json", "json")
    assert above.message.endswith("it reads cdiVersion up to 0.5.0, the file declares 0.7.0")
    assert above.hint == "declare 0.3.0: the spec needs no more"
    dotted = _spec("0.6.0", kind="example.com/widget.v2")
    assert minimum_version(dotted) == "0.6.0"
    [needed] = refusals(PODMAN, dotted, ".json", "json")
    assert needed.hint.startswith(
        "the spec needs 0.6.0 for a '.' in the class of kind 'example.com/widget.v2'"
    )
    [yaml] = refusals(ISULAD, _spec(), ".yaml", "yaml")
    assert yaml.message == "isulad (iSulad 2.1.6) drops this file: it reads only .json files"


def test_what_isulad_reads_past_is_a_warning() -> None:
    no_mode = _spec(device_nodes=(DeviceNode(path="/dev/w", type="c"),))
    [mode] = refusals(ISULAD, no_mode, ".json", "json")
    assert (mode.rule, mode.severity.value, mode.pointer) == ("runtime-ignored", "warning", NODE)
    assert "mode 0666" in mode.message
    assert refusals(CRIO, no_mode, ".json", "json") == []
    # declared 0.3.0: the CDI Go library rejects it (additionalGids needs 0.7.0); iSulad reads past it
    gids = refusals(ISULAD, _spec(additional_gids=(5,)), ".json", "json")
    assert [(p.rule, p.pointer) for p in gids] == [
        ("runtime-ignored", "/devices/0/containerEdits/additionalGids")
    ]


def test_format_refusal_and_the_version_ceiling() -> None:
    assert format_refusal(ISULAD, "yaml") == "isulad (iSulad 2.1.6) reads only .json files"
    assert format_refusal(ISULAD, "json") is None
    assert format_refusal(PODMAN, "yaml") is None
    assert ceiling("0.5.0", ()) == "0.5.0"
    assert ceiling("1.1.0", targets(["cri-o", "isulad"])) == "0.6.0"
    assert ceiling("0.3.0", targets(["isulad"])) == "0.3.0"
    assert ceiling(None, ()) is None
    assert targets(["isulad", "cri-o", "isulad"]) == (ISULAD, CRIO)


def test_docs_runtimes_md_has_the_tables_rows() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "runtimes.md").read_text()
    for r in RUNTIMES:
        row = f"| `{r.name}` | {r.title} | {r.library} | {r.max_version}"
        assert row in docs, row
        v_prefix = docs.split(row, 1)[1].split("|")[1].strip()
        assert v_prefix.startswith("yes" if r.v_prefix else "no"), r.name
