"""The API server's validation of resource.k8s.io/v1 ResourceSlices, as strict as the server.

Written from the published rules (pkg/apis/resource/validation): names, counts and value limits.
``slice_problems`` returns every problem of one slice; ``pool_problems`` those across a pool's slices.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
VALUE_TYPES = ("int", "bool", "string", "version")
EFFECTS = ("None", "NoSchedule", "NoExecute")
SPEC_KEYS = {
    "driver",
    "pool",
    "nodeName",
    "nodeSelector",
    "allNodes",
    "perDeviceNodeSelection",
    "devices",
    "sharedCounters",
}
DEVICE_KEYS = {"name", "attributes", "capacity", "taints"}


def is_subdomain(value: str, limit: int = 253) -> bool:
    return 0 < len(value) <= limit and all(LABEL.fullmatch(p) for p in value.split("."))


def is_label(value: str) -> bool:
    return len(value) <= 63 and LABEL.fullmatch(value) is not None


def _qualified_name_problems(where: str, name: str) -> list[str]:
    prefix, slash, local = name.rpartition("/")
    problems = []
    if slash and not is_subdomain(prefix):
        problems.append(f"{where}: prefix {prefix!r} is not a DNS subdomain")
    if not (len(local) <= 32 and C_IDENT.fullmatch(local)):
        problems.append(f"{where}: {local!r} is not a C identifier of at most 32 characters")
    return problems


def _taint_problems(where: str, taint: dict[str, Any]) -> list[str]:
    problems = []
    key = taint.get("key", "")
    prefix, slash, name = key.rpartition("/")
    if (
        not key
        or (slash and not is_subdomain(prefix))
        or not (len(name) <= 63 and LABEL_NAME.fullmatch(name))
    ):
        problems.append(f"{where}.key: {key!r} is not a label name")
    value = taint.get("value", "")
    if value and not (len(value) <= 63 and LABEL_NAME.fullmatch(value)):
        problems.append(f"{where}.value: {value!r} is not a label value")
    if taint.get("effect") not in EFFECTS:
        problems.append(f"{where}.effect: {taint.get('effect')!r} not one of {EFFECTS}")
    if set(taint) - {"key", "value", "effect", "timeAdded"}:
        problems.append(
            f"{where}: unknown fields {sorted(set(taint) - {'key', 'value', 'effect', 'timeAdded'})}"
        )
    return problems


def _device_problems(where: str, device: dict[str, Any]) -> list[str]:
    problems = []
    if set(device) - DEVICE_KEYS:
        problems.append(f"{where}: unknown fields {sorted(set(device) - DEVICE_KEYS)}")
    name = device.get("name", "")
    if not is_label(name):
        problems.append(f"{where}.name: {name!r} is not a DNS label")
    attributes = device.get("attributes") or {}
    if len(attributes) + len(device.get("capacity") or {}) > 32:
        problems.append(f"{where}: more than 32 attributes and capacities")
    for key, value in attributes.items():
        at = f"{where}.attributes[{key}]"
        problems += _qualified_name_problems(at, key)
        set_types = [t for t in VALUE_TYPES if t in value]
        if len(set_types) != 1 or set(value) - set(VALUE_TYPES):
            problems.append(f"{at}: exactly one of {VALUE_TYPES} must be set, got {sorted(value)}")
            continue
        kind, v = set_types[0], value[set_types[0]]
        if kind == "int" and not (isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63):
            problems.append(f"{at}: int {v!r} is not an int64")
        if kind == "bool" and not isinstance(v, bool):
            problems.append(f"{at}: bool {v!r}")
        if kind in ("string", "version") and not (isinstance(v, str) and len(v.encode()) <= 64):
            problems.append(f"{at}: {kind} {v!r} longer than 64 bytes or not a string")
        if kind == "version" and not SEMVER.fullmatch(str(v)):
            problems.append(f"{at}: {v!r} is not semver 2.0.0")
    taints = device.get("taints") or []
    if len(taints) > 16:
        problems.append(f"{where}.taints: more than 16")
    for i, taint in enumerate(taints):
        problems += _taint_problems(f"{where}.taints[{i}]", taint)
    return problems


def slice_problems(obj: dict[str, Any]) -> list[str]:
    """Every reason the API server would refuse this ResourceSlice (empty when it accepts it)."""
    problems = []
    if obj.get("apiVersion") != "resource.k8s.io/v1" or obj.get("kind") != "ResourceSlice":
        problems.append(f"apiVersion/kind: {obj.get('apiVersion')}/{obj.get('kind')}")
    name = (obj.get("metadata") or {}).get("name", "")
    if not is_subdomain(name):
        problems.append(f"metadata.name: {name!r} is not a DNS subdomain")
    spec = obj.get("spec") or {}
    if set(spec) - SPEC_KEYS:
        problems.append(f"spec: unknown fields {sorted(set(spec) - SPEC_KEYS)}")
    driver = spec.get("driver", "")
    if not is_subdomain(driver.lower(), 63):
        problems.append(f"spec.driver: {driver!r} is not a DNS subdomain of at most 63 characters")
    pool = spec.get("pool") or {}
    pool_name = pool.get("name", "")
    if not (0 < len(pool_name) <= 253 and all(is_subdomain(p) for p in pool_name.split("/"))):
        problems.append(f"spec.pool.name: {pool_name!r} is not DNS subdomains joined by '/'")
    generation = pool.get("generation")
    if not (isinstance(generation, int) and generation >= 0):
        problems.append(f"spec.pool.generation: {generation!r} must be >= 0")
    count = pool.get("resourceSliceCount")
    if not (isinstance(count, int) and count > 0):
        problems.append(f"spec.pool.resourceSliceCount: {count!r} must be > 0")
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        problems.append(
            f"spec: exactly one of nodeName/nodeSelector/allNodes/perDeviceNodeSelection, got {chosen}"
        )
    if spec.get("nodeName") and not is_subdomain(spec["nodeName"]):
        problems.append(f"spec.nodeName: {spec['nodeName']!r} is not a DNS subdomain")
    devices = spec.get("devices") or []
    limit = 64 if any(d.get("taints") for d in devices) else 128
    if len(devices) > limit:
        problems.append(f"spec.devices: {len(devices)} devices, at most {limit}")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        problems += _device_problems(f"spec.devices[{i}]", device)
        if device.get("name") in seen:
            problems.append(f"spec.devices[{i}].name: {device.get('name')!r} duplicated")
        seen.add(device.get("name", ""))
    return problems


def pool_problems(slices: Sequence[dict[str, Any]]) -> list[str]:
    """Problems across the slices of one pool: each slice's, generations, count, unique device names."""
    problems = [f"{s['metadata']['name']}: {p}" for s in slices for p in slice_problems(s)]
    pools = {(s["spec"]["pool"]["name"], s["spec"]["pool"]["generation"]) for s in slices}
    if len(pools) != 1:
        problems.append(f"slices disagree on pool or generation: {sorted(pools)}")
    counts = {s["spec"]["pool"]["resourceSliceCount"] for s in slices}
    if counts != {len(slices)}:
        problems.append(f"resourceSliceCount {sorted(counts)} but {len(slices)} slices")
    names = [d["name"] for s in slices for d in s["spec"].get("devices") or []]
    if len(names) != len(set(names)):
        problems.append("a device name appears twice in the pool")
    return problems
