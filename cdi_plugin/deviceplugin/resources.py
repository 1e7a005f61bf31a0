"""Pure mapping from the inventory's devices to kubelet resources and device IDs (the catalog).

* One extended resource per served CDI kind, named after the kind (``vendor/class``), provided the
  name passes the kubelet's extended-resource check (:func:`resource_name_problem`).
* One device per CDI device, its ID the CDI device name; with ``replicas`` N > 1 the IDs are
  ``<name>#0`` .. ``<name>#<N-1>``. ``#`` cannot occur in a CDI device name, so a replica ID never
  equals another device's name. IDs stay at most 63 characters: when ``<name>#<i>`` would be
  longer, the name is cut and tagged with a hash of the full name (``<cut>~<8 hex>#<i>``), which
  keeps it stable across restarts and unique.
* Aggregate devices are not advertised: a device named ``all``, by the convention of CDI
  generators (NVIDIA, AMD), stands for every other device of its kind, so advertising it would let
  the kubelet hand out a device twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cdi_plugin.cdi.names import natural_key, short_hash
from cdi_plugin.inventory.record import ServedDevice

MAX_DEVICE_ID = 63
AGGREGATE_DEVICE_NAMES = frozenset({"all"})
REPLICA_SEPARATOR = "#"

_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def resource_name_problem(name: str) -> str | None:
    """Why the kubelet would refuse ``name`` as an extended resource name, or None if it accepts it.

    The kubelet's ``IsExtendedResourceName``: a ``/``, no ``kubernetes.io/``, no ``requests.``
    prefix, and ``requests.<name>`` must be a qualified name (lowercase DNS subdomain prefix of at
    most 253 characters, name part of at most 63).
    """
    if "/" not in name:
        return "it has no '/' (a domain prefix is required)"
    if "kubernetes.io/" in name:
        return "names containing 'kubernetes.io/' are reserved for Kubernetes"
    if name.startswith("requests."):
        return "it must not start with 'requests.'"
    prefix, _, part = f"requests.{name}".partition("/")
    if "/" in part:
        return "it has more than one '/'"
    if len(prefix) > 253:
        return f"the domain part is {len(prefix) - 9} characters long, at most 244 are allowed"
    if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        return "the domain part must be a lowercase DNS subdomain (a-z, 0-9, '-' and '.')"
    if len(part) > 63:
        return f"the part after '/' is {len(part)} characters long, at most 63 are allowed"
    if not _QUALIFIED_NAME_PART.fullmatch(part):
        return "the part after '/' must start and end with a letter or digit"
    return None


def replica_ids(device_name: str, replicas: int) -> list[str]:
    """The kubelet device IDs of one CDI device shared by ``replicas`` containers."""
    if replicas <= 1:
        return [device_name]
    ids = []
    for i in range(replicas):
        suffix = f"{REPLICA_SEPARATOR}{i}"
        if len(device_name) + len(suffix) <= MAX_DEVICE_ID:
            ids.append(device_name + suffix)
        else:
            tag = f"~{short_hash(device_name, 8)}"
            ids.append(device_name[: MAX_DEVICE_ID - len(tag) - len(suffix)] + tag + suffix)
    return ids


@dataclass(frozen=True, slots=True)
class AdvertisedDevice:
    id: str
    qualified_name: str
    #: 0-based replica index; 0 for an unshared device.
    replica: int


@dataclass(frozen=True, slots=True)
class Resource:
    name: str
    kind: str
    replicas: int
    devices: tuple[AdvertisedDevice, ...]


@dataclass(frozen=True, slots=True)
class Note:
    """Why something was not advertised; ``key`` identifies it so it is logged once."""

    key: str
    message: str


@dataclass(frozen=True, slots=True)
class Catalog:
    resources: Mapping[str, Resource] = field(default_factory=dict)
    notes: tuple[Note, ...] = ()


def device_ids(device: ServedDevice, replicas: int) -> tuple[tuple[str, ...], Note | None]:
    """The device IDs of one device, or none and why it is not advertised."""
    name, cdi_name = device.name, device.cdi_name
    if name in AGGREGATE_DEVICE_NAMES:
        return (), Note(
            f"aggregate:{cdi_name}",
            f"not advertising {cdi_name}: a device named {name!r} stands for "
            f"all devices of its kind and would let one device be allocated twice",
        )
    if len(name) > MAX_DEVICE_ID:
        return (), Note(
            f"long:{cdi_name}",
            f"skipping {cdi_name}: the device name is {len(name)} characters "
            f"long, the kubelet accepts device IDs of at most {MAX_DEVICE_ID}",
        )
    return tuple(replica_ids(name, replicas)), None


def clash_note(kind: str, cdi_name: str, replica: int, device_id: str, holder: str) -> Note:
    return Note(
        f"clash:{kind}:{device_id}",
        f"skipping {cdi_name} replica {replica}: device ID {device_id!r} is already used by {holder}",
    )


def kind_note(kind: str) -> Note | None:
    """Why a kind is not advertised, or None."""
    problem = resource_name_problem(kind)
    if problem is None:
        return None
    return Note(f"kind:{kind}", f"skipping kind {kind}: not a valid extended resource name: {problem}")


def build_catalog(devices: Iterable[ServedDevice], replicas_for: Callable[[str], int]) -> Catalog:
    """The resources and device IDs of the inventory's ``devices`` (one resource per kind)."""
    by_kind: dict[str, list[ServedDevice]] = {}
    for device in devices:
        by_kind.setdefault(device.kind, []).append(device)
    resources: dict[str, Resource] = {}
    notes: list[Note] = []
    for kind in sorted(by_kind):
        skipped = kind_note(kind)
        if skipped is not None:
            notes.append(skipped)
            continue
        replicas = max(1, replicas_for(kind))
        advertised: dict[str, AdvertisedDevice] = {}
        for device in sorted(by_kind[kind], key=lambda d: natural_key(d.name)):
            ids, note = device_ids(device, replicas)
            if note is not None:
                notes.append(note)
            for i, device_id in enumerate(ids):
                if device_id in advertised:
                    holder = advertised[device_id].qualified_name
                    notes.append(clash_note(kind, device.cdi_name, i, device_id, holder))
                    continue
                advertised[device_id] = AdvertisedDevice(device_id, device.cdi_name, i)
        resources[kind] = Resource(kind, kind, replicas, tuple(advertised.values()))
    return Catalog(MappingProxyType(resources), tuple(notes))
