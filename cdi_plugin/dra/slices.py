"""ResourceSlices for one node's pool: devices, attributes, taints, splitting and generations.

Pure functions on plain dicts in the shape of ``resource.k8s.io/v1`` (the API client module sends
them as they are). One pool, named after the node, holds every served device. The API allows at
most 128 devices per slice, 64 when any device of the slice has taints, so the pool is split into
as many slices as that needs; all slices of the pool carry the same generation and
``resourceSliceCount``. When what is published differs from what should be, the generation goes
up by one and every slice is rewritten, so a reader never mixes two generations' devices. Each
pair of driver and node names its slices apart from every other pair (:func:`slice_name`).

Health: an unhealthy device keeps its place and gets a ``NoSchedule`` taint ``<driver>/unhealthy``
when the cluster supports device taints; otherwise it is withdrawn from the pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdi_plugin.cdi.names import short_hash
from cdi_plugin.dra.inventory import ServedDevice
from cdi_plugin.dra.names import SUBDOMAIN_MAX, device_names

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64
#: The API server keeps a pool's generation as an int64: past it, the count starts again at 0 (the
#: slices of the highest generation, as readers take them, are all rewritten or deleted).
GENERATION_MAX = 2**63 - 1
ATTRIBUTE_VALUE_MAX = 64
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
TAINT_EFFECT = "NoSchedule"

Obj = dict[str, Any]


def taint_key(driver: str) -> str:
    return f"{driver}/unhealthy"


def fits(value: str) -> bool:
    """Whether ``value`` is a string attribute the API server accepts: at most 64 bytes (it counts
    the bytes of the UTF-8 text, not characters)."""
    return len(value.encode("utf-8", "surrogatepass")) <= ATTRIBUTE_VALUE_MAX


def attributes(device: ServedDevice) -> Obj:
    """The attributes of one device; a string longer than the API allows is left out, never cut
    (a cut serial or ID would select another device)."""
    vendor, _, class_ = device.kind.partition("/")
    udev = device.udev
    strings = {
        "kind": device.kind,
        "vendor": vendor,
        "class": class_,
        "subsystem": udev.subsystem,
        "driver": udev.driver,
        "vendorID": udev.vendor_id,
        "modelID": udev.model_id,
        "serial": udev.serial,
        PCI_BUS_ID: udev.pci_address,
    }
    out: Obj = {key: {"string": value} for key, value in strings.items() if value is not None and fits(value)}
    if device.numa_node is not None:
        out["numaNode"] = {"int": device.numa_node}
    return out


def device_entries(driver: str, devices: Iterable[ServedDevice], *, taints: bool) -> list[Obj]:
    """Slice entries sorted by name; unhealthy devices tainted (``taints``) or left out."""
    devices = list(devices)
    names = device_names(d.cdi_name for d in devices)
    entries: list[Obj] = []
    for d in devices:
        if not d.healthy and not taints:
            continue
        entry: Obj = {"name": names[d.cdi_name], "attributes": attributes(d)}
        if not d.healthy:
            entry["taints"] = [{"key": taint_key(driver), "effect": TAINT_EFFECT}]
        entries.append(entry)
    return sorted(entries, key=lambda e: str(e["name"]))


def split(entries: Sequence[Obj]) -> list[list[Obj]]:
    """Consecutive chunks within the per-slice limit; at least one (possibly empty) chunk."""
    chunks: list[list[Obj]] = [[]]
    for entry in entries:
        chunk = chunks[-1]
        tainted = any("taints" in e for e in [*chunk, entry])
        if len(chunk) >= (MAX_DEVICES_WITH_TAINTS if tainted else MAX_DEVICES):
            chunks.append([])
        chunks[-1].append(entry)
    return chunks


def slice_name(driver: str, node: str, index: int) -> str:
    """The object name of slice ``index`` of the pool of ``driver`` on ``node``:
    ``<node>-<driver>-<hash>-<index>``, where the hash is 8 hex digits of the SHA-256 of
    ``<driver>/<node>``. A DNS subdomain of at most 253 characters: when longer, node and driver
    are cut, the hash and index kept.

    The same for the same pair after every restart. Two pairs share names only if both their
    ``<node>-<driver>`` (up to the cut) and their hashes agree: 1 in 4 billion for two given
    pairs. Without the hash, driver ``x.io`` on node ``a-b`` and driver ``b-x.io`` on node ``a``
    both named their first slice ``a-b-x.io-0``.
    """
    tail = f"-{short_hash(f'{driver}/{node}')}-{index}"
    return f"{node}-{driver}"[: SUBDOMAIN_MAX - len(tail)].rstrip("-.") + tail


def legacy_slice_name(driver: str, node: str, index: int) -> str:
    """The name earlier releases gave slice ``index``: ``<node>-<driver>-<index>`` (cut with a
    hash past 253 characters), which pairs could share."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= SUBDOMAIN_MAX:
        return name
    tail = f"-{short_hash(name)}-{index}"
    return name[: SUBDOMAIN_MAX - len(tail)].rstrip("-.") + tail


