"""run_until and cancel_and_wait: every task ends, errors come out as they were, a stop always stops."""

from __future__ import annotations

import asyncio

import pytest

from cdi_plugin.aio.run import cancel_and_wait, run_until
from tests.deviceplugin.helpers import run


async def _forever(name: str, ended: list[str], started: asyncio.Event | None = None) -> None:
    if started is not None:
        started.set()
    try:
        await asyncio.Event().wait()
    finally:
        ended.append(name)


def test_stop_cancels_every_job_and_returns() -> None:
    async def scenario() -> list[str]:
        stop, ended = asyncio.Event(), []

        async def stopper() -> None:
            stop.set()
            await _forever("stopper", ended)

        await run_until(stop, _forever("a", ended), _forever("b", ended), stopper())
        return ended

    assert sorted(run(scenario())) == ["a", "b", "stopper"]


def test_a_job_that_fails_stops_the_others_and_its_error_is_raised_as_it_was() -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def broken() -> None:
            raise ValueError("broken")

        with pytest.raises(ValueError, match="broken"):
            await run_until(asyncio.Event(), _forever("a", ended), broken())
        return ended

    assert run(scenario()) == ["a"]


def test_a_job_that_returns_stops_the_others() -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def done() -> None:
            return None

        await run_until(asyncio.Event(), _forever("a", ended), done())
        return ended

    assert run(scenario()) == ["a"]


def test_a_helper_that_returns_leaves_the_jobs_running() -> None:
    async def scenario() -> None:
        stop, helped = asyncio.Event(), asyncio.Event()

        async def helper() -> None:
            helped.set()

        async def job() -> None:
            await helped.wait()  # runs on after the helper ended, and only then stops the group
            stop.set()
            await asyncio.Event().wait()

        await run_until(stop, job(), helpers=[helper()])
        assert stop.is_set()

    run(scenario())


def test_cancelling_the_caller_cancels_every_job_and_propagates() -> None:
    async def scenario() -> list[str]:
        started, ended = asyncio.Event(), []
        runner = asyncio.create_task(run_until(asyncio.Event(), _forever("a", ended, started)))
        await started.wait()
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        assert runner.cancelled()
        return ended

    assert run(scenario()) == ["a"]


def test_cancel_and_wait_does_not_swallow_the_callers_own_cancellation() -> None:
    async def scenario() -> None:
        started, ending, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def slow_to_end() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ending.set()
                await release.wait()
                raise

        task = asyncio.create_task(slow_to_end())
        await started.wait()
        closer = asyncio.create_task(cancel_and_wait(task))
        await ending.wait()  # the closer cancelled the task and waits for it
        closer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closer
        assert not task.done(), "the task is still ending; the closer stopped waiting for it"
        release.set()
        await asyncio.wait([task])
        assert task.cancelled()

    run(scenario())


def test_cancel_and_wait_raises_the_error_the_task_ended_with() -> None:
    async def scenario() -> None:
        started = asyncio.Event()

        async def fails_on_cancel() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise OSError("cannot close") from None

        task = asyncio.create_task(fails_on_cancel())
        await started.wait()
        with pytest.raises(OSError, match="cannot close"):
            await cancel_and_wait(task)

    run(scenario())
