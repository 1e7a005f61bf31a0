"""A change to one device costs with that device, not with the devices served: one changed entry
in a 1000-device kind is resolved, checked and advertised again alone, through the real inventory
and the device plugin's state and ListAndWatch responses."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.cdi.model import Spec
from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin import servicer as servicer_module
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource
from cdi_plugin.inventory import health as health_module
from cdi_plugin.inventory import spec_inventory as inventory_module
from tests.deviceplugin.helpers import Layout, make_node, run, spec_of, write_spec
from tests.inventory.test_incremental import QuietWatch

KIND = "cdi-plugin.io/test"
SERVED = 1000


class Work:
    """Counts the per-device work: host nodes worked out from an entry, health checks (stat
    calls), NUMA look-ups and ListAndWatch Device messages built."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.resolved = self.checked = self.located = self.messages = 0
        host_nodes, check, device = health_module.host_nodes, health_module.check, api.device
        numa_nodes = NumaLocator.numa_nodes

        def counted_host_nodes(*args: Any) -> Any:
            self.resolved += 1
            return host_nodes(*args)

        def counted_check(*args: Any) -> Any:
            self.checked += 1
            return check(*args)

        def counted_numa(locator: NumaLocator, rdevs: Any) -> Any:
            self.located += 1
            return numa_nodes(locator, rdevs)

        def counted_device(*args: Any) -> Any:
            self.messages += 1
            return device(*args)

        monkeypatch.setattr(inventory_module, "host_nodes", counted_host_nodes)
        monkeypatch.setattr(health_module, "check", counted_check)
        monkeypatch.setattr(NumaLocator, "numa_nodes", counted_numa)
        monkeypatch.setattr(api, "device", counted_device)

    def counts(self) -> tuple[int, int, int, int]:
        out = (self.resolved, self.checked, self.located, self.messages)
        self.resolved = self.checked = self.located = self.messages = 0
        return out


Served = tuple[Layout, DeviceState, Spec]


@pytest.fixture
def served(tmp_path: Path) -> Served:
    """1000 devices served, and a spec of one more (its last device)."""
    layout = Layout.under(tmp_path)
    full = spec_of(KIND, {f"d{i}": [make_node(layout.dev / f"d{i}")] for i in range(SERVED + 1)})
    state = DeviceState(layout.settings(), SpecSource([layout.etc, layout.run]), NumaLocator(layout.sysfs))
    state.sync()
    state.inventory.watch_with(QuietWatch())
    run(_hand_over(layout, state, dataclasses.replace(full, devices=full.devices[:SERVED])))
    return layout, state, full


async def _hand_over(layout: Layout, state: DeviceState, spec: Spec) -> None:
    """What ``serve --scan`` does after writing a spec."""
    state.inventory.accept({write_spec(layout.etc, spec): spec})
    await state.settled()


