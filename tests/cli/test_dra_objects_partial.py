"""``cdi-plugin dra-objects`` on a node where some kinds can have no objects: each is left out with
one warning naming it and why, every other kind's objects are printed, and the exit status is 1;
with ``--json``, an error is ``{"error": MESSAGE}`` on stdout as for cdi-gen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.cli.test_dra_objects_names import dra_objects, names_of, write_specs

GOOD = ["acme.com/gpu", "cdi-plugin.io/fuse"]
LONG_CLASS = "acme.com/" + "c" * 65
LONG_NAME = f"{'v' * 200}/{'c' * 60}"
SELECTOR = (
    "more than a ResourceSlice attribute value may have (64): the driver publishes its devices "
    "without it, so no DeviceClass selector can match them"
)


def _objects(stdout: str, as_json: bool) -> list[dict[str, Any]]:
    if as_json:
        listed = json.loads(stdout)
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
        items: list[dict[str, Any]] = listed["items"]
        return items
    return [o for o in yaml.safe_load_all(stdout) if o is not None]


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
def test_a_kind_that_can_have_no_objects_leaves_the_others_printed(tmp_path: Path, as_json: bool) -> None:
    write_specs(tmp_path, [*GOOD, LONG_CLASS, LONG_NAME, "Acme.com/Net_Dev", "acme.com/net-dev"])
    json_arg = ["--json"] if as_json else []
    result = dra_objects("--spec-dir", tmp_path, "--kind", "*/*", "--examples", *json_arg)
    assert result.returncode == 1
    objs = _objects(result.stdout, as_json)
    for obj in objs:
        assert kubernetes_validate.validate(obj, "1.36", strict=True) == "1.36"
    names = names_of(objs)
    assert names["DeviceClass"] == names["ResourceClaimTemplate"] == ["gpu.acme.com", "fuse.cdi-plugin.io"]
    assert names["Pod"] == ["gpu-dra-example", "fuse-dra-example"]
    assert names["ServiceAccount"] == ["cdi-plugin"], "the parts of no kind are printed too"
    shown_long = f"'{'v' * 80}'... (261 characters)"
    assert result.stderr.splitlines() == [
        "cdi-plugin: warning: left out kind 'Acme.com/Net_Dev': kind 'acme.com/net-dev' would have the "
        "same DeviceClass name, net-dev.acme.com",
        f"cdi-plugin: warning: left out kind '{LONG_CLASS}': its class has 65 characters, {SELECTOR}",
        "cdi-plugin: warning: left out kind 'acme.com/net-dev': kind 'Acme.com/Net_Dev' would have the "
        "same DeviceClass name, net-dev.acme.com",
        f"cdi-plugin: warning: left out kind {shown_long}: its DeviceClass name would have 261 "
        "characters, at most 253",
    ]


def test_a_kind_that_is_no_extended_resource_name_is_left_out_with_extended_resource(tmp_path: Path) -> None:
    write_specs(tmp_path, ["Vendor.example/gpu", *GOOD])
    result = dra_objects("--spec-dir", tmp_path, "--kind", "*/*", "--only", "classes", "--extended-resource")
    assert result.returncode == 1
    objs = _objects(result.stdout, as_json=False)
    assert [(o["metadata"]["name"], o["spec"]["extendedResourceName"]) for o in objs] == [
        ("gpu.acme.com", "acme.com/gpu"),
        ("fuse.cdi-plugin.io", "cdi-plugin.io/fuse"),
    ]
    assert result.stderr == (
        "cdi-plugin: warning: left out kind 'Vendor.example/gpu': not an extended resource name, so no "
        "extendedResourceName: the domain part must be a lowercase DNS subdomain (a-z, 0-9, '-' and '.')\n"
    )


def test_without_a_kind_left_out_the_status_is_0(tmp_path: Path) -> None:
    write_specs(tmp_path, GOOD)
    result = dra_objects("--spec-dir", tmp_path, "--kind", "*/*", "--only", "classes")
    assert (result.returncode, result.stderr) == (0, "")
    assert names_of(_objects(result.stdout, as_json=False)) == {
        "DeviceClass": ["gpu.acme.com", "fuse.cdi-plugin.io"]
    }


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--spec-dir", "{empty}"], 1,
         "no kind found in {empty}: run cdi-gen scan first, or name the directory with --spec-dir"),
        (["--spec-dir", "{empty}", "--kind", "acme.com/*"], 1,
         "--kind 'acme.com/*': no kind in {empty} matches it (no spec there)"),
        (["--driver-name", "Bad_Driver", "--only", "rbac"], 1,
         "driver name 'Bad_Driver': not a DNS subdomain"),
        (["--config", "{empty}/missing.yaml"], 1, "{empty}/missing.yaml: no such file or directory"),
        (["--only", "bogus"], 2, "Invalid value for '--only': 'bogus' is not one of"),
        (["--kind", "no-slash"], 2, "Invalid value for '--kind': 'no-slash' is not a kind"),
    ],
)  # fmt: skip
def test_json_errors_are_one_object_on_stdout(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    """The status and the line on stderr are those without --json."""
    given = [a.format(empty=tmp_path) for a in args]
    plain, as_json = dra_objects(*given), dra_objects("--json", *given)
    assert plain.returncode == as_json.returncode == code
    assert plain.stdout == ""
    assert as_json.stderr == plain.stderr
    assert "Traceback" not in as_json.stderr
    [line] = as_json.stdout.splitlines()
    error = json.loads(line)
    assert list(error) == ["error"]
    assert error["error"].startswith(message.format(empty=tmp_path))
    assert error["error"] in as_json.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--namespace", "--json", "--only", "rbac"], "namespace '--json': not a DNS label"),
        (["--only", "rbac", "--", "--json"], "Got unexpected extra argument (--json)"),
    ],
)
def test_json_as_a_value_or_an_argument_asks_for_no_json(args: list[str], message: str) -> None:
    """``--json`` given as another option's value, or after ``--``, is not the option: the error
    is only the line on stderr."""
    result = dra_objects(*args)
    assert result.returncode in (1, 2)
    assert result.stdout == ""
    assert message in result.stderr
