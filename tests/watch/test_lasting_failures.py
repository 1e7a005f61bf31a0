"""A failure state of the watcher that lasts: said once, summarised once the (shrunk) interval has
passed, and its end said once, however many batches meet it."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest

from cdi_plugin import recurring
from cdi_plugin.scan import uevents
from cdi_plugin.scan.uevents import Uevents
from cdi_plugin.scan.watcher import Watcher
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import WORKSTATION
from tests.watch.helpers import running, watch_options, write_host
from tests.watch.loops import AVAILABLE, Loops, free_numbers, loop_class, storm

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
TUN_ONLY = "classes:\n  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}\n"
TUN = "cdi-plugin.io-tun.json"
SPEC = "cdi-plugin.io-loop.json"


def test_a_spec_directory_that_is_a_regular_file_is_said_once_then_summarised_then_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
    config, host, out = tmp_path / "config.yaml", tmp_path / "host.json", tmp_path / "out"
    config.write_text(TUN_ONLY)
    write_host(host, WORKSTATION)
    run_dir = tmp_path / "run-cdi"
    run_dir.write_text("")  # a spec directory the runtimes read, that is a regular file
    skipping = f"skipping spec directory {run_dir}: is a regular file, not a directory"
    options = watch_options(out, config, source=f"fixture:{host}")
    options = dataclasses.replace(options, scan=dataclasses.replace(options.scan, spec_dirs=(out, run_dir)))

    def said(start: str) -> list[str]:
        return [m for m in caplog.messages if m.startswith(start)]

    async def rescan(watcher: Watcher) -> None:
        """One batch that checks the spec directories for foreign specs of tun, and its end."""
        batches = watcher.batches.count
        (out / TUN).unlink()
        await eventually(lambda: (out / TUN).exists() and watcher.batches.count > batches, "tun again")
        await watcher.idle()

    async def scenario() -> None:
        watcher = Watcher(options)
        async with running(watcher):
            for _ in range(3):
                await rescan(watcher)
            assert said(skipping) == [skipping], "said once in 4 batches"
            assert said("still ") == []
            monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.0)
            await rescan(watcher)
            monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
            (summary,) = said("still ")
            assert re.fullmatch(
                rf"still {re.escape(skipping)} \(\d+ times since {WHEN}, for [\d.]+ s\)", summary
            )
            await rescan(watcher)
            assert len(said("still ")) == 1, "the next summary waits a whole interval"
            run_dir.unlink()
            run_dir.mkdir()
            await rescan(watcher)
            (end,) = said("recovered after ")
            assert re.fullmatch(
                rf"recovered after [\d.]+ s \(\d+ times since {WHEN}\): {re.escape(skipping)}", end
            )
            await rescan(watcher)
        assert said(skipping) == [skipping]
        assert len(said("recovered after ")) == 1

    run(scenario())


@pytest.mark.root
@pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/loop-control (CI runs as root)")
def test_uevents_lost_batch_after_batch_are_said_once_then_summarised_then_their_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real storms of uevents overflow a small receive buffer, three times, each handled in its
    batches: one warning, one summary once the interval has passed, and one line once a batch
    begins after the loss has stopped."""
    (n,) = free_numbers(1)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(n))
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, "cdi_plugin")
    monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
    monkeypatch.setattr(uevents, "LOSS_QUIET", 3600.0)

    def said(start: str) -> list[str]:
        return [m for m in caplog.messages if m.startswith(start)]

    async def overflow(watcher: Watcher, feed: Uevents) -> None:
        losses = feed.losses
        storm(n, 10_000)  # on the event loop's thread: nothing is read meanwhile
        await eventually(lambda: feed.losses > losses, "the overflow seen")
        await watcher.idle()

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, uevent_source="kernel", receive_buffer=64 * 1024))
        async with running(watcher):
            with Loops() as loops:
                loops.add(n)
                await eventually((out / SPEC).exists, "loop added")
                await watcher.idle()
                feed = watcher.feed
                await overflow(watcher, feed)
                await overflow(watcher, feed)
                assert said(uevents.LOST) == [uevents.LOST], "said once"
                assert said("still ") == []
                assert said("recovered after ") == []
                monkeypatch.setattr(recurring, "SUMMARY_EVERY", 0.0)
                await overflow(watcher, feed)
                monkeypatch.setattr(recurring, "SUMMARY_EVERY", 3600.0)
                (summary,) = said("still ")
                assert re.fullmatch(
                    rf"still {re.escape(uevents.LOST)} \(3 times since {WHEN}, for [\d.]+ s\)", summary
                )
                monkeypatch.setattr(uevents, "LOSS_QUIET", 0.0)
                batches = watcher.batches.count
                storm(n, 1)  # one event, one batch, no loss
                await eventually(lambda: watcher.batches.count > batches, "a batch without a loss")
                await watcher.idle()
                (end,) = said("recovered after ")
                assert re.fullmatch(
                    rf"recovered after [\d.]+ s \(3 times since {WHEN}\): {re.escape(uevents.LOST)}", end
                )
        assert said(uevents.LOST) == [uevents.LOST]

    run(scenario())