def test_one_device_handed_over_costs_one_device(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, state, full = served
    lists = servicer_module.ListBuilder()
    board = state.board(KIND)
    assert board is not None
    assert len(board.view.devices) == SERVED
    lists.response(board.view)
    work = Work(monkeypatch)
    inventory = state.inventory
    added = f"d{SERVED}"

    reading = inventory.reading
    assert reading is not None
    unchanged = reading.snapshot.devices[f"{KIND}=d1"]

    # one device added: the spec handed over reuses the entries that did not change
    run(_hand_over(layout, state, full))
    assert inventory.delta == {f"{KIND}={added}"}
    reading = inventory.reading
    assert reading is not None
    assert reading.snapshot.devices[f"{KIND}=d1"] is unchanged  # not even resolved again
    response = api.ListAndWatchResponse.FromString(lists.response(board.view))
    assert len(response.devices) == SERVED + 1
    assert [d.ID for d in response.devices][-2:] == [f"d{SERVED - 1}", added]
    assert work.counts() == (1, 1, 1, 1)

    # one device's entry changed: it alone is worked out again
    gone = make_node(layout.dev / "elsewhere")
    gone.unlink()
    moved = dataclasses.replace(
        full,
        devices=tuple(
            spec_of(KIND, {"d7": [gone]}).devices[0] if d.name == "d7" else d for d in full.devices
        ),
    )
    run(_hand_over(layout, state, moved))
    assert inventory.delta == {f"{KIND}=d7"}
    assert not board.view.devices["d7"].healthy
    response = api.ListAndWatchResponse.FromString(lists.response(board.view))
    assert [d.health for d in response.devices].count(api.UNHEALTHY) == 1
    assert work.counts() == (1, 1, 0, 1)

    # one device removed: in its grace period, Unhealthy, nothing else looked at
    run(_hand_over(layout, state, dataclasses.replace(moved, devices=moved.devices[1:])))
    assert inventory.delta == {f"{KIND}=d0"}
    assert board.view.devices["d0"].device.gone_since is not None
    assert len(api.ListAndWatchResponse.FromString(lists.response(board.view)).devices) == SERVED + 1
    assert work.counts() == (0, 0, 0, 1)


def test_a_changed_file_read_back_checks_only_the_entry_that_changed(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, state, full = served
    work = Work(monkeypatch)
    path = write_spec(layout.etc, dataclasses.replace(full, devices=full.devices[1:SERVED]))
    state.inventory.note(layout.etc, path.name)
    run(state.refresh())
    assert state.inventory.delta == {f"{KIND}=d0"}
    resolved, checked, located, _ = work.counts()
    assert (checked, located) == (0, 0)  # the entries parsed anew are compared, not checked
    assert resolved == SERVED - 1


def test_a_node_event_rechecks_the_devices_at_that_node(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, state, _ = served
    work = Work(monkeypatch)
    (layout.dev / "d5").unlink()
    state.inventory.recheck_health([str(layout.dev / "d5")])
    assert state.inventory.delta == {f"{KIND}=d5"}
    status = state.status(KIND, "d5")
    assert status is not None
    assert not status.healthy
    assert work.counts()[:3] == (0, 1, 0)

    state.inventory.recheck_health()  # the watch could not say which: everything again
    assert work.counts()[1] == SERVED


def test_a_spec_read_back_before_its_hand_over_takes_the_writers_objects(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's reading may come first; the hand-over then swaps in the writer's objects
    (which its next hand-overs share) without evaluating any device again."""
    layout, state, full = served
    spec = dataclasses.replace(full, devices=full.devices[:SERVED])
    path = write_spec(layout.etc, spec)
    state.inventory.note(layout.etc, path.name)
    run(state.refresh())  # read back: entries parsed from the file
    resolved = state.inventory.reading
    assert resolved is not None
    assert resolved.snapshot.devices[f"{KIND}=d1"].device is not spec.devices[1]
    work = Work(monkeypatch)

    async def hand_over_as_read() -> None:
        state.inventory.accept({path: spec})  # the file as it was read
        await state.settled()

    run(hand_over_as_read())
    reading = state.inventory.reading
    assert reading is not None
    assert reading.snapshot.devices[f"{KIND}=d1"].device is spec.devices[1]
    assert work.counts()[1:] == (0, 0, 0)


def test_devices_stay_in_name_order_as_devices_come_and_go(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    names = [f"d{i:02}" for i in range(30)]
    full = spec_of(KIND, {n: [make_node(layout.dev / n)] for n in names})
    state = DeviceState(layout.settings(), SpecSource([layout.etc, layout.run]), NumaLocator(layout.sysfs))
    state.sync()
    state.inventory.watch_with(QuietWatch())
    rng = random.Random(3)
    served: set[str] = set()
    for _ in range(60):
        flip = set(rng.sample(names, rng.choice([1, 1, 2, 12])))
        before = {f"{KIND}={n}" for n in served}
        served ^= flip
        run(_hand_over(layout, state, dataclasses.replace(full, devices=tuple(
            d for d in full.devices if d.name in served
        ))))  # fmt: skip
        listed = list(state.inventory.devices())
        assert listed == sorted(listed)
        assert {n for n in listed if state.inventory.devices()[n].gone_since is None} == {
            f"{KIND}={n}" for n in served
        }
        board = state.board(KIND)
        assert board is not None
        assert list(board.view.devices) == sorted(n.partition("=")[2] for n in listed)
        gone = before - {f"{KIND}={n}" for n in served}
        assert gone <= set(listed)  # in their grace period
