"""A failure state of the watcher that lasts: said once, summarised once the (shrunk) interval has
passed, and its end said once, however many batches meet it."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest

from cdi_plugin import recurring
from cdi_plugin.scan.watcher import Watcher
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import WORKSTATION
from tests.watch.helpers import running, watch_options, write_host

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
TUN_ONLY = "classes:\n  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}\n"
TUN = "cdi-plugin.io-tun.json"


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
