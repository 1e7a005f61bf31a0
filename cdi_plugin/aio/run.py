"""Structured concurrency for the long-running loops: every task in one :class:`asyncio.TaskGroup`.

:func:`run_until` runs jobs together until a stop event is set or one of them ends; every task is
then cancelled and awaited before it returns. A job's error is raised as it was, not wrapped in an
``ExceptionGroup``. Cancelling the caller cancels every task and the ``CancelledError`` propagates:
a stop always stops. :func:`cancel_and_wait` ends a single task the same way. :func:`run_jobs`
runs jobs that end by themselves once told to stop, and cancels those that have not within a
grace period. :func:`stop_on_signals` turns SIGTERM, SIGINT and SIGHUP into a stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from cdi_plugin.errors import CdiPluginError

log = logging.getLogger(__name__)


class _Ended(CdiPluginError):
    """Ends the group: the stop event was set, or a job ended."""


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


async def run_until(
    stop: asyncio.Event, *jobs: Awaitable[object], helpers: Iterable[Awaitable[object]] = ()
) -> None:
    """Run ``jobs`` and ``helpers`` until ``stop`` is set or a job ends (returns or raises).

    A helper may end on its own without stopping the others (a one-off check); an error it raises
    stops everything like a job's. The first error is raised once every task has ended.
    """

    async def until_stop() -> None:
        await stop.wait()
        raise _Ended

    async def job(awaitable: Awaitable[object]) -> None:
        await awaitable
        raise _Ended

    async def helper(awaitable: Awaitable[object]) -> None:
        await awaitable

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(until_stop(), name="stop")
            for awaitable in jobs:
                group.create_task(job(awaitable))
            for awaitable in helpers:
                group.create_task(helper(awaitable))
    except BaseExceptionGroup as ended:
        errors = [exc for exc in _leaves(ended) if not isinstance(exc, _Ended)]
        if errors:
            raise errors[0] from None


Job = Callable[[asyncio.Event], Awaitable[object]]


async def run_jobs(stop: asyncio.Event, *jobs: Job, grace: float) -> None:
    """Run each job with ``stop`` until all have ended; ``stop`` is set as soon as one ends
    (returns or raises), so that the others end too, each in its own way (closing its sockets,
    logging that it stopped).

    Jobs still running ``grace`` seconds after ``stop`` was set are cancelled, and cancelling the
    caller cancels every job: a stop always stops. The first error a job raised is raised once
    every job has ended.
    """
    errors: list[Exception] = []

    async def run(job: Job) -> None:
        try:
            await job(stop)
        except Exception as exc:  # raised below, once the others have ended on their own
            errors.append(exc)
        finally:
            stop.set()

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(run(job), name=getattr(job, "__qualname__", repr(job))) for job in jobs]
        await stop.wait()
        _, late = await asyncio.wait(tasks, timeout=grace)
        for task in late:
            log.warning("%s did not stop within %gs of the stop, cancelling it", task.get_name(), grace)
            task.cancel()
    if errors:
        raise errors[0]


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended; raise the error it ended with, if any.

    Unlike ``suppress(CancelledError): await task``, a cancellation of the caller itself while it
    waits is not swallowed but propagates.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled() and (exc := task.exception()) is not None:
        raise exc


#: Each stops the process cleanly. SIGHUP too: a hang-up (the terminal closed, or a reload asked of
#: a service without one) must not kill the process with its sockets left behind.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    log.info("%s received, stopping", sig.name)
    stop.set()


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` when one of :data:`STOP_SIGNALS` arrives while inside; only on the main thread,
    the one thread whose event loop can take signal handlers."""
    loop = asyncio.get_running_loop()
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, _on_signal, sig, stop)
    try:
        yield
    finally:
        if on_main:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
