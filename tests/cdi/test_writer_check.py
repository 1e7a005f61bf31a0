"""The spec writer's check (:func:`check_spec`, no JSON Schema) finds what ``cdi-gen validate`` finds.

For any spec the model can hold, the problems of ``check_spec(spec)`` are those of
``validate_object(codec.spec_to_obj(spec))``, which adds the schema's problems where the semantic
rules found nothing: so the schema adds nothing to a spec the writer builds, and the writer need
not load jsonschema-rs.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from cdi_plugin.cdi import codec, validate
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.problems import Problem, Severity
from tests.cdi.helpers import doc
from tests.cdi.helpers import spec as make_spec
from tests.cdi.strategies import any_specs, mutated_specs

ROOT = Path(__file__).resolve().parents[2]
MANY = settings(deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])


def assert_same(spec: Spec, max_version: str | None = None) -> validate.Validation:
    full = validate.validate_object(codec.spec_to_obj(spec), max_version)
    writer = validate.check_spec(spec, max_version)
    assert [p for p in writer.problems if p.is_error] == [p for p in full.problems if p.is_error]
    assert writer.valid == full.valid
    assert writer.problems == full.problems, "the schema's warnings are semantic rules too"
    return writer


@MANY
@given(any_specs())
def test_any_spec_gets_the_same_problems_without_the_schema(spec: Spec) -> None:
    assert_same(spec, "0.8.0")


@MANY
@given(mutated_specs())
def test_a_spec_with_one_mistake_gets_the_same_verdict_without_the_schema(spec: Spec) -> None:
    assert_same(spec)


def edits_spec(**edits: Any) -> Spec:
    return make_spec("0.5.0", edits=edits)


NODE = "/devices/0/containerEdits/deviceNodes/0"
HOOK = "/devices/0/containerEdits/hooks/0"
HINT = "an absolute path, starting with '/'"
ABSOLUTE = "absolute-path"
#: Each rule the schema alone used to report: the spec, and the problem the semantic rules now give.
ADDED = {
    "relative device node path": (
        edits_spec(deviceNodes=[{"path": "dev/null"}]),
        Problem(f"{NODE}/path", ABSOLUTE, "relative device node path 'dev/null'", HINT),
    ),
    "relative mount containerPath": (
        edits_spec(mounts=[{"hostPath": "/a", "containerPath": "a"}]),
        Problem(
            "/devices/0/containerEdits/mounts/0/containerPath",
            ABSOLUTE,
            "relative mount containerPath 'a'",
            HINT,
        ),
    ),
    "relative hook path": (
        edits_spec(hooks=[{"hookName": "prestart", "path": "bin/hook"}]),
        Problem(f"{HOOK}/path", ABSOLUTE, "relative hook path 'bin/hook'", HINT),
    ),
    "4 permission letters": (
        edits_spec(deviceNodes=[{"path": "/dev/null", "permissions": "rrrr"}]),
        Problem(
            f"{NODE}/permissions",
            "device-node-permissions",
            "invalid device node permissions 'rrrr': more than 3 letters",
            "at most 3 of the letters r, w and m, e.g. rw; leave it out for rwm",
        ),
    ),
    "hook timeout 0": (
        edits_spec(hooks=[{"hookName": "prestart", "path": "/bin/hook", "timeout": 0}]),
        Problem(
            f"{HOOK}/timeout",
            "hook-timeout",
            "invalid hook timeout 0: the CDI specification wants 1 to 4294967295 seconds",
            "leave it out for no timeout",
        ),
    ),
    "hook timeout over uint32": (
        edits_spec(hooks=[{"hookName": "prestart", "path": "/bin/hook", "timeout": 2**32}]),
        Problem(
            f"{HOOK}/timeout",
            "hook-timeout",
            "invalid hook timeout 4294967296: the CDI specification wants 1 to 4294967295 seconds",
            "leave it out for no timeout",
        ),
    ),
    "vendor of 254 characters": (
        make_spec(kind="v" * 254 + "/gpu"),
        Problem(
            "/kind",
            "kind-format",
            f"invalid kind '{'v' * 80}'... (258 characters): the vendor has 254 characters, "
            "over the CDI specification's 253",
            "a vendor of at most 253 and a class of at most 63 characters",
        ),
    ),
    "class of 64 characters": (
        make_spec(kind="acme.example/" + "c" * 64),
        Problem(
            "/kind",
            "kind-format",
            f"invalid kind {'acme.example/' + 'c' * 64!r}: the class has 64 "
            "characters, over the CDI specification's 63",
            "a vendor of at most 253 and a class of at most 63 characters",
        ),
    ),
    "relative hostPath": (
        edits_spec(deviceNodes=[{"path": "/dev/null", "hostPath": "null"}]),
        Problem(
            f"{NODE}/hostPath",
            "relative-host-path",
            "relative device node hostPath 'null'",
            "an absolute path: runtimes on the CDI Go library look a relative one up from their own "
            "working directory",
            Severity.WARNING,
        ),
    ),
    "annotation key": (
        replace(make_spec("0.6.0"), annotations={"a b": "x"}),
        Problem(
            "/annotations/a b",
            "annotation-key",
            "invalid annotation key 'a b'",
            "a Kubernetes qualified name: optional DNS subdomain prefix and '/', then a name of at most 63 "
            "characters (the CDI Go library's annotation check, which runtimes skip when loading specs, "
            "rejects other keys)",
            Severity.WARNING,
        ),
    ),
}


@pytest.mark.parametrize("case", ADDED)
def test_the_rules_the_schema_alone_had_are_semantic(case: str) -> None:
    spec, problem = ADDED[case]
    assert problem in validate.strict_problems(spec)
    assert problem not in validate.runtime_problems(spec), "the runtime's rules stay the CDI Go library's"
    assert assert_same(spec).problems == [problem]


def test_uint32_range_and_above_1_for_a_hook_timeout() -> None:
    at_edges = edits_spec(
        hooks=[{"hookName": "prestart", "path": "/h", "timeout": t} for t in (1, 2**32 - 1)]
    )
    assert assert_same(at_edges).valid


def test_up_to_3_permission_letters_and_none() -> None:
    for perms in ("r", "rw", "rwm", "mmm", "none"):
        spec = edits_spec(deviceNodes=[{"path": "/dev/null", "permissions": perms}])
        assert assert_same(spec).valid, perms


def test_every_integer_out_of_range_is_reported_with_the_other_problems() -> None:
    """Decoding stops at the first; the rules still run on the rest, the same way for both."""
    nodes = [
        {"path": "dev/a", "uid": -1, "gid": 2**32, "major": 2**63},
        {"path": "/dev/b", "minor": -(2**63) - 1},
    ]
    obj = doc("0.7.0", edits={"deviceNodes": nodes, "additionalGids": [2**40]})
    spec = codec.spec_from_obj(obj, lenient=True)
    found = [(p.pointer, p.rule) for p in assert_same(spec).problems]
    assert found == [
        (f"{NODE}/major", "type"),
        (f"{NODE}/uid", "type"),
        (f"{NODE}/gid", "type"),
        ("/devices/0/containerEdits/deviceNodes/1/minor", "type"),
        ("/devices/0/containerEdits/additionalGids/0", "type"),
        (f"{NODE}/path", ABSOLUTE),
    ]
    assert validate.check_spec(spec).problems[1].message == (
        "-1 is out of range for an unsigned 32-bit integer (0 to 4294967295)"
    )
    assert validate.validate_object(obj).spec is None


@pytest.mark.parametrize(
    "edits",
    [
        {"mounts": [{"hostPath": "/a", "containerPath": "/b", "options": ["\udc80"]}]},
        {"hooks": [{"hookName": "prestart", "path": "/h", "args": ["x\udcff"]}]},
        {"intelRdt": {"l3CacheSchema": "\ud800"}},
    ],
)
def test_an_unencodable_string_anywhere_is_a_syntax_error(edits: dict[str, Any]) -> None:
    """Whether or not the schema looks at the string (it used to decide the verdict)."""
    result = assert_same(make_spec("0.7.0", edits=edits))
    assert [p.rule for p in result.problems] == ["syntax"]
    assert not result.valid


WRITER = """
import sys
import cdi_plugin.store.plan
loaded = sorted({"jsonschema_rs", "cdi_plugin.cdi.schema"} & set(sys.modules))
assert not loaded, loaded
from cdi_plugin.cdi import schema  # the configuration's check may load it; the spec schema stays unused
used = []
problems = schema.problems
schema.problems = lambda obj, name=schema.SPEC_SCHEMA: used.append(name) or problems(obj, name)

