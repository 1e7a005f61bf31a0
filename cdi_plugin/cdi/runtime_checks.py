"""Why a container runtime would not see a spec file, from the table of :mod:`.runtimes`.

:func:`refusals` is pure: a spec (as decoded), its file suffix and the syntax it parsed as in,
the problems a runtime has with it out. Errors mean the runtime drops the whole file (and with it
every device the file defines); warnings mean it reads the file but does not do all it says.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.cdi.runtimes import Runtime
from cdi_plugin.cdi.textparse import Format
from cdi_plugin.cdi.version import minimum_version, normalize, requirements, version_key


def ceiling(max_version: str | None, runtimes: Sequence[Runtime]) -> str | None:
    """The highest cdiVersion every one of ``runtimes`` reads, and at most ``max_version``."""
    tops = [r.max_version for r in runtimes] + ([max_version] if max_version else [])
    return min(tops, key=version_key) if tops else None


#: Between a runtime's label and the reason in the message of a file it drops.
DROPS = " drops this file: "


def _reads_only(runtime: Runtime) -> str:
    return f"reads only {' and '.join(runtime.suffixes)} files"


def format_refusal(runtime: Runtime, fmt: Format) -> str | None:
    """Why ``runtime`` reads no spec file of format ``fmt``, or None."""
    return None if f".{fmt}" in runtime.suffixes else f"{runtime.label} {_reads_only(runtime)}"


def _error(pointer: str, rule: str, runtime: Runtime, why: str, hint: str = "") -> Problem:
    return Problem(pointer, rule, f"{runtime.label}{DROPS}{why}", hint)


def reason(runtime: Runtime, problem: Problem) -> str:
    """The reason a problem of :func:`refusals` gives, without the runtime's label."""
    return problem.message.removeprefix(f"{runtime.label}{DROPS}")


def _version_problems(runtime: Runtime, spec: Spec) -> list[Problem]:
    declared = normalize(spec.cdi_version)
    if declared is None:
        return []  # every runtime drops it: a rule of the CDI library reports it
    out = []
    if spec.cdi_version != declared and not runtime.v_prefix:
        out.append(
            _error("/cdiVersion", "runtime-version", runtime, f"it rejects the 'v' in {spec.cdi_version!r}",
                   f"write {declared}")
        )  # fmt: skip
    if version_key(declared) > version_key(runtime.max_version):
        needed = minimum_version(spec)
        if version_key(needed) <= version_key(runtime.max_version):
            hint = f"declare {needed}: the spec needs no more"
        else:
            feature = max(requirements(spec), key=lambda r: version_key(r.version)).feature
            hint = f"the spec needs {needed} for {feature}: leave that out for {runtime.name}"
        out.append(
            _error("/cdiVersion", "runtime-version", runtime,
                   f"it reads cdiVersion up to {runtime.max_version}, the file declares {declared}", hint)
        )  # fmt: skip
    return out


def refusals(runtime: Runtime, spec: Spec, suffix: str, parsed_as: Format = "json") -> list[Problem]:
    """Why ``runtime`` drops a spec file (errors) or does not do all it says (warnings).

    ``suffix`` is the file's (``.json``), ``parsed_as`` the syntax its text parsed as (``yaml``
    for a ``.json`` file holding YAML). A spec the CDI Go library rejects is dropped by every
    runtime, for the reasons its rules give; this adds only what differs per runtime.
    """
    if suffix not in runtime.suffixes:
        hint = "write the spec as JSON into a .json file"
        return [_error("", "runtime-format", runtime, f"it {_reads_only(runtime)}", hint)]
    if suffix == ".json" and parsed_as == "yaml" and not runtime.yaml_in_json:
        return [_error("", "runtime-format", runtime, "the .json file holds YAML, which it does not parse",
                       "write the spec as JSON")]  # fmt: skip
    out = _version_problems(runtime, spec)

    def drop(pointer: str, why: str, hint: str) -> None:
        out.append(_error(pointer, "runtime-field", runtime, why, hint))

    for base, edits in spec.all_edits():
        for i, node in enumerate(edits.device_nodes or ()):
            at = f"{base}/deviceNodes/{i}"
            if node.permissions == "none" and not runtime.permissions_none:
                drop(f"{at}/permissions", "it rejects permissions 'none'",
                     "leave permissions out (rwm) or give the letters the container needs")  # fmt: skip
            if node.type is not None and node.type not in runtime.node_types:
                drop(f"{at}/type", f"it rejects device node type {node.type!r}", "c for a character device")
            if runtime.mode_0666 and node.file_mode is None and node.type != "p":
                out.append(
                    Problem(at, "runtime-ignored", f"{runtime.label} creates this node with mode 0666 (no "
                            "fileMode given)", "give fileMode (e.g. the host node's)", Severity.WARNING)
                )  # fmt: skip
        for i, hook in enumerate(edits.hooks or ()):
            if hook.hook_name not in runtime.hook_names:
                names = ", ".join(sorted(runtime.hook_names))
                drop(f"{base}/hooks/{i}/hookName", f"it rejects hook {hook.hook_name!r}", f"one of {names}")
        rdt = edits.intel_rdt
        for field, value in (("enableCMT", rdt and rdt.enable_cmt), ("enableMBM", rdt and rdt.enable_mbm)):
            if value is not None and runtime.rejects_cmt_mbm:
                drop(
                    f"{base}/intelRdt/{field}",
                    f"its library no longer knows intelRdt {field!r}",
                    "leave it out",
                )
        present = {"additionalGids": edits.additional_gids, "intelRdt": rdt, "netDevices": edits.net_devices}
        out += [
            Problem(
                f"{base}/{field}",
                "runtime-ignored",
                f"{runtime.label} ignores {field!r}",
                "",
                Severity.WARNING,
            )
            for field in runtime.ignores
            if present.get(field)
        ]
    return out
