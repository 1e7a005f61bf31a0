"""``cdi-gen validate``: exit codes, the JSON report, the corpus, directories and conflicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import SPECS, Invoke, report, run_cdi_gen, run_on_terminal
from tests.store.specfiles import shared_node_dir, write_spec

GOOD = sorted(p for p in (SPECS / "good").glob("*") if p.is_file())
BAD = sorted(p for p in (SPECS / "bad").iterdir() if p.is_file())
WARN = sorted((SPECS / "warn").iterdir())
#: An empty mount type, a 'v' prefix, permissions 'none': runtimes load them, some versions do not.
DONE_WHEN = [SPECS / "warn" / name for name in (
    "empty-field--mount-type.json", "version-prefix--v1.1.0.json", "permissions-none--device-node.json"
)]  # fmt: skip


def test_good_corpus_directory_is_valid(cli: Invoke) -> None:
    result = cli("validate", SPECS / "good")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1] == f"{len(GOOD)} files: {len(GOOD)} valid, 0 invalid"
    for path in GOOD:
        assert any(line.startswith(f"✓ {path}  ") for line in lines), path


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_corpus_file_fails_with_its_rule(cli: Invoke, path: Path) -> None:
    result = cli("validate", "--json", path)
    assert result.exit_code == 1, result.output
    [file] = report(result)["files"]
    assert file["valid"] is False
    assert path.name.split("--")[0] in {p["rule"] for p in file["problems"] if p["severity"] == "error"}


@pytest.mark.parametrize("path", WARN, ids=lambda p: p.name)
def test_warn_corpus_file_passes_with_its_warning_and_fails_with_strict(cli: Invoke, path: Path) -> None:
    result = cli("validate", "--json", path)
    assert result.exit_code == 0, result.output
    out = report(result)
    assert (out["valid"], out["errors"], out["warnings"]) == (True, 0, 1)
    [problem] = out["files"][0]["problems"]
    assert (problem["rule"], problem["severity"]) == (path.name.split("--")[0], "warning")
    strict = cli("validate", "--json", "--strict", path)
    assert strict.exit_code == 1
    out = report(strict)
    assert (out["valid"], out["errors"], out["warnings"]) == (False, 0, 1)
    assert out["files"][0]["problems"] == [problem]


def test_runtimes_load_them_so_they_are_warnings(cli: Invoke) -> None:
    result = cli("validate", *DONE_WHEN)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for path in DONE_WHEN:
        assert any(line.startswith(f"! {path}  example.com/widget, 1 device, ") for line in lines), path
    warnings = [line.split() for line in lines if " warning " in line]
    assert [w[1:3] for w in warnings] == [
        ["warning", "empty-field"], ["warning", "version-prefix"], ["warning", "permissions-none"]
    ]  # fmt: skip
    messages = [
        p["message"] for f in report(cli("validate", "--json", *DONE_WHEN))["files"] for p in f["problems"]
    ]
    assert "the CDI Go library reads it as absent" in messages[0]
    assert "iSulad, podman 4.3 and containerd 1.7.0-1.7.19 reject the spec" in messages[1]
    assert "released CDI Go library (v1.1.0, in containerd 2.3, and older)" in messages[2]
    assert lines[-1] == "3 files: 3 valid, 0 invalid (0 errors, 3 warnings)"
    strict = cli("validate", "--strict", *DONE_WHEN)
    assert strict.exit_code == 1
    assert strict.stdout.splitlines()[-1] == "3 files: 0 valid, 3 invalid (0 errors, 3 warnings)"
    assert all(f"✗ {path}" in strict.stdout.splitlines() for path in DONE_WHEN)


def test_warn_corpus_directory_as_a_real_program() -> None:
    done = run_cdi_gen("validate", "--json", SPECS / "warn")
    assert done.returncode == 0, done.stdout
    out = report(done)
    assert (out["valid"], out["errors"], out["warnings"]) == (True, 0, len(WARN))
    assert run_cdi_gen("validate", "--strict", SPECS / "warn").returncode == 1


def test_errors_and_warnings_are_counted_apart(cli: Invoke) -> None:
    result = cli("validate", "--json", SPECS / "bad" / "env-format--no-equals.json", *DONE_WHEN[:2])
    assert result.exit_code == 1
    out = report(result)
    assert (out["valid"], out["errors"], out["warnings"]) == (False, 1, 2)
    assert [f["valid"] for f in out["files"]] == [False, True, True]


def test_conflict_directory(cli: Invoke) -> None:
    conflict = SPECS / "bad" / "conflict"
    result = cli("validate", "--json", conflict)
    assert result.exit_code == 1
    files = report(result)["files"]
    assert len(files) == 2
    for f in files:
        [problem] = f["problems"]
        assert (problem["rule"], problem["pointer"]) == ("conflict", "/devices/0/name")
        assert problem["message"].startswith("example.com/widget=widget0 is also defined in ")
        other = next(g["path"] for g in files if g is not f)
        assert other in problem["message"]


def test_two_files_of_one_directory_named_separately_also_conflict(cli: Invoke) -> None:
    conflict = SPECS / "bad" / "conflict"
    result = cli("validate", "--json", *sorted(conflict.iterdir()))
    assert result.exit_code == 1
    assert all(f["problems"][0]["rule"] == "conflict" for f in report(result)["files"])


def test_strictly_invalid_file_still_conflicts_like_at_runtime(cli: Invoke, tmp_path: Path) -> None:
    """A runtime loads a spec with a relative path, so its devices still clash with other files."""
    (tmp_path / "a.json").write_text(
        '{"cdiVersion": "0.3.0", "kind": "example.com/widget",'
        ' "devices": [{"name": "w0", "containerEdits": {"deviceNodes": [{"path": "dev/w0"}]}}]}'
    )
    write_spec(tmp_path, "b.json", "example.com/widget", "w0")
    files = {Path(f["path"]).name: f for f in report(cli("validate", "--json", tmp_path))["files"]}
    assert {p["rule"] for p in files["a.json"]["problems"]} == {"absolute-path", "conflict"}
    assert [p["rule"] for p in files["b.json"]["problems"]] == ["conflict"]
    assert files["b.json"]["valid"] is False


def test_priority_directories_shadow_without_error(cli: Invoke) -> None:
    etc, run = SPECS / "good" / "priority" / "etc", SPECS / "good" / "priority" / "run"
    result = cli("validate", "--json", etc, run)
    assert result.exit_code == 0
    files = {Path(f["path"]).parent.name: f for f in report(result)["files"]}
    [shadowed] = files["etc"]["problems"]
    assert (shadowed["rule"], shadowed["severity"]) == ("shadowed", "warning")
    assert str(run / "example-vpu.json") in shadowed["message"]
    assert files["run"]["problems"] == []


def test_json_report_shape(cli: Invoke) -> None:
    good = SPECS / "good" / "v0.3.0-fuse.json"
    bad = SPECS / "bad" / "env-format--no-equals.json"
    result = cli("validate", "--json", good, bad)
    assert result.exit_code == 1
    assert report(result) == {
        "valid": False,
        "errors": 1,
        "warnings": 0,
        "files": [
            {
                "path": str(good),
                "valid": True,
                "kind": "cdi-plugin.io/fuse",
                "cdiVersion": "0.3.0",
                "devices": 1,
                "problems": [],
            },
            {
                "path": str(bad),
                "valid": False,
                "kind": "example.com/widget",
                "cdiVersion": "0.3.0",
                "devices": 1,
                "problems": [
                    {
                        "pointer": "/devices/0/containerEdits/env/0",
                        "rule": "env-format",
                        "severity": "error",
                        "message": "invalid env entry 'WIDGET'",
                        "hint": "use NAME=VALUE",
                    }
                ],
            },
        ],
    }


def test_json_report_of_a_file_that_does_not_load(cli: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("{")
    [file] = report(cli("validate", "--json", path))["files"]
    assert file == {
        "path": str(path),
        "valid": False,
        "kind": None,
        "cdiVersion": None,
        "devices": None,
        "problems": [
            {"pointer": "", "rule": "syntax", "severity": "error", "hint": "",
             "message": "invalid JSON: line 1 column 2: Expecting property name enclosed in double quotes"}
        ],
    }  # fmt: skip


def test_text_report_of_an_invalid_file_shows_pointer_rule_and_hint(cli: Invoke) -> None:
    result = cli("validate", SPECS / "bad" / "version-too-low--mount-type.json")
    assert result.exit_code == 1
    text = result.stdout
    assert "/devices/0/containerEdits/mounts/0/type" in text
    assert "version-too-low" in text
    assert "mount 'type' needs cdiVersion 0.4.0, the spec declares 0.3.0" in text
    assert "set cdiVersion to at least 0.4.0" in text
    assert text.splitlines()[-1] == "1 file: 0 valid, 1 invalid"


def test_cdi_version_max(cli: Invoke) -> None:
    path = SPECS / "good" / "v0.6.0-annotations.json"
    assert cli("validate", path).exit_code == 0
    assert cli("validate", "--cdi-version-max", "0.6.0", path).exit_code == 0
    result = cli("validate", "--json", "--cdi-version-max", "0.5.0", path)
    assert result.exit_code == 1
    [problem] = report(result)["files"][0]["problems"]
    assert problem["rule"] == "version-above-max"
    assert (
        problem["message"]
        == "cdiVersion 0.6.0 is above the allowed maximum 0.5.0; needed by spec 'annotations'"
    )
    assert "podman 4.3" in problem["hint"]


@pytest.mark.parametrize("value", ["0.9.0", "v0.5.0", "0.1.0", ""])
def test_cdi_version_max_must_be_a_released_version(cli: Invoke, value: str) -> None:
    result = cli("validate", "--cdi-version-max", value, SPECS / "good")
    assert result.exit_code == 2
    assert "Invalid value for '--cdi-version-max'" in result.stderr


def test_usage_errors_exit_2(cli: Invoke) -> None:
    assert cli("validate", "--no-such-option").exit_code == 2
    assert cli("no-such-command").exit_code == 2
    assert cli("list", "--spec-dir", SPECS / "good" / "v0.3.0-fuse.json").exit_code == 2


def test_empty_directory(cli: Invoke, tmp_path: Path) -> None:
    result = cli("validate", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == f"no spec files found in {tmp_path}\n"
    empty = {"valid": True, "errors": 0, "warnings": 0, "files": []}
    assert report(cli("validate", "--json", tmp_path)) == empty


def test_files_runtimes_ignore_get_a_warning(cli: Invoke, tmp_path: Path) -> None:
    path = write_spec(tmp_path, "a.yml", "example.com/widget", "w0")
    result = cli("validate", "--json", path)
    assert result.exit_code == 0
    [problem] = report(result)["files"][0]["problems"]
    assert (problem["rule"], problem["severity"]) == ("ignored-suffix", "warning")


def test_a_file_in_a_spec_dir_reached_through_a_link_gets_a_warning(tmp_path: Path) -> None:
    """Runtimes read nothing from a spec directory that is a symbolic link: the file named through
    it is valid (its content is not at fault) but never read, as with a suffix runtimes ignore."""
    real = write_spec(tmp_path / "real", "gpu.json", "example.com/gpu", "card0")
    (tmp_path / "cdi").symlink_to("real")
    linked = tmp_path / "cdi" / "gpu.json"
    text, as_json, strict = (
        run_cdi_gen("validate", *args, linked) for args in ([], ["--json"], ["--strict"])
    )
    assert (text.returncode, as_json.returncode, strict.returncode) == (0, 0, 1)
    message = (
        f"runtimes ignore this file: its directory {tmp_path / 'cdi'} is a symbolic link, which their CDI "
        "library does not follow"
    )
    assert text.stdout.startswith(f"! {linked}  ")
    assert any(line.split()[:3] == ["-", "warning", "linked-dir"] for line in text.stdout.splitlines())
    [file] = report(as_json)["files"]
    assert (file["path"], file["valid"]) == (str(linked), True)
    assert [(p["rule"], p["severity"], p["message"]) for p in file["problems"]] == [
        ("linked-dir", "warning", message)
    ]
    assert report(run_cdi_gen("validate", "--json", real))["files"][0]["problems"] == []


def test_files_runtimes_never_read_conflict_with_no_other(cli: Invoke, tmp_path: Path) -> None:
    """Files that define the same device in one directory, named through a link to it (which
    runtimes do not follow) or with a suffix runtimes skip: no conflict, each file is checked on
    its own."""
    real = tmp_path / "real"
    for name in ("a.json", "b.json", "c.yml"):
        write_spec(real, name, "example.com/widget", "w0")
    (tmp_path / "link").symlink_to("real")
    linked = [tmp_path / "link" / "a.json", tmp_path / "link" / "b.json"]
    result = cli("validate", "--json", *linked)
    assert result.exit_code == 0, result.output
    assert [(f["path"], [p["rule"] for p in f["problems"]]) for f in report(result)["files"]] == [
        (str(path), ["linked-dir"]) for path in linked
    ]
    result = cli("validate", "--json", real / "c.yml", real / "a.json")
    assert result.exit_code == 0, result.output
    assert [(f["path"], [p["rule"] for p in f["problems"]]) for f in report(result)["files"]] == [
        (str(real / "c.yml"), ["ignored-suffix"]),
        (str(real / "a.json"), []),
    ]


def test_a_file_named_only_a_suffix_is_read_as_runtimes_read_it(cli: Invoke, tmp_path: Path) -> None:
    """The CDI Go library reads ``/etc/cdi/.yaml`` (its suffix is ``.yaml``): the file is checked
    as YAML and takes part in conflicts, like any other."""
    (tmp_path / ".yaml").write_text(
        "cdiVersion: 0.3.0\nkind: example.com/widget\ndevices:\n- name: w0\n"
        "  containerEdits:\n    env: [A=1]\n"
    )
    write_spec(tmp_path, "a.json", "example.com/widget", "w0")
    result = cli("validate", "--json", tmp_path)
    assert result.exit_code == 1, result.output
    assert [(Path(f["path"]).name, [p["rule"] for p in f["problems"]]) for f in report(result)["files"]] == [
        (".yaml", ["conflict"]),
        ("a.json", ["conflict"]),
    ]


def test_directories_read_only_what_runtimes_read(cli: Invoke, tmp_path: Path) -> None:
    write_spec(tmp_path, "a.json", "example.com/widget", "w0")
    (tmp_path / "b.yml").write_text("{")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text("{")
    result = cli("validate", "--json", tmp_path)
    assert result.exit_code == 0
    assert [Path(f["path"]).name for f in report(result)["files"]] == ["a.json"]


def test_validate_as_a_real_program() -> None:
    good = run_cdi_gen("validate", SPECS / "good")
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines()[-1] == f"{len(GOOD)} files: {len(GOOD)} valid, 0 invalid"
    bad = run_cdi_gen(
        "validate", "--json", SPECS / "bad" / "conflict", SPECS / "bad" / "no-devices--empty-list.json"
    )
    assert bad.returncode == 1
    assert bad.stderr == ""
    rules = [p["rule"] for f in json.loads(bad.stdout)["files"] for p in f["problems"]]
    assert rules == ["conflict", "conflict", "no-devices"]


@pytest.mark.parametrize("columns", [40, 80])
def test_on_a_narrow_terminal_each_problem_is_one_whole_line(tmp_path: Path, columns: int) -> None:
    """Pointers, rules and messages are not broken into a table's narrow columns: the terminal
    wraps each problem's line."""
    spec = {"cdiVersion": "v0.3.0", "kind": "acme.example/gpu",
            "devices": [{"name": "card0", "containerEdits": {"env": ["NO_VALUE"]}}]}  # fmt: skip
    (tmp_path / "gpu.json").write_text(json.dumps(spec))
    status, lines, _ = run_on_terminal("validate", tmp_path, columns=columns)
    assert status == 1
    assert (
        "  /devices/0/containerEdits/env/0: error env-format: invalid env entry 'NO_VALUE'; use NAME=VALUE"
        in lines
    )
    [prefix] = [line for line in lines if line.startswith("  /cdiVersion: warning version-prefix: ")]
    assert prefix.endswith("; write the bare version")


