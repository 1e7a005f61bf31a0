"""Device-by-device updates write exactly what a rescan would, and do not enumerate the host.

Each step adds, removes or changes one USB serial adapter of a recorded host and hands the
watcher's batch work that one device's event; the spec files it leaves must equal, byte for byte,
those of a full scan of the same host into an empty directory. Serial numbers come from a small
pool, so names collide and the updates fall back to rescans too.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdi_plugin.cdi.model import Spec
from cdi_plugin.discovery.model import DiscoveredDevice, StaticSource
from cdi_plugin.errors import SpecWriteError
from cdi_plugin.scan import ScanOptions, livespecs, run_scan
from cdi_plugin.scan import updates as updates_module
from cdi_plugin.scan.livespecs import indexable
from cdi_plugin.scan.updates import MAX_DEVICES, BatchWork, DeviceEvent
from cdi_plugin.store import plan as plan_module
from cdi_plugin.store.plan import ConflictError
from cdi_plugin.store.registry import Stat, file_stat
from cdi_plugin.store.writer import apply
from tests.generate.helpers import classes
from tests.generate.hosts import misc, usb_tty
from tests.scan.helpers import Counting
from tests.watch.helpers import device_names

CLASSES = classes(
    {  # updated device by device
        "match": {"subsystem": "tty", "kernel": "ttyUSB*"},
        "naming": ["serial", "path"],
        "edits": {"env": ["PORT={devnode}", "NAME={name}", "MODEL={property:ID_MODEL}"]},
    },
    {"match": {"subsystem": "tty", "kernel": "ttyUSB*"}, "naming": ["kernel"]},  # likewise
    # rescanned
    {"match": {"subsystem": "tty", "kernel": "ttyUSB*"}, "naming": ["kernel"], "allDevice": True},
    {"match": {"subsystem": "misc", "kernel": "fuse"}, "naming": ["kernel"]},  # no event touches it
)
KINDS = frozenset(c.kind for c in CLASSES)
PORTS = 6
SERIALS = ["A1", "B2", "C3", None]


def adapter(i: int, serial: str | None, model: str | None) -> DiscoveredDevice:
    device = usb_tty(f"ttyUSB{i}", i, str(i + 1), serial=serial)
    if model is not None:
        device = dataclasses.replace(device, properties={**device.properties, "ID_MODEL": model})
    return device


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.json"))}


def options(out: Path) -> ScanOptions:
    return ScanOptions(output_dir=out, spec_dirs=(), runtime_dirs=(), skip_refused=True)


steps = st.lists(
    st.tuples(
        st.integers(0, PORTS - 1), st.sampled_from(SERIALS), st.sampled_from([None, "FT232R", "CP2102"])
    ),
    min_size=1,
    max_size=25,
)


def test_only_the_all_device_class_is_not_indexed() -> None:
    assert [indexable(c) for c in CLASSES] == [True, True, False, True]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, present=st.lists(st.booleans(), min_size=PORTS, max_size=PORTS))
def test_updates_write_what_a_rescan_would(
    tmp_path_factory: Any, steps: list[Any], present: list[bool]
) -> None:
    """A step (i, serial, model) toggles adapter i: plugged in with that serial and model when it
    was absent, unplugged when it was present with the same serial, else changed to them."""
    out, fresh = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("fresh")
    host: dict[int, DiscoveredDevice] = {
        i: adapter(i, SERIALS[i % len(SERIALS)], None) for i in range(PORTS) if present[i]
    }
    source = StaticSource([misc("fuse", 229), *host.values()])
    work = BatchWork(options(out), source)
    outcomes, error = work.run(CLASSES, None, [])
    assert error is None
    for i, serial, model in steps:
        before = host.get(i)
        if before is not None and before.attributes == adapter(i, serial, None).attributes:
            del host[i]
        else:
            host[i] = adapter(i, serial, model)
        source.devices = [misc("fuse", 229), *host.values()]
        sys_path = adapter(i, None, None).sys_path
        enumerations = source.enumerations
        outcomes, error = work.run(CLASSES, set(), [DeviceEvent(sys_path, KINDS - {"example.com/c3"})])
        assert error is None
        rescanned = source.enumerations - enumerations
        if before is not None and host:  # c1 (named by kernel name) keeps its file: an update
            assert any(o.updated and "example.com/c1" in (o.scope or ()) for o in outcomes)
        assert rescanned == sum(not o.updated for o in outcomes), "an update enumerates nothing"
        reference = StaticSource(source.devices)
        run_scan(options(fresh), reference, CLASSES)
        assert files(out) == files(fresh)


def test_adding_a_device_to_an_indexed_class_enumerates_nothing(tmp_path: Path) -> None:
    indexed = CLASSES[:2]
    source = StaticSource([adapter(i, f"S{i}", None) for i in range(100)])
    work = BatchWork(options(tmp_path), source)
    _, error = work.run(indexed, None, [])
    assert error is None
    assert set(work.live) == {c.kind for c in indexed}
    enumerations = source.enumerations
    source.devices.append(adapter(100, "S100", None))
    outcomes, error = work.run(
        indexed, set(), [DeviceEvent(adapter(100, None, None).sys_path, frozenset(work.live))]
    )
    assert error is None
    assert source.enumerations == enumerations
    assert [(o.updated, sorted(o.scope or ())) for o in outcomes] == [(True, sorted(work.live))]
    assert [f.action for f in outcomes[0].report.files] == ["changed", "changed"]


def test_an_update_sorts_nothing_and_hands_each_file_over_once_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries are kept in name order as devices come and go: rendering the spec after one
    device's event does not sort the class's names again. The file is read and hashed before the
    first update only: later ones know it by the stat taken just after their last rename (only
    the new bytes are hashed, for the record). Each file is handed over with that stat."""
    indexed = CLASSES[1:2]
    source = StaticSource([adapter(i, f"S{i}", None) for i in range(0, 200, 2)])
    work = BatchWork(options(tmp_path), source)
    _, error = work.run(indexed, None, [])
    assert error is None

    def no_sorting(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("sorted() called while rendering")

    monkeypatch.setattr(livespecs, "sorted", no_sorting, raising=False)
    hashed: list[int] = []
    for module in (plan_module, updates_module):

        def counted(data: bytes, digest: Any = module.digest) -> str:
            hashed.append(len(data))
            return str(digest(data))

        monkeypatch.setattr(module, "digest", counted)
    read: list[str] = []
    read_spec = plan_module.read_spec_bytes

    def counted_read(path: Path) -> bytes:
        read.append(path.name)
        return read_spec(path)

    monkeypatch.setattr(plan_module, "read_spec_bytes", counted_read)
    placed: list[tuple[str, list[str]]] = []
    for i in (51, 199, 1):
        source.devices.append(adapter(i, f"S{i}", None))
        event = DeviceEvent(adapter(i, None, None).sys_path, frozenset(work.live))

        def tell(path: Path, spec: Spec | None, stat: Stat | None) -> None:
            assert spec is not None
            assert stat == file_stat(path)
            placed.append((path.name, [d.name for d in spec.devices]))

        outcomes, error = work.run(indexed, set(), [event], tell)
        assert error is None
        assert [o.updated for o in outcomes] == [True]
    monkeypatch.undo()
    assert len(hashed) == 2 + 1 + 1
    assert read == [CLASSES[1].kind.replace("/", "-") + ".json"] * 2  # planned, then checked again
    fresh = tmp_path / "fresh"
    run_scan(options(fresh), StaticSource(source.devices), indexed)
    assert files(tmp_path) == files(fresh)
    names = [json.loads(data)["devices"] for data in files(fresh).values()]
    assert [n for _, n in placed][-1] == [d["name"] for d in names[0]]
    assert len(placed) == 3


def test_a_burst_of_devices_is_rescanned_by_class(tmp_path: Path) -> None:
    source = StaticSource([adapter(i, f"S{i}", None) for i in range(MAX_DEVICES + 1)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[:1], None, [])
    enumerations = source.enumerations
    events = [DeviceEvent(d.sys_path, frozenset({CLASSES[0].kind})) for d in source.devices]
    outcomes, error = work.run(CLASSES[:1], set(), events)
    assert error is None
    assert source.enumerations == enumerations + 1, "one rescan, not one update per device"
    assert [o.updated for o in outcomes] == [False]


def test_a_spec_file_changed_behind_the_watchers_back_is_left_to_a_rescan(tmp_path: Path) -> None:
    source = StaticSource([adapter(i, f"S{i}", None) for i in range(3)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[1:2], None, [])
    spec = tmp_path / "example.com-c1.json"
    spec.write_text(spec.read_text().replace("ttyUSB0", "mine"))  # edited: no longer cdi-gen's
    source.devices.append(adapter(3, "S3", None))
    outcomes, error = work.run(
        CLASSES[1:2], set(), [DeviceEvent(adapter(3, None, None).sys_path, frozenset({CLASSES[1].kind}))]
    )
    assert outcomes == []
    assert isinstance(error, ConflictError), error  # what a rescan says: the update wrote nothing
    assert "mine" in spec.read_text()
    assert CLASSES[1].kind not in work.live


def test_a_file_edited_after_an_update_is_not_taken_for_the_one_written(tmp_path: Path) -> None:
    """Known by its stat after an update, the file edited in place (same size) is seen all the
    same: its stat moved. Likewise between the plan and the write."""
    source = StaticSource([adapter(i, f"S{i}", None) for i in range(3)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[1:2], None, [])
    kind = CLASSES[1].kind
    for i in (3, 4):
        source.devices.append(adapter(i, f"S{i}", None))
        outcomes, error = work.run(
            CLASSES[1:2], set(), [DeviceEvent(adapter(i, None, None).sys_path, frozenset({kind}))]
        )
        assert error is None
        assert [o.updated for o in outcomes] == [True]
    live = work.live[kind]
    assert live.stat is not None
    spec = tmp_path / "example.com-c1.json"
    spec.write_text(spec.read_text().replace("ttyUSB0", "ttyUSBX"))  # edited in place, same size
    with pytest.raises(SpecWriteError, match="not as cdi-gen last wrote it"):
        plan_module.plan_updates(tmp_path, {spec.name: (kind, b"{}", live.digest)}, {spec.name: live.stat})
    source.devices.append(adapter(5, "S5", None))
    outcomes, error = work.run(
        CLASSES[1:2], set(), [DeviceEvent(adapter(5, None, None).sys_path, frozenset({kind}))]
    )
    assert outcomes == []
    assert isinstance(error, ConflictError), error  # the rescan refuses the edited file
    assert "ttyUSBX" in spec.read_text()

    # between the plan and the write
    spec.unlink()
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[1:2], None, [])
    source.devices.append(adapter(6, "S6", None))
    work.run(CLASSES[1:2], set(), [DeviceEvent(adapter(6, None, None).sys_path, frozenset({kind}))])
    live = work.live[kind]
    assert live.stat is not None
    planned = plan_module.plan_updates(
        tmp_path, {spec.name: (kind, b"{}\n", live.digest)}, {spec.name: live.stat}
    )
    assert planned.changes[0].old is None  # not read
    spec.write_text(spec.read_text().replace("ttyUSB0", "ttyUSBX"))
    with pytest.raises(SpecWriteError, match="changed since the plan was made"):
        apply(planned)
    assert "ttyUSBX" in spec.read_text()


def test_devices_read_ahead_are_taken_unless_an_event_came_since(tmp_path: Path) -> None:
    """A batch takes each device read ahead of it (numbered by its last event then) without reading
    it again, unless a later event moved the device's number; the file is what a rescan writes."""
    source = Counting([adapter(0, "S0", None)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[:1], None, [])
    kind = CLASSES[0].kind
    source.devices += [adapter(i, f"S{i}", None) for i in range(1, 5)]
    events = [DeviceEvent(adapter(i, None, None).sys_path, frozenset({kind})) for i in range(1, 5)]
    work.read_ahead([(event, n, False) for n, event in enumerate(events, 1)])
    assert len(source.lookups) == 4
    source.devices[2] = adapter(2, "S2", "FT232R")  # a change after it was read ahead: event 5
    enumerations = source.enumerations
    outcomes, error = work.run(
        CLASSES[:1],
        set(),
        events,
        numbers={e.sys_path: n for n, e in enumerate(events, 1)} | {events[1].sys_path: 5},
    )
    assert error is None
    assert [o.updated for o in outcomes] == [True]
    assert source.enumerations == enumerations
    assert source.lookups[4:] == [events[1].sys_path], "only the device with a later event is read again"
    assert work.ahead == {}
    fresh = tmp_path / "fresh"
    run_scan(options(fresh), StaticSource(source.devices), CLASSES[:1])
    assert files(tmp_path) == files(fresh)
    assert b"FT232R" in files(tmp_path)["example.com-c0.json"]


def test_a_device_whose_last_event_was_a_removal_is_gone_though_sysfs_still_shows_it(tmp_path: Path) -> None:
    """The kernel sends ``remove`` before it deletes the device's directory: a device in ``gone``
    is removed from its spec without being read, in a batch and when read ahead."""
    source = Counting([adapter(i, f"S{i}", None) for i in range(3)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[:1], None, [])
    kind = CLASSES[0].kind
    spec = tmp_path / "example.com-c0.json"
    first, second = (DeviceEvent(adapter(i, None, None).sys_path, frozenset({kind})) for i in (1, 2))
    outcomes, error = work.run(
        CLASSES[:1], set(), [first], numbers={first.sys_path: 1}, gone={first.sys_path}
    )
    assert error is None
    assert [o.updated for o in outcomes] == [True]
    assert device_names(spec) == {"S0", "S2"}
    work.read_ahead([(second, 2, True)])
    outcomes, error = work.run(
        CLASSES[:1], set(), [second], numbers={second.sys_path: 2}, gone={second.sys_path}
    )
    assert error is None
    assert device_names(spec) == {"S0"}
    assert source.lookups == [], "neither device was read"


def test_a_burst_read_ahead_is_updated_rather_than_rescanned(tmp_path: Path) -> None:
    """Only devices not read ahead count towards a rescan: a burst of many new devices read ahead
    of their batch is written as updates, without enumerating the class."""
    source = Counting([adapter(0, "S0", None)])
    work = BatchWork(options(tmp_path), source)
    work.run(CLASSES[:1], None, [])
    kind = CLASSES[0].kind
    source.devices += [adapter(i, f"S{i}", None) for i in range(1, 4 * MAX_DEVICES)]
    events = [DeviceEvent(d.sys_path, frozenset({kind})) for d in source.devices[1:]]
    work.read_ahead([(event, 1, False) for event in events])
    enumerations, lookups = source.enumerations, len(source.lookups)
    outcomes, error = work.run(
        CLASSES[:1], set(), events, numbers=dict.fromkeys((e.sys_path for e in events), 1)
    )
    assert error is None
    assert [o.updated for o in outcomes] == [True]
    assert (source.enumerations, len(source.lookups)) == (enumerations, lookups)
    fresh = tmp_path / "fresh"
    run_scan(options(fresh), StaticSource(source.devices), CLASSES[:1])
    assert files(tmp_path) == files(fresh)
