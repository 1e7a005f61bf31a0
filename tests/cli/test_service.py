"""The long-running jobs of ``cdi-gen watch`` and ``cdi-plugin serve``: a signal stops them all."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from cdi_plugin.cli.service import run_until_stopped
from tests.deviceplugin.helpers import run


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_every_job_and_one_that_ignores_it_is_cancelled(sig: signal.Signals) -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def cooperative(stop: asyncio.Event) -> None:
            os.kill(os.getpid(), sig)
            await stop.wait()
            ended.append("cooperative")

        async def deaf(stop: asyncio.Event) -> None:
            try:
                await asyncio.Event().wait()
            finally:
                ended.append("deaf")

        await run_until_stopped(cooperative, deaf, grace=0)
        return ended

    assert sorted(run(scenario())) == ["cooperative", "deaf"]


def test_a_job_that_fails_stops_the_others_and_its_error_is_raised() -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def cooperative(stop: asyncio.Event) -> None:
            await stop.wait()
            ended.append("cooperative")

        async def broken(stop: asyncio.Event) -> None:
            raise OSError("event source broke")

        with pytest.raises(OSError, match="event source broke"):
            await run_until_stopped(cooperative, broken)
        return ended

    assert run(scenario()) == ["cooperative"]
