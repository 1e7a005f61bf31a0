"""DeviceState: what is advertised as the spec files change, with a controlled clock."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import GONE_REASON, NOT_SERVED_REASON, NumaLocator, SpecSource
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec

KIND = "cdi-plugin.io/test"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(layout: Layout, clock: Clock, **overrides: object) -> DeviceState:
    settings = layout.settings(grace_period=60.0, **overrides)
    return DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs), clock)


def _view(state: DeviceState) -> dict[str, tuple[bool, str]]:
    board = state.board(KIND)
    assert board is not None
    return {i: (s.healthy, s.reason) for i, s in board.view.devices.items()}


def test_removed_device_stays_unhealthy_for_the_grace_period(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    clock = Clock()
    state = _state(layout, clock)
    state.sync()
    assert _view(state) == {"a": (True, ""), "b": (True, "")}
    assert state.next_expiry() is None
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    state.sync()
    assert _view(state) == {"a": (True, ""), "b": (False, GONE_REASON)}
    assert state.next_expiry() == 1060.0
    clock.now = 1059.0
    state.expire()
    assert "b" in _view(state)
    clock.now = 1060.0
    state.expire()
    assert _view(state) == {"a": (True, "")}
    # the whole spec goes: the resource's board is closed after the grace period
    board = state.board(KIND)
    (layout.etc / "cdi-plugin.io-test.json").unlink()
    state.sync()
    assert _view(state) == {"a": (False, GONE_REASON)}
    clock.now = 2000.0
    state.expire()
    assert state.board(KIND) is None
    assert board is not None
    assert board.closed
    assert board.view.devices == {}
    assert state.resources() == []


def test_device_coming_back_within_the_grace_period_is_healthy_again(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [a]}))
    clock = Clock()
    state = _state(layout, clock)
    state.sync()
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    state.sync()
    clock.now += 30
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [a]}))
    state.sync()
    assert _view(state) == {"a": (True, ""), "b": (True, "")}
    clock.now += 100
    state.expire()
    assert _view(state) == {"a": (True, ""), "b": (True, "")}


def test_higher_priority_directory_wins_and_sync_is_cheap_when_nothing_changed(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"x": [a]}))
    write_spec(layout.run, spec_of(KIND, {"x": [b]}))
    b.unlink()
    state = _state(layout, Clock())
    state.sync()
    assert _view(state) == {"x": (False, f"host device node {b} is missing")}
    generation = state.source.generation
    state.sync()
    state.sync()
    assert state.source.generation == generation


def test_logs_what_is_served_and_why_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "all": [a]}))
    write_spec(layout.etc, spec_of("vendor.example/gpu", {"g": [a]}), owned=False)
    state = _state(layout, Clock())
    state.sync()
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "all": [a], "b": [a]}))
    state.sync()
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("serving kind cdi-plugin.io/test: its spec was written by cdi-gen") == 1
    unserved = "not serving kind vendor.example/gpu: cdi-gen did not write it"
    assert messages.count(f"{unserved} (serve it with --kind vendor.example/gpu)") == 1
    assert sum("not advertising cdi-plugin.io/test=all" in m for m in messages) == 1
    assert "cdi-plugin.io/test: advertising 1 device as 1 device ID (1 Healthy)" in messages
    assert "cdi-plugin.io/test: cdi-plugin.io/test=b added (Healthy)" in messages


def test_a_foreign_edit_of_a_cdi_gen_file_lets_its_kind_go_at_once(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [a]}))
    clock = Clock()
    state = _state(layout, clock)
    state.sync()
    assert _view(state) == {"a": (True, ""), "b": (True, "")}
    # someone else edits the file (the record does not own the new contents): let go, no hold-off
    (layout.etc / "cdi-plugin.io-test.json").write_bytes(codec.encode(spec_of(KIND, {"a": [a], "c": [a]})))
    state.sync()
    assert _view(state) == {"a": (False, NOT_SERVED_REASON), "b": (False, GONE_REASON)}
    assert state.next_expiry() == clock.now + 60.0
    clock.now += 60.0
    state.expire()
    assert state.board(KIND) is None
    assert state.resources() == []


def test_only_the_kinds_given_to_the_device_plugin_are_advertised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin.deviceplugin")
    layout = Layout.under(tmp_path)
    a, t = make_node(layout.dev / "a"), make_node(layout.dev / "ttyUSB0")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    write_spec(layout.etc, spec_of("cdi-plugin.io/tty", {"ttyUSB0": [t]}))
    state = _state(layout, Clock(), api="both", per_kind_api=(("cdi-plugin.io/tty", "dra"),))
    state.sync()
    assert state.resources() == [KIND]
    assert "cdi-plugin.io/tty=ttyUSB0" in state.inventory.devices()  # still followed, for DRA
    write_spec(layout.etc, spec_of("cdi-plugin.io/tty", {"ttyUSB0": [t], "ttyUSB1": [t]}))
    state.sync()
    assert state.resources() == [KIND]
    assert [m for m in caplog.messages if "cdi-plugin.io/tty" in m] == [
        "not advertising kind cdi-plugin.io/tty: plugin.resources.cdi-plugin.io/tty.api is dra"
    ]


def test_with_dra_alone_nothing_is_advertised_or_logged_of_the_device_plugin(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "cdi_plugin.deviceplugin")
    layout = Layout.under(tmp_path)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    state = _state(layout, Clock(), api="dra")
    state.sync()
    assert list(state.inventory.devices()) == [f"{KIND}=a"]
    assert state.resources() == []
    assert caplog.messages == []
