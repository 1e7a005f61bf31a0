"""run_until, run_jobs, cancel_and_wait: every task ends, errors come out as they were; a stop stops."""

from __future__ import annotations

import asyncio

import pytest

from cdi_plugin.aio.run import cancel_and_wait, run_jobs, run_until
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


def test_run_jobs_lets_every_job_end_on_its_own_once_one_ends() -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def cooperative(stop: asyncio.Event) -> None:
            await stop.wait()
            await asyncio.sleep(0)  # an await after the stop (closing sockets) is not cancelled
            ended.append("cooperative")

        async def done(stop: asyncio.Event) -> None:
            ended.append("done")

        await run_jobs(asyncio.Event(), cooperative, done, grace=3600)
        return ended

    assert run(scenario()) == ["done", "cooperative"]


def test_run_jobs_raises_the_first_error_once_the_others_have_ended() -> None:
    async def scenario() -> list[str]:
        ended: list[str] = []

        async def cooperative(stop: asyncio.Event) -> None:
            await stop.wait()
            ended.append("cooperative")

        async def broken(stop: asyncio.Event) -> None:
            raise ValueError("broken")

        with pytest.raises(ValueError, match="broken"):
            await run_jobs(asyncio.Event(), cooperative, broken, grace=3600)
        return ended

    assert run(scenario()) == ["cooperative"]


def test_run_jobs_cancels_a_job_that_ignores_the_stop_after_the_grace_period() -> None:
    async def scenario() -> list[str]:
        stop, ended = asyncio.Event(), []

        async def deaf(stop: asyncio.Event) -> None:
            await _forever("deaf", ended)

        async def stopper(stop: asyncio.Event) -> None:
            stop.set()

        await run_jobs(stop, deaf, stopper, grace=0)
        return ended

    assert run(scenario()) == ["deaf"]


def test_cancelling_run_jobs_cancels_every_job_and_propagates() -> None:
    async def scenario() -> list[str]:
        started, ended = asyncio.Event(), []

        async def deaf(stop: asyncio.Event) -> None:
            await _forever("deaf", ended, started)

        runner = asyncio.create_task(run_jobs(asyncio.Event(), deaf, grace=3600))
        await started.wait()
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        return ended

    assert run(scenario()) == ["deaf"]