from cdi_plugin.discovery.model import StaticSource
from cdi_plugin.scan import ScanOptions
from cdi_plugin.scan.updates import BatchWork, DeviceEvent
from tests.generate.helpers import classes
from tests.generate.hosts import usb_tty

devices = [usb_tty(f"ttyUSB{i}", i, str(i + 1), serial=f"S{i}") for i in range(3)]
source = StaticSource(devices[:2])
cls = classes({"match": {"subsystem": "tty", "kernel": "ttyUSB*"}, "naming": ["serial"],
               "edits": {"env": ["PORT={devnode}"]}})
work = BatchWork(ScanOptions(output_dir=__import__("pathlib").Path(sys.argv[1]), spec_dirs=(),
                             runtime_dirs=()), source)
assert work.run(cls, None, [])[1] is None
source.devices.append(devices[2])
outcomes, error = work.run(cls, set(), [DeviceEvent(devices[2].sys_path, frozenset(work.live))])
assert error is None and [o.updated for o in outcomes] == [True], outcomes
print(schema.SPEC_SCHEMA in used)
"""


def test_writing_specs_never_runs_the_spec_schema(tmp_path: Any) -> None:
    """A fresh interpreter: the writer's module loads no JSON Schema; a scan and a one-device update
    (plan.encode_checked, LiveSpec._entry) write specs without checking them against the schema."""
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "False"
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["example.com-c0.json"]
    assert "ttyUSB2" in (tmp_path / "example.com-c0.json").read_text()
