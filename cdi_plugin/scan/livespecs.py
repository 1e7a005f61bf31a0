"""The built spec of each device class, kept in memory so that one device's event updates one entry.

After every scan, :func:`index_class` indexes each class's spec by the sysfs path of the device
behind each entry. :meth:`LiveSpec.update` then takes a device as udev reports it now (None: gone)
and adds, replaces or removes that one entry; :meth:`LiveSpec.render` then renders the file's bytes
from cached pieces. The cost of an update does not grow with the devices of the class; that of
rendering only by joining cached text.
The bytes equal what a rescan of the class would write.

Where one device's entry can depend on the others, a class is not indexed, and an update that
could change another entry raises :class:`Uncertain`; the watcher then rescans the class:

* classes with ``siblings``, an ``all`` device, companion nodes (edits that look up other nodes),
  top-level device nodes, or ``{index}`` in a template (positions shift when a device comes);
* a device whose naming candidate another device shares (adding it renames that one too, and
  removing it may rename the other back), or whose name another device already has;
* a device a rescan would refuse or warn about (hostile udev data, a node missing from /dev);
* the first device of a kind (a new file: a rescan checks every spec directory for foreign specs
  of the kind) and the files that are not exactly what was last written.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Device, Spec
from cdi_plugin.cdi.validate import check_spec
from cdi_plugin.cdi.version import EARLIEST, KNOWN_VERSIONS, minimum_version, version_key
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.errors import CdiPluginError, GenerateError
from cdi_plugin.generate.builder import BuiltDevice, BuiltSpec, Host, Notes, build_spec
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.match import matches
from cdi_plugin.generate.naming import candidate, describe
from cdi_plugin.store.registry import Stat

#: Stands for the devices in the JSON text of a spec until the devices' cached text replaces it.
_DEVICES = "@DEVICES@"


class Uncertain(CdiPluginError):
    """The event may change more than the device's own entry: rescan the class."""


def _uses_index(cls: DeviceClass) -> bool:
    templates = [s.template for s in cls.naming] + [cls.node.path] + cls.edits.templates()
    return any(p.key == "index" for t in templates for p in t.placeholders)


