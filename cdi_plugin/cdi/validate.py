"""Spec validation: the runtime's rules, the project's stricter rules, and a whole-document check.

Every problem is an error or a warning (docs/validation.md has the table). An error means a runtime
built on the CDI Go library rejects the spec, or the spec breaks the CDI specification; a warning
means current runtimes load it but a known runtime or version does not, or that it is unwise.

* :func:`runtime_problems` applies exactly the rules of the CDI library that runtimes vendor: a
  spec with an error among them is dropped by containerd, CRI-O, podman and Docker; its warnings
  name the runtimes or library versions that read the spec differently. The registry uses only
  these, so it resolves names the way a runtime does and loads a spec that has only warnings.
* :func:`validate_bytes` and :func:`validate_object` are what ``cdi-gen validate`` and the spec
  writer run: strict parsing, the project's JSON Schema, the runtime rules and the rules a schema
  cannot express, all problems collected, at most one per JSON pointer and rule.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from cdi_plugin.cdi import codec, names
from cdi_plugin.cdi.model import ContainerEdits, Spec
from cdi_plugin.cdi.problems import Problem, Severity, dedupe, from_error
from cdi_plugin.cdi.version import check_version
from cdi_plugin.errors import InvalidNameError, SpecLoadError

HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
DEVICE_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
ANNOTATIONS_MAX_BYTES = 256 * 1024
_PERMISSIONS = re.compile(r"[rwm]*")
#: ``permissions: none`` came to the CDI Go library after its release v1.1.0.
RELEASED_LIBRARIES = "released CDI Go library (v1.1.0, in containerd 2.3, and older)"


def _warning(pointer: str, rule: str, message: str, hint: str) -> Problem:
    return Problem(pointer, rule, message, hint, Severity.WARNING)


def _empty_field(pointer: str, what: str) -> Problem:
    return _warning(pointer, "empty-field", f"empty {what}: the CDI Go library reads it as absent",
                    "leave the field out")  # fmt: skip


def _env_problems(base: str, env: Iterable[str]) -> list[Problem]:
    return [
        Problem(f"{base}/{i}", "env-format", f"invalid env entry {entry!r}", "use NAME=VALUE")
        for i, entry in enumerate(env)
        if entry.find("=") <= 0
    ]


def _edits_problems(base: str, edits: ContainerEdits) -> list[Problem]:
    """The CDI library's ``ContainerEdits.Validate``."""
    out = _env_problems(f"{base}/env", edits.env or ())
    for i, node in enumerate(edits.device_nodes or ()):
        at = f"{base}/deviceNodes/{i}"
        if not node.path:
            out.append(Problem(f"{at}/path", "device-node-path", "device node without a path"))
        optional = {"hostPath": node.host_path, "type": node.type, "permissions": node.permissions}
        for field, value in optional.items():
            if value == "":
                out.append(_empty_field(f"{at}/{field}", f"deviceNode '{field}'"))
        if node.type is not None and node.type not in DEVICE_NODE_TYPES:
            out.append(
                Problem(f"{at}/type", "device-node-type", f"invalid device node type {node.type!r}",
                        "b, c, u or p")
            )  # fmt: skip
        perms = node.permissions
        if perms is not None and perms != "none" and not _PERMISSIONS.fullmatch(perms):
            out.append(
                Problem(f"{at}/permissions", "device-node-permissions",
                        f"invalid device node permissions {perms!r}", "a combination of r, w and m")
            )  # fmt: skip
        if perms == "none":
            out.append(
                _warning(f"{at}/permissions", "permissions-none",
                         f"permissions 'none' is rejected by the {RELEASED_LIBRARIES}",
                         "leave it out (rwm) or give the letters the container needs")
            )  # fmt: skip
    for i, hook in enumerate(edits.hooks or ()):
        at = f"{base}/hooks/{i}"
        if hook.hook_name not in HOOK_NAMES:
            out.append(
                Problem(f"{at}/hookName", "hook-name", f"unknown hook name {hook.hook_name!r}",
                        "one of " + ", ".join(sorted(HOOK_NAMES)))
            )  # fmt: skip
        if not hook.path:
            out.append(Problem(f"{at}/path", "hook-path", "hook without a path"))
        out.extend(_env_problems(f"{at}/env", hook.env or ()))
    for i, mount in enumerate(edits.mounts or ()):
        at = f"{base}/mounts/{i}"
        if not mount.host_path:
            out.append(Problem(f"{at}/hostPath", "mount-path", "mount without a hostPath"))
        if not mount.container_path:
            out.append(Problem(f"{at}/containerPath", "mount-path", "mount without a containerPath"))
        if mount.type == "":
            out.append(_empty_field(f"{at}/type", "mount 'type'"))
    rdt = edits.intel_rdt
    if rdt is not None and rdt.clos_id == "":
        out.append(_empty_field(f"{base}/intelRdt/closID", "intelRdt 'closID'"))
    if rdt is not None and rdt.clos_id:
        closid = rdt.clos_id
        if closid != "/" and (
            closid in {".", ".."} or "/" in closid or "\n" in closid or len(closid.encode()) >= 4096
        ):
            out.append(
                Problem(f"{base}/intelRdt/closID", "intel-rdt-closid", f"invalid closID {closid!r}",
                        "'/' or a file name: not '.' or '..', no '/' or newline, under 4096 bytes")
            )  # fmt: skip
    nets = edits.net_devices or ()
    for i, net in enumerate(nets):
        for field, value in (("hostInterfaceName", net.host_interface_name), ("name", net.name)):
            if not value:
                out.append(Problem(f"{base}/netDevices/{i}/{field}", "net-device", f"empty {field}"))
    for field, values in (
        ("hostInterfaceName", [n.host_interface_name for n in nets]),
        ("name", [n.name for n in nets]),
    ):
        for value, count in Counter(values).items():
            if value and count > 1:
                i = values.index(value, values.index(value) + 1)
                out.append(
                    Problem(f"{base}/netDevices/{i}/{field}", "net-device", f"duplicate {field} {value!r}")
                )
    return out


