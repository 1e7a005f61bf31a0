"""Spec validation: the runtime's rules, the project's stricter rules, and a whole-document check.

Every problem is an error or a warning (docs/validation.md has the table). An error means a runtime
built on the CDI Go library rejects the spec, or the spec breaks the CDI specification; a warning
means current runtimes load it but a known runtime or version does not, or that it is unwise.

* :func:`runtime_problems` applies exactly the rules of the CDI library that runtimes vendor: a
  spec with an error among them is dropped by containerd, CRI-O, podman and Docker; its warnings
  name the runtimes or library versions that read the spec differently. The registry uses only
  these, so it resolves names the way a runtime does and loads a spec that has only warnings.
* :func:`validate_bytes` and :func:`validate_object` are what ``cdi-gen validate`` runs: strict
  parsing, the runtime rules, the project's stricter rules, then the project's JSON Schema where
  those found nothing; all problems collected, at most one per JSON pointer and rule.
* :func:`check_spec` is the spec writer's check: the same rules on a built spec, without the JSON
  Schema (the writer never loads jsonschema-rs); its problems are :func:`validate_object`'s.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cdi_plugin.cdi import codec, names
from cdi_plugin.cdi.codec import INT64, UINT32
from cdi_plugin.cdi.model import Annotations, ContainerEdits, Spec
from cdi_plugin.cdi.problems import Problem, Severity, dedupe, from_error, pointer_join
from cdi_plugin.cdi.version import check_version
from cdi_plugin.errors import InvalidNameError, SpecLoadError
from cdi_plugin.wording import shown

HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
DEVICE_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
ANNOTATIONS_MAX_BYTES = 256 * 1024
_PERMISSIONS = re.compile(r"[rwm]*")
#: The CDI specification's lengths of a kind's vendor and class (the CDI Go library has none).
VENDOR_MAX, CLASS_MAX = 253, 63
#: A Kubernetes qualified name: optional DNS subdomain prefix and '/', a name of 1 to 63 characters.
_ANNOTATION_KEY = re.compile(
    r"(([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
)
#: ``permissions: none`` came to the CDI Go library after its release v1.1.0.
RELEASED_LIBRARIES = "released CDI Go library (v1.1.0, in containerd 2.3, and older)"


def _warning(pointer: str, rule: str, message: str, hint: str) -> Problem:
    return Problem(pointer, rule, message, hint, Severity.WARNING)


def _empty_field(pointer: str, what: str) -> Problem:
    return _warning(pointer, "empty-field", f"empty {what}: the CDI Go library reads it as absent",
                    "leave the field out")  # fmt: skip


def _env_problems(base: str, env: Iterable[str]) -> list[Problem]:
    return [
        Problem(f"{base}/{i}", "env-format", f"invalid env entry {shown(entry)}", "use NAME=VALUE")
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
                Problem(f"{at}/type", "device-node-type", f"invalid device node type {shown(node.type)}",
                        "b, c, u or p")
            )  # fmt: skip
        perms = node.permissions
        if perms is not None and perms != "none" and not _PERMISSIONS.fullmatch(perms):
            out.append(
                Problem(f"{at}/permissions", "device-node-permissions",
                        f"invalid device node permissions {shown(perms)}", "a combination of r, w and m")
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
                Problem(f"{at}/hookName", "hook-name", f"unknown hook name {shown(hook.hook_name)}",
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
                Problem(f"{base}/intelRdt/closID", "intel-rdt-closid", f"invalid closID {shown(closid)}",
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
                    Problem(
                        f"{base}/netDevices/{i}/{field}", "net-device", f"duplicate {field} {shown(value)}"
                    )
                )
    return out


def runtime_problems(spec: Spec) -> list[Problem]:
    """What a runtime's CDI library makes of the spec (``Spec.validate``): errors reject it."""
    out = check_version(spec)
    if spec.cdi_version.startswith("v") and not any(p.rule == "version-unknown" for p in out):
        out.append(
            _warning("/cdiVersion", "version-prefix",
                     f"cdiVersion {shown(spec.cdi_version)} has a 'v' prefix: the CDI Go library accepts it "
                     "from v0.7 on (containerd 1.7.20, 2.x, CRI-O, Docker), "
                     "iSulad, podman 4.3 and containerd 1.7.0-1.7.19 reject the spec",
                     "write the bare version")
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
                        f"device name {shown(dev.name)} is also used by /devices/{seen[dev.name]}",
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


def _relative(pointer: str, what: str, path: str | None) -> list[Problem]:
    if not path or path.startswith("/"):
        return []
    return [
        Problem(
            pointer, "absolute-path", f"relative {what} {shown(path)}", "an absolute path, starting with '/'"
        )
    ]


def _strict_edits_problems(base: str, edits: ContainerEdits) -> list[Problem]:
    """The CDI specification's rules on edits that the CDI Go library does not apply."""
    out = []
    for i, node in enumerate(edits.device_nodes or ()):
        at = f"{base}/deviceNodes/{i}"
        out += _relative(f"{at}/path", "device node path", node.path)
        host = node.host_path
        if host and not host.startswith("/"):
            out.append(
                _warning(f"{at}/hostPath", "relative-host-path",
                         f"relative device node hostPath {shown(host)}",
                         "an absolute path: runtimes on the CDI Go library look a relative one up from their "
                         "own working directory")
            )  # fmt: skip
        perms = node.permissions
        if perms and perms != "none" and len(perms) > 3 and _PERMISSIONS.fullmatch(perms):
            out.append(
                Problem(f"{at}/permissions", "device-node-permissions",
                        f"invalid device node permissions {shown(perms)}: more than 3 letters",
                        "at most 3 of the letters r, w and m, e.g. rw; leave it out for rwm")
            )  # fmt: skip
    for i, hook in enumerate(edits.hooks or ()):
        out += _relative(f"{base}/hooks/{i}/path", "hook path", hook.path)
        timeout = hook.timeout
        if timeout is not None and not 1 <= timeout <= UINT32.hi and INT64.out_of_range(timeout) is None:
            out.append(
                Problem(f"{base}/hooks/{i}/timeout", "hook-timeout",
                        f"invalid hook timeout {timeout}: the CDI specification wants 1 to {UINT32.hi} "
                        "seconds", "leave it out for no timeout")
            )  # fmt: skip
    for i, mount in enumerate(edits.mounts or ()):
        out += _relative(f"{base}/mounts/{i}/containerPath", "mount containerPath", mount.container_path)
    return out


def _annotation_problems(at: str, values: Annotations) -> list[Problem]:
    out = [
        _warning(pointer_join(at, key), "annotation-key", f"invalid annotation key {shown(key)}",
                 "a Kubernetes qualified name: optional DNS subdomain prefix and '/', then a name of at most "
                 "63 characters (the CDI Go library's annotation check, which runtimes skip when loading "
                 "specs, rejects other keys)")
        for key in sorted(values)
        if not _ANNOTATION_KEY.fullmatch(key)
    ]  # fmt: skip
    size = sum(len(k.encode()) + len(v.encode()) for k, v in values.items())
    if size > ANNOTATIONS_MAX_BYTES:
        out.append(
            _warning(at, "annotation-size", f"annotations take {size} bytes, over the 256 KiB limit of "
                     "the CDI Go library's annotation check (runtimes load the spec without it)",
                     "keep the annotations small")
        )  # fmt: skip
    return out


def _kind_length_problems(kind: str) -> list[Problem]:
    try:
        parsed = names.parse_kind(kind)
    except InvalidNameError:
        return []  # a runtime rule reports it
    for what, value, limit in (("vendor", parsed.vendor, VENDOR_MAX), ("class", parsed.class_, CLASS_MAX)):
        if len(value) > limit:
            return [
                Problem("/kind", "kind-format", f"invalid kind {shown(kind)}: the {what} has {len(value)} "
                        f"characters, over the CDI specification's {limit}",
                        f"a vendor of at most {VENDOR_MAX} and a class of at most {CLASS_MAX} characters")
            ]  # fmt: skip
    return []


def strict_problems(spec: Spec, max_version: str | None = None) -> list[Problem]:
    """The project's rules beyond the runtime's: the version ceiling, the CDI specification's
    length limits of a kind, absolute paths, at most 3 permission letters, hook timeouts,
    annotation keys and sizes."""
    out = [p for p in check_version(spec, max_version) if p.rule == "version-above-max"]
    out.extend(_kind_length_problems(spec.kind))
    if spec.annotations is not None:
        out.extend(_annotation_problems("/annotations", spec.annotations))
    for i, dev in enumerate(spec.devices):
        if dev.annotations is not None:
            out.extend(_annotation_problems(f"/devices/{i}/annotations", dev.annotations))
    for base, edits in spec.all_edits():
        out.extend(_strict_edits_problems(base, edits))
    return out


def _range_problems(spec: Spec) -> list[Problem]:
    """Integers a Go field cannot hold, in document order (decoding stops at the first)."""
    out = []
    for base, edits in spec.all_edits():
        values: list[tuple[str, int | None, codec.IntRange]] = []
        for i, n in enumerate(edits.device_nodes or ()):
            at = f"{base}/deviceNodes/{i}"
            values += [(f"{at}/major", n.major, INT64), (f"{at}/minor", n.minor, INT64),
                       (f"{at}/fileMode", n.file_mode, UINT32), (f"{at}/uid", n.uid, UINT32),
                       (f"{at}/gid", n.gid, UINT32)]  # fmt: skip
        values += [(f"{base}/hooks/{i}/timeout", h.timeout, INT64) for i, h in enumerate(edits.hooks or ())]
        values += [
            (f"{base}/additionalGids/{i}", g, UINT32) for i, g in enumerate(edits.additional_gids or ())
        ]
        for at, value, bounds in values:
            wrong = None if value is None else bounds.out_of_range(value)
            if wrong:
                out.append(Problem(at, "type", wrong))
    return out


@dataclass(frozen=True, slots=True)
class Validation:
    """The outcome of validating one document; ``spec`` is set when it decodes strictly."""

    spec: Spec | None
    problems: list[Problem]
    #: The syntax the text parsed as (``yaml`` for a ``.json`` file holding YAML).
    syntax: codec.Format = "json"

    @property
    def valid(self) -> bool:
        return self.spec is not None and not any(p.is_error for p in self.problems)


def validate_object(obj: Any, max_version: str | None = None, source: str = "<spec>") -> Validation:
    """All problems of a parsed document.

    Semantic problems come first; a schema problem is added only where none stands yet (the
    schema restates semantic rules, in vaguer words: for a document :func:`codec.spec_to_obj`
    makes, it adds no problem, which ``tests/cdi/test_writer_check.py`` checks).
    An unknown field or an integer out of range stops the runtime's loader, but the semantic rules
    still run on the rest (decoded leniently), so one pass reports everything. A string UTF-8
    cannot encode (a lone surrogate, e.g. from bytes decoded with ``surrogateescape``) is reported
    alone.
    """
    try:
        result: Validation | None = _validate_object(obj, max_version, source)
    except UnicodeEncodeError:
        result = None
    if result is not None and result.spec is not None and _encodable(result.spec):
        return result  # every string of the document is in the spec
    found = codec.find_unencodable(obj)
    if found is None and result is not None:
        return result
    return _unencodable(*(found or ("", "string")))


def _unencodable(where: str, what: str) -> Validation:
    return Validation(None, [Problem(where or "/", "syntax", f"a {what} {codec.UNPAIRED_SURROGATE}")])


def _validate_object(obj: Any, max_version: str | None, source: str) -> Validation:
    problems: list[Problem] = []
    spec = checked = None
    try:
        spec = checked = codec.spec_from_obj(obj, source)
    except SpecLoadError as exc:
        problems.append(from_error(exc))
        if exc.rule in {"unknown-field", "type"}:
            try:
                checked = codec.spec_from_obj(obj, source, lenient=True)
            except SpecLoadError:
                checked = None
    if checked is not None:
        problems += _semantic_problems(checked, max_version, ranges=spec is None)
    problems = dedupe(problems)
    taken = {p.pointer for p in problems}
    if checked is not None:
        problems += [p for p in _integral_numbers(obj) if p.pointer not in taken]
    from cdi_plugin.cdi import schema  # here, so that the plugin and the spec writer never load it

    problems += dedupe([p for p in schema.problems(obj) if p.pointer not in taken])
    return Validation(spec, problems)


def _integral_numbers(value: Any, ptr: str = "") -> list[Problem]:
    """Integers written as 1.0 or 1e2 in a parsed document (a spec holds no other numbers)."""
    if isinstance(value, float) and value.is_integer():
        why = "the CDI Go library reads it as one, a reader that takes it as written may not"
        what = f"integer {int(value)} written with a fraction or an exponent"
        return [_warning(ptr, "integer-format", f"{what}: {why}", f"write {int(value)}")]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [p for key, item in items for p in _integral_numbers(item, pointer_join(ptr, key))]


def _semantic_problems(spec: Spec, max_version: str | None, ranges: bool) -> list[Problem]:
    out = _range_problems(spec) if ranges else []
    return out + runtime_problems(spec) + strict_problems(spec, max_version)


def check_spec(spec: Spec, max_version: str | None = None) -> Validation:
    """What :func:`validate_object` finds in ``codec.spec_to_obj(spec)``, without the JSON Schema
    pass (jsonschema-rs) and without encoding and decoding: the spec writer's check.

    The problems and ``valid`` are those of :func:`validate_object`: for such a document the
    semantic rules find everything the schema would.
    """
    if not _encodable(spec):
        return _unencodable(*(codec.find_unencodable(codec.spec_to_obj(spec)) or ("", "string")))
    problems = dedupe(_semantic_problems(spec, max_version, ranges=True))
    out_of_range = any(p.rule == "type" for p in problems)  # decoding the document would fail
    return Validation(None if out_of_range else spec, problems)


def _encodable(spec: Spec) -> bool:
    texts: list[str] = []
    _collect_texts(spec, texts)
    try:
        "".join(texts).encode()
    except UnicodeEncodeError:
        return False
    return True


_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _collect_texts(value: Any, out: list[str]) -> None:
    """Every string and key in a model object (a dataclass of :mod:`cdi_plugin.cdi.model`)."""
    fields = _FIELDS.get(type(value))
    if fields is None:
        fields = _FIELDS[type(value)] = operator.attrgetter(*type(value).__slots__)
    for item in fields(value):
        if item is None or isinstance(item, int):
            continue
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, tuple):
            for entry in item:
                if isinstance(entry, str):
                    out.append(entry)
                elif not isinstance(entry, int):
                    _collect_texts(entry, out)
        elif isinstance(item, Mapping):
            out += item
            out += item.values()
        else:
            _collect_texts(item, out)