def kept_names(pool: Pool, stored: Collection[str]) -> tuple[str, ...]:
    """The name of each of the pool's slices: :func:`slice_name`, but where the pair's slice of
    that index is stored under its :func:`legacy_slice_name`, that one, also when the slice is
    stored under both names. So an instance of an earlier release, running beside this one during
    an update, wants the same slices and the two do not delete each other's; the stored slices of
    this pair are its own (listed by driver and node), never another pair's that reads alike."""
    out = []
    for index in range(len(pool.chunks)):
        legacy = legacy_slice_name(pool.driver, pool.node, index)
        out.append(legacy if legacy in stored else slice_name(pool.driver, pool.node, index))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Pool:
    """The slices of one node's pool as they should be."""

    driver: str
    node: str
    chunks: tuple[tuple[Obj, ...], ...]
    node_uid: str = ""  # when known, the Node owns the slices (deleted with it)
    names: tuple[str, ...] = ()  # of the slices, when not their slice_name (kept_names)

    def _metadata(self, index: int) -> Obj:
        name = self.names[index] if index < len(self.names) else slice_name(self.driver, self.node, index)
        meta: Obj = {"name": name}
        if self.node_uid:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node,
                    "uid": self.node_uid,
                    "controller": True,
                }
            ]
        return meta

    def slices(self, generation: int) -> list[Obj]:
        count = len(self.chunks)
        return [
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": self._metadata(i),
                "spec": {
                    "driver": self.driver,
                    "nodeName": self.node,
                    "pool": {"name": self.node, "generation": generation, "resourceSliceCount": count},
                    "devices": list(chunk),
                },
            }
            for i, chunk in enumerate(self.chunks)
        ]


def build_pool(
    driver: str, node: str, devices: Mapping[str, ServedDevice] | Iterable[ServedDevice], *, taints: bool
) -> Pool:
    served = devices.values() if isinstance(devices, Mapping) else devices
    chunks = split(device_entries(driver, served, taints=taints))
    return Pool(driver, node, tuple(tuple(c) for c in chunks))


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send to bring the published slices to the pool: creates, updates, deletes (by name)."""

    generation: int
    create: tuple[Obj, ...] = ()
    update: tuple[Obj, ...] = ()  # each carries the stored object's resourceVersion
    delete: tuple[Obj, ...] = ()  # the stored objects

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _device_content(device: Obj) -> Obj:
    """What this driver sets in a device entry: the server's additions (taints' ``timeAdded``) left out."""
    out = {k: v for k, v in device.items() if k in ("name", "attributes", "taints") and v}
    if "taints" in out:
        out["taints"] = [
            {k: v for k, v in taint.items() if k != "timeAdded" and v} for taint in out["taints"]
        ]
    return out


def content(obj: Obj) -> tuple[str, Any]:
    """What this driver writes in a slice, to compare: its name, slice count and device entries."""
    spec = obj["spec"]
    devices = [_device_content(d) for d in spec.get("devices") or []]
    return obj["metadata"]["name"], (spec["pool"].get("resourceSliceCount"), devices)


def plan(pool: Pool, existing: Sequence[Obj]) -> Plan:
    """Compare ``existing`` (this node's and driver's stored slices) with ``pool``.

    When the slices of the highest stored generation already hold what they should, only older
    slices left over (a write that failed after the new generation was complete) are deleted.
    Otherwise the generation is the highest stored one plus one, every wanted slice is created or
    updated with it, and stored slices not wanted any more (surplus, or this release's name of a
    slice also stored under an earlier release's: :func:`kept_names`) are deleted. Every write
    carries a generation above every stored slice, so readers, who take the highest generation
    only, keep a whole pool until the first write and lose nothing to the deletions when they
    come last (as the publisher sends them).
    """

    def generation_of(obj: Obj) -> int:
        return int(obj["spec"]["pool"].get("generation", 0))

    pool = dataclasses.replace(pool, names=kept_names(pool, {o["metadata"]["name"] for o in existing}))
    current = max(map(generation_of, existing), default=0)
    latest = [o for o in existing if generation_of(o) == current]
    if sorted(map(content, latest)) == sorted(map(content, pool.slices(current))):
        return Plan(current, delete=tuple(o for o in existing if generation_of(o) != current))
    generation = current + 1 if existing and current < GENERATION_MAX else 0
    stored = {o["metadata"]["name"]: o for o in existing}
    create: list[Obj] = []
    update: list[Obj] = []
    for obj in pool.slices(generation):
        old = stored.pop(obj["metadata"]["name"], None)
        if old is None:
            create.append(obj)
        else:
            obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            update.append(obj)
    return Plan(generation, tuple(create), tuple(update), tuple(stored.values()))


def taints_dropped(pool: Pool, stored: Sequence[Obj]) -> bool:
    """Whether the API server stored our tainted devices without their taints (DRADeviceTaints off)."""
    tainted = {str(e["name"]) for chunk in pool.chunks for e in chunk if e.get("taints")}
    kept = {str(d["name"]) for s in stored for d in s["spec"].get("devices") or [] if d.get("taints")}
    found = {str(d["name"]) for s in stored for d in s["spec"].get("devices") or []}
    return bool(tainted & found - kept)