def runtime_problems(spec: Spec) -> list[Problem]:
    """What a runtime's CDI library makes of the spec (``Spec.validate``): errors reject it."""
    out = check_version(spec)
    if spec.cdi_version.startswith("v") and not any(p.rule == "version-unknown" for p in out):
        out.append(
            _warning("/cdiVersion", "version-prefix", f"cdiVersion {spec.cdi_version!r} has a 'v' prefix: "
                     "the CDI Go library accepts it, iSulad rejects the spec", "write the bare version")
        )  # fmt: skip
    try:
        names.parse_kind(spec.kind)
    except InvalidNameError as exc:
        out.append(Problem("/kind", exc.rule, str(exc)))
    if spec.container_edits is not None:
        out.extend(_edits_problems("/containerEdits", spec.container_edits))
    if not spec.devices:
        out.append(Problem("/devices", "no-devices", "the spec defines no devices", "add at least one"))
    seen: dict[str, int] = {}
    for i, dev in enumerate(spec.devices):
        at = f"/devices/{i}"
        try:
            names.validate_device_name(dev.name)
        except InvalidNameError as exc:
            out.append(Problem(f"{at}/name", exc.rule, str(exc)))
        if dev.name in seen:
            out.append(
                Problem(f"{at}/name", "duplicate-device-name",
                        f"device name {dev.name!r} is also used by /devices/{seen[dev.name]}",
                        "device names must be unique within a spec")
            )  # fmt: skip
        seen.setdefault(dev.name, i)
        if dev.container_edits.is_empty():
            out.append(
                Problem(f"{at}/containerEdits", "empty-device-edits", "the device has no container edits",
                        "give it at least one device node, env entry, mount or hook")
            )  # fmt: skip
        out.extend(_edits_problems(f"{at}/containerEdits", dev.container_edits))
    return out


def strict_problems(spec: Spec, max_version: str | None = None) -> list[Problem]:
    """The project's rules beyond the schema and the runtime: the version ceiling, annotation sizes."""
    out = [p for p in check_version(spec, max_version) if p.rule == "version-above-max"]
    annotated = [("/annotations", spec.annotations)]
    annotated += [(f"/devices/{i}/annotations", d.annotations) for i, d in enumerate(spec.devices)]
    for at, values in annotated:
        size = sum(len(k.encode()) + len(v.encode()) for k, v in (values or {}).items())
        if size > ANNOTATIONS_MAX_BYTES:
            out.append(
                _warning(at, "annotation-size", f"annotations take {size} bytes, over the 256 KiB limit of "
                         "the CDI Go library's annotation check (runtimes load the spec without it)",
                         "keep the annotations small")
            )  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class Validation:
    """The outcome of validating one document; ``spec`` is set when it decodes strictly."""

    spec: Spec | None
    problems: list[Problem]

    @property
    def valid(self) -> bool:
        return self.spec is not None and not any(p.is_error for p in self.problems)


def validate_object(obj: Any, max_version: str | None = None, source: str = "<spec>") -> Validation:
    """All problems of a parsed document.

    Semantic problems come first; a schema problem is added only where none stands yet (the
    schema mostly restates a semantic rule, in vaguer words).
    An unknown field stops the runtime's loader, but the semantic rules still run on the rest
    (decoded leniently), so one pass reports everything. A string UTF-8 cannot encode (a lone
    surrogate, e.g. from bytes decoded with ``surrogateescape``) is reported, not raised.
    """
    try:
        return _validate_object(obj, max_version, source)
    except UnicodeEncodeError:
        where, what = codec.find_unencodable(obj) or ("", "string")
        return Validation(None, [Problem(where or "/", "syntax", f"a {what} {codec.UNPAIRED_SURROGATE}")])


def _validate_object(obj: Any, max_version: str | None, source: str) -> Validation:
    problems: list[Problem] = []
    spec = checked = None
    try:
        spec = checked = codec.spec_from_obj(obj, source)
    except SpecLoadError as exc:
        problems.append(from_error(exc))
        if exc.rule == "unknown-field":
            try:
                checked = codec.spec_from_obj(obj, source, lenient=True)
            except SpecLoadError:
                checked = None
    if checked is not None:
        problems += runtime_problems(checked) + strict_problems(checked, max_version)
    problems = dedupe(problems)
    taken = {p.pointer for p in problems}
    from cdi_plugin.cdi import schema  # here, so that runtime_problems alone (the plugin) never loads it

    problems += dedupe([p for p in schema.problems(obj) if p.pointer not in taken])
    return Validation(spec, problems)


def validate_bytes(
    data: bytes, source: str, fmt: codec.Format = "json", max_version: str | None = None
) -> Validation:
    """Parse and validate a spec file's contents."""
    try:
        obj, parsed_as = codec.parse(data, source, fmt)
    except SpecLoadError as exc:
        return Validation(None, [from_error(exc)])
    result = validate_object(obj, max_version, source)
    if parsed_as == "yaml" and result.problems:
        lines = codec.yaml_lines(data, {p.pointer for p in result.problems})
        result.problems[:] = [
            replace(p, message=f"line {lines[p.pointer]}: {p.message}") if p.pointer in lines else p
            for p in result.problems
        ]
    if parsed_as != fmt:
        result.problems.append(
            Problem("", "not-strict-json", "the file is not strict JSON, only YAML",
                    "runtimes read it through YAML, but JSON tools will not", Severity.WARNING)
        )  # fmt: skip
    return result
