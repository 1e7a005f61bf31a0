"""What the plugin says while it waits for the kubelet, and when it stops."""

from __future__ import annotations

import itertools
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdi_plugin import recurring
from cdi_plugin.deviceplugin import lifecycle
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import (
    Layout,
    eventually,
    make_node,
    run,
    running_plugin,
    sock,
    spec_of,
    write_spec,
)

KIND = "cdi-plugin.io/wait"
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    layout = Layout.under(tmp_path)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    return layout


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a path short enough for unix sockets a few levels below it."""
    path = Path(tempfile.mkdtemp(prefix="cdi-wait-"))
    yield path
    shutil.rmtree(path)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def said_at(caplog: pytest.LogCaptureFixture, start: str) -> list[float]:
    """When the messages starting with ``start`` were logged."""
    return [r.created for r in caplog.records if r.getMessage().startswith(start)]


def slow(times: list[float], interval: float) -> bool:
    """No two of ``times`` closer than ``interval`` (with a little leeway for the clocks)."""
    return all(b - a >= interval - 0.05 for a, b in itertools.pairwise(times))


def test_waiting_for_the_plugin_directory_is_said_once_then_at_a_slow_interval_then_its_end(
    layout: Layout, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, short_dir: Path
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.4)
    plugin_dir = short_dir / "kubelet" / "device-plugins"
    waiting = f"{KIND}: waiting for the kubelet: {plugin_dir} does not exist yet"
    reminder = f"{KIND}: still waiting for the kubelet: {plugin_dir} "

    class NextInAnHour(logging.Handler):
        """Once armed, the wait that follows the next reminder lasts an hour."""

        armed = flipped = False

        def emit(self, record: logging.LogRecord) -> None:
            if self.armed and record.getMessage().startswith(reminder):
                recurring.SUMMARY_EVERY = 3600.0  # read right after the reminder is logged
                self.flipped = True

    handler = NextInAnHour()

    async def scenario() -> None:
        async with running_plugin(layout.settings(plugin_dir=plugin_dir)):
            await eventually(lambda: len(said_at(caplog, reminder)) >= 2, "two reminders")
            said = messages(caplog)
            assert said.count(waiting) == 1
            assert slow(said_at(caplog, reminder), 0.4), said
            assert all(
                re.search(rf" \(\d+ times since {WHEN}, for \d", m) for m in said if m.startswith(reminder)
            )
            assert not [m for m in said if "retrying" in m], said
            # the directory appearing is noticed at once, not at the next reminder
            handler.armed = True
            await eventually(lambda: handler.flipped, "a reminder, the next in an hour")
            plugin_dir.mkdir(parents=True)
            async with FakeKubelet(plugin_dir) as kubelet:
                await kubelet.wait_registered(KIND)
                recovered = f"{KIND}: recovered after "
                await eventually(lambda: any(m.startswith(recovered) for m in messages(caplog)), "its end")
                (end,) = [m for m in messages(caplog) if m.startswith(recovered)]
                assert re.search(rf" \(\d+ times since {WHEN}\): waiting for the kubelet: ", end), end

    logger = logging.getLogger(lifecycle.__name__)
    logger.addHandler(handler)
    try:
        run(scenario())
    finally:
        logger.removeHandler(handler)


def test_waiting_for_kubelet_sock_is_said_once_then_at_a_slow_interval(
    layout: Layout, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.4)
    waiting = f"waiting for the kubelet: {layout.plugin_dir / 'kubelet.sock'} does not exist yet"

    async def scenario() -> None:
        async with running_plugin(layout.settings()):
            await eventually(lambda: len(said_at(caplog, f"{KIND}: still {waiting}")) >= 2, "two reminders")
        said = messages(caplog)
        assert said.count(f"{KIND}: {waiting}") == 1
        still = re.compile(
            rf"{re.escape(f'{KIND}: still {waiting}')} \(\d+ times since {WHEN}, for [\d.]+ s\)"
        )
        assert len([m for m in said if still.fullmatch(m)]) >= 2, said
        assert slow(said_at(caplog, f"{KIND}: still {waiting}"), 0.4), said
        socket = layout.plugin_dir / sock(layout, KIND)
        assert said[-2:] == [f"{KIND}: stopped serving, removed {socket}", "stopped"]
        assert not socket.exists()

    run(scenario())


def test_stopping_names_only_sockets_that_were_created(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    plugin_dir = layout.root / "missing"

    async def scenario() -> None:
        async with running_plugin(layout.settings(plugin_dir=plugin_dir)):
            await eventually(lambda: any("waiting for the kubelet" in m for m in messages(caplog)), "waiting")

    run(scenario())
    said = messages(caplog)
    assert f"{KIND}: stopped serving" in said
    assert not [m for m in said if "removed" in m], said
    assert not plugin_dir.exists()


def test_a_kubelet_socket_or_plugin_directory_of_another_kind_is_named_for_what_it_is(
    layout: Layout, caplog: pytest.LogCaptureFixture, short_dir: Path
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    (layout.plugin_dir / "kubelet.sock").write_text("")
    not_a_dir = short_dir / "device-plugins"
    not_a_dir.write_text("")

    async def scenario() -> None:
        async with running_plugin(layout.settings()):
            sock_path = layout.plugin_dir / "kubelet.sock"
            said = f"{KIND}: waiting for the kubelet: {sock_path} is a regular file, not a socket"
            await eventually(lambda: said in messages(caplog), said)
        async with running_plugin(layout.settings(plugin_dir=not_a_dir)):
            said = f"{KIND}: waiting for the kubelet: {not_a_dir} is a regular file, not a directory"
            await eventually(lambda: said in messages(caplog), said)

    run(scenario())