def test_a_host_node_given_by_two_vendors_kinds_is_a_warning_in_both_files(
    cli: Invoke, tmp_path: Path
) -> None:
    spec_dir = shared_node_dir(tmp_path)
    result = cli("validate", "--json", spec_dir)
    assert result.exit_code == 0, "a warning"
    problems = {Path(f["path"]).name: f["problems"] for f in report(result)["files"]}
    for name, other, other_file in (
        ("example.com/gpu=foo", "mycorp.com/gpu=bar", "mycorp.com-gpu.json"),
        ("mycorp.com/gpu=bar", "example.com/gpu=foo", "example.com-gpu.json"),
    ):
        message = (
            f"{name} gives the host node /dev/foo, which {other} ({spec_dir / other_file}) gives too, "
            "of another vendor: runtimes and device plugins hand the one device out under each name"
        )
        assert problems[f"{name.partition('/')[0]}-gpu.json"] == [
            {"pointer": "/devices/0/name", "rule": "shared-node", "severity": "warning", "message": message,
             "hint": "remove the specs of the vendor no longer used"}
        ]  # fmt: skip
    assert problems["example.com-igpu.json"] == []
    assert cli("validate", "--strict", spec_dir).exit_code == 1


def test_a_host_node_many_devices_give_names_a_few_of_them_in_each_warning(
    cli: Invoke, tmp_path: Path
) -> None:
    # Each device's warning names the others giving the node: all of them would make the report
    # grow with the square of the devices (thousands of devices, gigabytes).
    many = [f"d{i}" for i in range(60)]
    spec = {"cdiVersion": "0.3.0", "kind": "example.com/gpu", "devices": [
        {"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/foo"}]}} for n in many
    ]}  # fmt: skip
    (tmp_path / "example.json").write_text(json.dumps(spec))
    write_spec(tmp_path, "mycorp.json", "mycorp.com/gpu", "foo")
    result = cli("validate", "--json", tmp_path)
    assert result.exit_code == 0, "a warning"
    problems = {Path(f["path"]).name: f["problems"] for f in report(result)["files"]}
    [ours] = problems["mycorp.json"]
    givers = ", ".join(f"example.com/gpu={n} ({tmp_path / 'example.json'})" for n in sorted(many)[:5])
    assert ours["message"] == (
        f"mycorp.com/gpu=foo gives the host node /dev/foo, which {givers} and 55 more give too, "
        "of another vendor: runtimes and device plugins hand the one device out under each name"
    )
    # the devices of the node's own vendor are not among those "of another vendor"
    assert [p["message"] for p in problems["example.json"]] == [
        f"example.com/gpu={n} gives the host node /dev/foo, which mycorp.com/gpu=foo "
        f"({tmp_path / 'mycorp.json'}) gives too, of another vendor: runtimes and device plugins "
        "hand the one device out under each name"
        for n in sorted(many)
    ]


