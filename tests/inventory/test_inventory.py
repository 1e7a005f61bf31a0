"""The inventory's parts (kind selection, grace period, health tracking) and the whole, without gRPC."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from cdi_plugin.inventory import (
    GONE_REASON,
    NOT_SERVED_REASON,
    NumaLocator,
    Reading,
    ServedDevice,
    SpecInventory,
    SpecSource,
    UdevFacts,
)
from cdi_plugin.inventory.grace import GracePeriod
from cdi_plugin.inventory.health import HealthTracker, HostNode, Rdev
from cdi_plugin.inventory.selection import KindSelection
from cdi_plugin.store.registry import Snapshot
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec

OURS, THEIRS, EDITED = "cdi-plugin.io/fuse", "vendor.example/gpu", "cdi-plugin.io/tun"


def _reading(owned: set[str], recorded: set[str]) -> Reading:
    return Reading(Snapshot((), ()), frozenset(owned), frozenset(recorded))


def test_kinds_are_served_when_cdi_gen_wrote_them_or_a_glob_names_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    selection = KindSelection(lambda kind: "vendor.*/*" if kind.startswith("vendor.") else None)
    reading = _reading({OURS}, {OURS, EDITED})
    assert selection.select({OURS, THEIRS, EDITED, "other.io/x"}, reading) == {OURS, THEIRS}
    assert selection.select({OURS, THEIRS, EDITED, "other.io/x"}, reading) == {OURS, THEIRS}
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"serving kind {OURS}: its spec was written by cdi-gen",
        f"not serving kind {EDITED}: its spec file was changed since cdi-gen wrote it "
        f"(serve it with --kind {EDITED})",
        "not serving kind other.io/x: cdi-gen did not write it (serve it with --kind other.io/x)",
        f"serving kind {THEIRS}: it matches --kind vendor.*/*",
    ]
    # the record no longer owns the file: let go at once, and said so
    assert selection.select({OURS}, _reading(set(), {OURS})) == set()
    assert caplog.records[-1].getMessage().startswith(f"not serving kind {OURS}: its spec file was changed")


def test_grace_period_keeps_a_device_unhealthy_then_drops_it() -> None:
    grace = GracePeriod(10.0)
    a = ServedDevice(cdi_name=f"{OURS}=a", numa_nodes=(1,))
    b = ServedDevice(cdi_name=f"{OURS}=b")
    before = {a.cdi_name: a, b.cdi_name: b}
    now = grace.carry(before, {a.cdi_name: a}, 100.0, lambda name: NOT_SERVED_REASON)
    assert now[b.cdi_name] == ServedDevice(
        cdi_name=b.cdi_name, healthy=False, reason=NOT_SERVED_REASON, gone_since=100.0
    )
    assert grace.next_expiry(now.values()) == 110.0
    later = grace.carry(now, {}, 109.0, lambda name: GONE_REASON)
    assert {n: (d.reason, d.gone_since, d.numa_nodes) for n, d in later.items()} == {
        a.cdi_name: (GONE_REASON, 109.0, (1,)),  # keeps its last NUMA node
        b.cdi_name: (GONE_REASON, 100.0, ()),  # keeps the time it went; its entry is gone now
    }
    assert grace.carry(later, {}, 110.0, lambda name: GONE_REASON).keys() == {a.cdi_name}
    assert grace.carry(later, {b.cdi_name: b}, 110.0, lambda name: GONE_REASON)[b.cdi_name] == b  # back


def test_health_tracker_stats_each_group_once_until_told_to_restat(tmp_path: Path) -> None:
    calls: list[str] = []

    def counting_stat(path: str) -> os.stat_result:
        calls.append(path)
        return os.stat(path)

    node = make_node(tmp_path / "dev" / "a")
    group = (HostNode(str(node)),)
    tracker = HealthTracker(counting_stat)
    assert tracker.track({"k/c=a": group, "k/c=b": group})
    assert not tracker.track({"k/c=a": group, "k/c=b": group})
    assert tracker.node_paths == {str(node)}
    assert tracker.node_dirs == {node.parent}
    assert {n: h.healthy for n, h in tracker.health(restat=False).items()} == {"k/c=a": True, "k/c=b": True}
    assert calls == [str(node)]
    node.unlink()
    assert tracker.health(restat=False)["k/c=a"].healthy  # not stat'ed again: no event said so
    assert tracker.health(restat=True)["k/c=a"].reason == f"host device node {node} is missing"
    assert len(calls) == 2


def _inventory(layout: Layout, **kwargs: object) -> SpecInventory:
    settings = layout.settings()
    return SpecInventory(
        SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs), grace_period=30.0, **kwargs
    )  # type: ignore[arg-type]


def test_the_inventory_holds_the_served_devices_with_health_numa_and_facts(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a", os.makedev(226, 0))
    (layout.sysfs / "dev" / "char" / "226:0").mkdir(parents=True)
    (layout.sysfs / "dev" / "char" / "226:0" / "numa_node").write_text("1\n")
    write_spec(layout.etc, spec_of(OURS, {"a": [a], "b": [layout.dev / "gone"]}))
    write_spec(layout.etc, spec_of(THEIRS, {"g": [a]}), owned=False)
    facts = UdevFacts(subsystem="misc", driver="fuse")
    inventory = _inventory(layout, facts={Rdev(False, 226, 0): facts}.get)
    inventory.sync()
    assert dict(inventory.devices()) == {
        f"{OURS}=a": ServedDevice(cdi_name=f"{OURS}=a", numa_nodes=(1,), udev=facts),
        f"{OURS}=b": ServedDevice(
            cdi_name=f"{OURS}=b", healthy=False, reason=f"host device node {layout.dev / 'gone'} is missing"
        ),
    }
    assert inventory.devices()[f"{OURS}=a"].numa_node == 1
    assert inventory.node_dirs() == {layout.dev}
    reading = inventory.reading
    assert reading is not None
    assert reading.owned == {OURS}


def test_changes_yield_the_devices_then_each_new_state(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(OURS, {"a": [a]}))
    inventory = _inventory(layout)
    inventory.sync()

    async def follow() -> list[set[str]]:
        seen: list[set[str]] = []
        stream = inventory.changes()
        seen.append(set(await anext(stream)))
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)
        inventory.sync()  # nothing changed: no new state
        await asyncio.sleep(0)
        assert not waiting.done()
        write_spec(layout.etc, spec_of(OURS, {"a": [a], "b": [a]}))
        inventory.sync()
        seen.append(set(await asyncio.wait_for(waiting, 60)))
        return seen

    assert asyncio.run(follow()) == [{f"{OURS}=a"}, {f"{OURS}=a", f"{OURS}=b"}]


def test_a_follower_is_told_of_every_change_in_step(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(OURS, {"a": [a]}))
    inventory = _inventory(layout)
    seen: list[dict[str, bool]] = []
    inventory.follow(lambda: seen.append({n: d.healthy for n, d in inventory.devices().items()}))
    inventory.sync()
    inventory.sync()  # nothing changed: not told
    a.unlink()
    inventory.recheck_health()
    assert seen == [{f"{OURS}=a": True}, {f"{OURS}=a": False}]
