"""A rescan held up by the output directory's lock: liveness says so, and the log says how long.

The test process holds the lock itself (as a hung scan of the same user would), since no other
user can open it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest

from cdi_plugin.metrics import Probes
from cdi_plugin.scan.watcher import Watcher
from cdi_plugin.store.dirlock import LOCK_NAME, locked
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import opened
from tests.watch.helpers import running, watch_options, write_host

pytestmark = pytest.mark.timeout(180)


def _watcher(tmp_path: Path, lock_timeout: float) -> tuple[Watcher, Path, Path]:
    host, out = tmp_path / "host.json", tmp_path / "out"
    write_host(host, WORKSTATION)
    out.mkdir()
    options = watch_options(out, source=f"fixture:{host}")
    options = dataclasses.replace(options, scan=dataclasses.replace(options.scan, lock_timeout=lock_timeout))
    return Watcher(options), host, out


def test_liveness_fails_while_rescans_wait_for_the_lock_and_recovers(tmp_path: Path) -> None:
    watcher, host, out = _watcher(tmp_path, lock_timeout=0.3)
    probes = Probes(stale_after=1.0)
    probes.track("rescans", lambda: watcher.stalled_since)

    async def heartbeat() -> None:
        while True:
            probes.beat()
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        beating = asyncio.create_task(heartbeat())
        async with running(watcher):
            assert probes.liveness().ok
            with locked(out):
                write_host(host, [d for d in WORKSTATION if d.sys_name != "tun"])
                await eventually(lambda: not probes.liveness().ok, "liveness fails")
                assert probes.liveness().detail.startswith("rescans stalled for ")
            await eventually(lambda: not (out / "cdi-plugin.io-tun.json").exists(), "the retry")
            await eventually(lambda: probes.liveness().ok, "liveness recovers")
        beating.cancel()

    run(scenario())


def test_the_log_gives_the_real_duration_including_the_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, host, out = _watcher(tmp_path, lock_timeout=30)

    async def scenario() -> None:
        async with running(watcher):
            seen = watcher.batches.count
            with locked(out):
                write_host(host, [d for d in WORKSTATION if d.sys_name != "tun"])
                # the rescan has the lock file open (and so do we): it waits for the lock
                await eventually(lambda: opened(out / LOCK_NAME) == 2, "the rescan at the lock")
                await asyncio.sleep(1.5)  # time passes on purpose: the rescan waits that long
            await watcher.batches.wait_after(seen)

    with caplog.at_level(logging.DEBUG, logger="cdi_plugin.scan"):
        run(scenario())
    [record] = [r for r in caplog.records if r.getMessage().startswith("rescanned every class")]
    ms = record.ms
    assert ms >= 1400, record.getMessage()
    assert record.lock_wait_ms >= 1000
    assert "s of it waiting for another scan" in record.getMessage()