def indexable(cls: DeviceClass) -> bool:
    """Whether each device's entry of the class depends on that device alone."""
    return not (
        cls.siblings
        or cls.all_device
        or cls.edits.device_nodes
        or cls.class_edits.device_nodes
        or _uses_index(cls)
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """One device's part of a spec."""

    candidates: tuple[str | None, ...]  # what each naming strategy gives it
    device: Device
    built: BuiltDevice
    text: str  # the device's JSON, indented as in the spec file
    version: int  # the key of the lowest cdiVersion its features need


@dataclass(frozen=True, slots=True)
class Change:
    """A new state of the spec: None when the kind has no device left."""

    spec: BuiltSpec | None
    data: bytes | None


class LiveSpec:
    """One class's spec, entry by entry (sysfs path -> entry)."""

    def __init__(
        self, cls: DeviceClass, built: BuiltSpec, entries: dict[str, Entry], max_version: str | None
    ):
        self.cls = cls
        self.max_version = max_version
        self.top = built.spec.container_edits
        self.entries = entries
        self.by_name = {e.device.name: path for path, e in entries.items()}
        #: The names in order, and their entries: a device's entry is inserted where it belongs.
        self._names = sorted(self.by_name)
        self._ordered = [entries[self.by_name[n]] for n in self._names]
        self.counts = [Counter(e.candidates[j] for e in entries.values()) for j in range(len(cls.naming))]
        self.versions = Counter(e.version for e in entries.values())
        top = Spec(cdi_version=EARLIEST, kind=cls.kind, devices=(), container_edits=self.top)
        self.top_version = version_key(minimum_version(top))
        #: The digest of the file as last written, and its stat just after (None: not known).
        self.digest = ""
        self.stat: Stat | None = None

    @property
    def kind(self) -> str:
        return self.cls.kind

    def update(self, sys_path: str, device: DiscoveredDevice | None) -> bool:
        """Take ``device`` (at ``sys_path``; None: gone) as it is now; whether its entry changed
        (:meth:`render` gives the new spec). Raises :class:`Uncertain`, changing nothing."""
        return self.put(sys_path, self.entry_of(device))

    def entry_of(self, device: DiscoveredDevice | None) -> Entry | None:
        """The entry the class gives ``device`` on its own, whatever the other devices (None: no
        device, or one the class does not match); :meth:`put` takes it. Raises :class:`Uncertain`."""
        if device is None or not (device.subsystem and matches(self.cls.match, device)):
            return None
        candidates = self._candidates(device)
        if all(value is None for value in candidates):
            raise Uncertain(f"{describe(device)}: no name of its own")
        notes = Notes()
        try:
            single = build_spec(self.cls, [device], Host.of([device]), self.max_version, notes)
        except GenerateError as exc:
            raise Uncertain(str(exc)) from None
        if notes.warnings or notes.refused or single is None:
            raise Uncertain(f"{describe(device)}: a rescan explains what is wrong with it")
        if not check_spec(single.spec).valid:
            raise Uncertain(f"{describe(device)}: its entry is not valid")
        (entry,), (built,) = single.spec.devices, single.devices
        assert entry.name == next(value for value in candidates if value is not None)
        return Entry(candidates, entry, built, _text(entry), version_key(single.spec.cdi_version))

    def put(self, sys_path: str, new: Entry | None) -> bool:
        """Make ``new`` (from :meth:`entry_of`) the entry of the device at ``sys_path``; whether it
        changed. Raises :class:`Uncertain`, changing nothing, where it may change other entries."""
        old = self.entries.get(sys_path)
        if old is not None:
            for j, value in enumerate(old.candidates):
                if value is not None and self.counts[j][value] > 1:
                    raise Uncertain(f"{value!r} is shared with another device")
        if new is not None:
            self._check_name(sys_path, new.candidates, new.device.name, old)
        if new == old:
            return False
        if old is not None:
            self._drop(sys_path, old)
        if new is not None:
            self._add(sys_path, new)
        return True

    def _candidates(self, device: DiscoveredDevice) -> tuple[str | None, ...]:
        return tuple(candidate(self.cls, s.template, device, 0) for s in self.cls.naming)

    def _check_name(
        self, sys_path: str, candidates: tuple[str | None, ...], name: str | None, old: Entry | None
    ) -> None:
        """Raises :class:`Uncertain` when another device shares a naming candidate or the name."""
        for j, value in enumerate(candidates):
            if value is None:
                continue
            others = self.counts[j][value] - (old is not None and old.candidates[j] == value)
            if others:
                raise Uncertain(f"{value!r} is shared with another device")
        if name is None or self.by_name.get(name, sys_path) != sys_path:
            raise Uncertain(f"{sys_path}: no name of its own")

    def _name(self, device: DiscoveredDevice) -> tuple[tuple[str | None, ...], str]:
        """The device's naming candidates and its name, which no other device may share."""
        candidates = self._candidates(device)
        name = next((value for value in candidates if value is not None), None)
        self._check_name(device.sys_path, candidates, name, None)
        assert name is not None
        return candidates, name

    def _built(self, device: DiscoveredDevice, entry: Device, built: BuiltDevice) -> Entry:
        """The entry of a device as a scan built (and validated) it."""
        candidates, _ = self._name(device)
        spec = Spec(cdi_version=EARLIEST, kind=self.kind, devices=(entry,), container_edits=self.top)
        return Entry(candidates, entry, built, _text(entry), version_key(minimum_version(spec)))

    def _drop(self, sys_path: str, entry: Entry) -> None:
        del self.entries[sys_path]
        del self.by_name[entry.device.name]
        at = bisect.bisect_left(self._names, entry.device.name)
        del self._names[at], self._ordered[at]
        for j, value in enumerate(entry.candidates):
            if value is not None:
                self.counts[j][value] -= 1
                if not self.counts[j][value]:
                    del self.counts[j][value]
        self.versions[entry.version] -= 1
        if not self.versions[entry.version]:
            del self.versions[entry.version]

    def _add(self, sys_path: str, entry: Entry) -> None:
        self.entries[sys_path] = entry
        self.by_name[entry.device.name] = sys_path
        at = bisect.bisect_left(self._names, entry.device.name)
        self._names.insert(at, entry.device.name)
        self._ordered.insert(at, entry)
        for j, value in enumerate(entry.candidates):
            if value is not None:
                self.counts[j][value] += 1
        self.versions[entry.version] += 1

    def render(self) -> Change:
        """The spec and the file's bytes (JSON) as the entries stand."""
        if not self.entries:
            return Change(None, None)
        ordered = self._ordered
        version = KNOWN_VERSIONS[max(self.top_version, *self.versions)]
        devices = tuple(e.device for e in ordered)
        spec = Spec(cdi_version=version, kind=self.kind, devices=devices, container_edits=self.top)
        if self.max_version is not None and version_key(version) > version_key(self.max_version):
            raise Uncertain(f"{self.kind}: cdiVersion {version} is above the maximum")
        head = codec.spec_to_obj(dataclasses.replace(spec, devices=()))
        head["devices"] = [_DEVICES]
        before, after = json.dumps(head, indent=2, ensure_ascii=False).split(json.dumps(_DEVICES), 1)
        text = "".join([before, ",\n    ".join([e.text for e in ordered]), after, "\n"])
        built = BuiltSpec(self.cls, spec, tuple(e.built for e in ordered))
        return Change(built, text.encode())


def _text(device: Device) -> str:
    """The device as the spec file holds it: inside ``"devices": [...]``, four spaces in."""
    obj = codec.spec_to_obj(Spec(cdi_version=EARLIEST, kind="a/b", devices=(device,)))["devices"][0]
    return json.dumps(obj, indent=2, ensure_ascii=False).replace("\n", "\n    ")


def index_class(
    cls: DeviceClass,
    built: BuiltSpec | None,
    devices: Sequence[DiscoveredDevice],
    max_version: str | None,
    fmt: codec.Format,
) -> LiveSpec | None:
    """``cls``'s spec as a scan just built (and validated) it from ``devices`` (everything the scan
    discovered), entry by entry; None when the class cannot be updated device by device. The caller
    checks that :meth:`LiveSpec.render` gives the bytes the scan wrote."""
    if built is None or fmt != "json" or not indexable(cls):
        return None
    entries: dict[str, Entry] = {}
    live = LiveSpec(cls, built, entries, max_version)
    by_name = {d.name: (d, b) for d, b in zip(built.spec.devices, built.devices, strict=True)}
    try:
        for device in devices:
            if not (device.subsystem and matches(cls.match, device)):
                if not device.subsystem and device.devnode and matches(cls.match, device):
                    return None  # a node found by a devnode glob only: it has no sysfs path
                continue
            _, name = live._name(device)
            if name not in by_name:
                return None  # left out of the spec: a rescan explains why
            live._add(device.sys_path, live._built(device, *by_name[name]))
    except Uncertain:
        return None
    if set(live.by_name) != set(by_name):
        return None
    return live