def validate_bytes(
    data: bytes, source: str, fmt: codec.Format = "json", max_version: str | None = None
) -> Validation:
    """Parse and validate a spec file's contents."""
    try:
        obj, parsed_as = codec.parse(data, source, fmt)
    except SpecLoadError as exc:
        return Validation(None, [from_error(exc)])
    result = _validate_object(obj, max_version, source)  # parsing refuses unencodable strings
    if parsed_as == "yaml" and result.problems:
        lines = codec.yaml_lines(data, {p.pointer for p in result.problems})
        result.problems[:] = [
            replace(p, message=f"line {lines[p.pointer]}: {p.message}") if p.pointer in lines else p
            for p in result.problems
        ]
    extra = codec.extra_document_line(data) if parsed_as == "yaml" else None
    if extra is not None:
        result.problems.append(
            _warning("", "extra-document", f"line {extra}: runtimes read only the first YAML document "
                     "of a file and ignore the rest", "one spec per file")
        )  # fmt: skip
    if parsed_as != fmt:
        result.problems.append(
            Problem("", "not-strict-json", "the file is not strict JSON, only YAML",
                    "runtimes on the CDI Go library read it through YAML; iSulad and JSON tools do not",
                    Severity.WARNING)
        )  # fmt: skip
    return replace(result, syntax=parsed_as)
