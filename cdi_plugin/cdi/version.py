"""Which ``cdiVersion`` a spec needs, from the features it uses (the CDI library's rules).

:func:`requirements` lists every use of a feature newer than 0.3.0 with its JSON pointer, so a
message can say which feature needs which version; :func:`minimum_version` is the highest of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import ascii_letters

from cdi_plugin.cdi.model import ContainerEdits, Spec
from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.cdi.runtimes import RUNTIMES
from cdi_plugin.wording import shown

KNOWN_VERSIONS = (
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
)  # fmt: skip
EARLIEST = "0.3.0"
LATEST = KNOWN_VERSIONS[-1]
#: The versions a spec may declare: a runtime's CDI library refuses those before :data:`EARLIEST`.
SUPPORTED_VERSIONS = KNOWN_VERSIONS[KNOWN_VERSIONS.index(EARLIEST) :]


def version_key(version: str) -> int:
    """Position of a known version (without ``v`` prefix) in release order."""
    return KNOWN_VERSIONS.index(version)


def normalize(version: str) -> str | None:
    """The known version a declared ``cdiVersion`` stands for (a ``v`` prefix is tolerated), or None."""
    bare = version[1:] if version.startswith("v") else version
    return bare if bare in KNOWN_VERSIONS else None


@dataclass(frozen=True, slots=True)
class Requirement:
    version: str
    pointer: str
    feature: str


def _edits_requirements(base: str, edits: ContainerEdits) -> list[Requirement]:
    out: list[Requirement] = []
    for i, m in enumerate(edits.mounts or ()):
        if m.type:
            out.append(Requirement("0.4.0", f"{base}/mounts/{i}/type", "mount 'type'"))
    for i, n in enumerate(edits.device_nodes or ()):
        if n.host_path:
            out.append(Requirement("0.5.0", f"{base}/deviceNodes/{i}/hostPath", "deviceNode 'hostPath'"))
    rdt = edits.intel_rdt
    if rdt is not None:
        out.append(Requirement("0.7.0", f"{base}/intelRdt", "'intelRdt'"))
        if rdt.schemata is not None:
            out.append(Requirement("1.1.0", f"{base}/intelRdt/schemata", "intelRdt 'schemata'"))
        if rdt.enable_monitoring:
            out.append(
                Requirement("1.1.0", f"{base}/intelRdt/enableMonitoring", "intelRdt 'enableMonitoring'")
            )
    if edits.additional_gids:
        out.append(Requirement("0.7.0", f"{base}/additionalGids", "'additionalGids'"))
    if edits.net_devices:
        out.append(Requirement("1.1.0", f"{base}/netDevices", "'netDevices'"))
    return out


def requirements(spec: Spec) -> list[Requirement]:
    """Every feature use that needs more than 0.3.0, in document order."""
    out: list[Requirement] = []
    if spec.annotations:
        out.append(Requirement("0.6.0", "/annotations", "spec 'annotations'"))
    _vendor, _sep, class_ = spec.kind.partition("/")
    if "." in class_:
        out.append(Requirement("0.6.0", "/kind", f"a '.' in the class of kind {shown(spec.kind)}"))
    for i, dev in enumerate(spec.devices):
        if dev.name and dev.name[0] not in ascii_letters:
            out.append(Requirement("0.5.0", f"/devices/{i}/name", "a device name starting with a digit"))
        if dev.annotations:
            out.append(Requirement("0.6.0", f"/devices/{i}/annotations", "device 'annotations'"))
    for base, edits in spec.all_edits():
        out.extend(_edits_requirements(base, edits))
    return out


def minimum_version(spec: Spec) -> str:
    """The lowest ``cdiVersion`` whose features cover the spec."""
    needed = [version_key(r.version) for r in requirements(spec)]
    return KNOWN_VERSIONS[max(needed)] if needed else EARLIEST


def runtimes_below(version: str) -> list[str]:
    """Runtimes (of :data:`~cdi_plugin.cdi.runtimes.RUNTIMES`) that cannot read a spec of ``version``."""
    key = version_key(version)
    return [r.title for r in RUNTIMES if version_key(r.max_version) < key]


def check_version(spec: Spec, maximum: str | None = None) -> list[Problem]:
    """Problems with the declared ``cdiVersion``: unknown, lower than the features need, above ``maximum``."""
    declared = normalize(spec.cdi_version)
    if declared is None:
        return [
            Problem(
                "/cdiVersion",
                "version-unknown",
                f"unknown cdiVersion {shown(spec.cdi_version)}",
                f"use one of {', '.join(SUPPORTED_VERSIONS)}",
            )
        ]
    problems: list[Problem] = []
    if version_key(declared) < version_key(EARLIEST):
        problems.append(
            Problem(
                "/cdiVersion",
                "version-unknown",
                f"cdiVersion {declared} is a pre-release that no runtime accepts",
                f"the earliest released version is {EARLIEST}",
            )
        )
    needed = requirements(spec)
    minimum = KNOWN_VERSIONS[max((version_key(r.version) for r in needed), default=version_key(EARLIEST))]
    for req in needed:
        if version_key(req.version) > version_key(declared):
            problems.append(
                Problem(
                    req.pointer,
                    "version-too-low",
                    f"{req.feature} needs cdiVersion {req.version}, the spec declares {spec.cdi_version}",
                    f"set cdiVersion to at least {minimum} or drop the feature",
                )
            )
    for base, edits in spec.all_edits():
        rdt = edits.intel_rdt
        for field, value in (("enableCMT", rdt and rdt.enable_cmt), ("enableMBM", rdt and rdt.enable_mbm)):
            if value is None:
                continue
            if version_key(declared) >= version_key("1.1.0"):
                problems.append(
                    Problem(
                        f"{base}/intelRdt/{field}",
                        "removed-field",
                        f"intelRdt '{field}' was removed in cdiVersion 1.1.0",
                        "use 'enableMonitoring', or declare a cdiVersion from 0.7.0 to 1.0.0",
                    )
                )
            else:
                problems.append(
                    Problem(
                        f"{base}/intelRdt/{field}",
                        "removed-field",
                        f"intelRdt '{field}' is unknown to runtimes built with CDI 1.1.0 or later "
                        "(e.g. containerd 2.3), which reject the whole spec",
                        "drop the field unless every runtime that reads this spec is older",
                        Severity.WARNING,
                    )
                )
    if maximum is not None and version_key(declared) > version_key(maximum):
        why = (
            "; needed by " + max(needed, key=lambda r: version_key(r.version)).feature
            if needed and minimum == declared
            else ""
        )
        dropped = ", ".join(runtimes_below(declared))
        problems.append(
            Problem(
                "/cdiVersion",
                "version-above-max",
                f"cdiVersion {declared} is above the allowed maximum {maximum}{why}",
                f"runtimes that would drop this spec: {dropped}" if dropped else "",
            )
        )
    return problems