def test_a_host_node_given_by_a_vendor_and_its_subdomain_is_one_vendors_choice(
    cli: Invoke, tmp_path: Path
) -> None:
    # As NVIDIA's specs give /dev/nvidia0 as nvidia.com/gpu and management.nvidia.com/gpu; a
    # subdomain of another vendor, or two unrelated ones beside them, still count apart.
    write_spec(tmp_path, "nvidia.json", "nvidia.com/gpu", "nvidia0")
    write_spec(tmp_path, "management.json", "management.nvidia.com/gpu", "nvidia0")
    write_spec(tmp_path, "a.json", "a.example.com/card", "c0")
    write_spec(tmp_path, "b.json", "b.example.com/card", "c0")
    result = cli("validate", "--json", tmp_path)
    assert result.exit_code == 0
    rules = {Path(f["path"]).name: [p["rule"] for p in f["problems"]] for f in report(result)["files"]}
    assert rules == {
        "nvidia.json": [],
        "management.json": [],
        "a.json": ["shared-node"],
        "b.json": ["shared-node"],
    }
    listed = json.loads(cli("list", "--json", "--spec-dir", tmp_path).stdout)
    assert [s["qualifiedNames"] for s in listed["sharedNodes"]] == [
        ["a.example.com/card=c0", "b.example.com/card=c0"]
    ]
