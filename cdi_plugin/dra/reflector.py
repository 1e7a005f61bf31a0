"""The driver's own ResourceSlices as the API server holds them, kept by a list and a watch.

:class:`SliceWatch` does what client-go's reflector does, for this node's slices of this driver
(field selectors): one list, then a watch from the list's version, renewed from the last version
seen each time the API server ends it. Each watch asks the API server to end it after 45 to 55 s
(``timeoutSeconds``, at random, so that nodes do not renew together) and for bookmarks, which
carry the latest version, so a renewal does not start from a version the server has forgotten
however much the rest of the cluster changes. A connection that sends nothing for
:data:`READ_TIMEOUT` seconds is taken for dead and replaced. An idle node thus sends one watch
request every 50 s or so, and nothing else.

A failure (no answer, an error, an answer that is not one, a silent connection, a watch that ends
before half the time asked for, whatever it brought) is followed by a delay growing from 1 s to
30 s, with jitter, across cycles (:class:`Failures`), or as long as the server's ``Retry-After``
asks when that is longer (up to 30 s, with jitter upwards): a watch that failed is started again
from the last version, and only a version the server no longer keeps (410 Expired) or has not
seen yet (504 with the cause ResourceVersionTooLarge), or a refusal (a Status such as 400 or 403,
not one of throttling or of a server error; a proxy's page of a 4xx status but 408 and 429) makes
it list again, so a storm of 410s lists at most 4 times in 10 s, then once every 30 s. Failures
in a row are logged as one lasting condition (:class:`~cdi_plugin.recurring.Recurring`): the
first as a warning, then a summary every 5 minutes, and its end as soon as the step that failed
last works: a list, a watch's start (the API server accepted it), or, for a watch that failed
once started (an ERROR event such as 410 Expired, a silent or a short watch), a watch that lasts
as asked. A list that works after a watch failed is not the end, nor the start of a watch that
failed once started: a watch refused after every list would log its end at every cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

from cdi_plugin.dra.backoff import Backoff, Failures
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.shapes import Obj
from cdi_plugin.recurring import Recurring
from cdi_plugin.wording import fault, plural

log = logging.getLogger(__name__)

#: The API server ends each watch after a number of seconds drawn from this range.
WATCH_TIMEOUT = (45, 55)
#: Nothing received for this long: the connection is dead (the server sends something at least
#: every WATCH_TIMEOUT, a bookmark or the end of the watch).
READ_TIMEOUT = 60.0
RETRY = Backoff(initial=1.0, maximum=30.0)
#: The condition of failures in a row (each failure is its detail).
FAILING = "failing to follow the ResourceSlices"
#: The steps of a cycle: the list, the start of the watch, its stream of events.
Step = Literal["list", "start", "stream"]


def _number(version: str) -> int | None:
    """A resourceVersion as a number, None when it is not one (then it is not compared)."""
    return int(version) if version.isdigit() and len(version) <= 20 else None


def _version(obj: Obj) -> int | None:
    return _number(obj["metadata"]["resourceVersion"])


def _older(obj: Obj, than: int | None) -> bool:
    version = _version(obj)
    return version is not None and than is not None and version <= than


class SliceCache:
    """The stored slices by name. An object older than what is known already of its name (a
    watch event behind the driver's own write, the answer to a write behind a watch event that
    deleted it, or anything behind the last list) is ignored, and a list older than what is known
    of a name (the answer to a write, or a deletion, that came while the list was on its way)
    keeps what is known."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.on_change = on_change
        self.synced = asyncio.Event()
        self._objects: dict[str, Obj] = {}
        #: The version each name was deleted at, since the last list: the driver's own slices only.
        self._gone: dict[str, int] = {}
        self._listed: int | None = None

    def objects(self) -> list[Obj]:
        return list(self._objects.values())

    def replace(self, items: Iterable[Obj], version: str) -> None:
        listed = _number(version)

        def after_list(found: int | None) -> bool:
            return listed is not None and found is not None and found > listed

        newer = {name: obj for name, obj in self._objects.items() if after_list(_version(obj))}
        self._gone = {name: gone for name, gone in self._gone.items() if after_list(gone)}
        listed_items = {obj["metadata"]["name"]: obj for obj in items}
        self._objects = {n: obj for n, obj in listed_items.items() if n not in self._gone} | newer
        self._listed = listed
        self.synced.set()
        self.on_change()

    def apply(self, kind: str, obj: Obj) -> None:
        """A watch event (ADDED, MODIFIED or DELETED) or the answer to a write (``put``)."""
        name = obj["metadata"]["name"]
        known = self._objects.get(name)
        known_version = _version(known) if known is not None else self._gone.get(name)
        if _older(obj, self._listed) or _older(obj, known_version):
            return
        if kind == "DELETED":
            self._objects.pop(name, None)
            if (version := _version(obj)) is not None:
                self._gone[name] = version
        else:
            self._objects[name] = obj
            self._gone.pop(name, None)
        self.on_change()

    def put(self, obj: Obj) -> None:
        self.apply("MODIFIED", obj)

    def remove(self, name: str) -> None:
        """The driver deleted ``name``: a watch event of the object as it was is ignored too."""
        obj = self._objects.pop(name, None)
        if obj is not None:
            if (version := _version(obj)) is not None:
                self._gone[name] = version
            self.on_change()


class SliceWatch:
    """Keeps a :class:`SliceCache` in step with the API server until cancelled."""

    def __init__(
        self,
        kube: KubeApi,
        cache: SliceCache,
        *,
        backoff: Backoff = RETRY,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        log_every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.failures = Failures(backoff, clock=clock)
        self.failing = Recurring(log, every=log_every, clock=clock)
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.sleep = sleep
        self.version = ""  # the last version seen; empty: list first
        #: The step of a cycle under way, and the one that failed last.
        self._step: Step = "list"
        self._failed: Step = "list"

    def _works(self, step: Step) -> None:
        """``step`` of the cycle worked: the end of the failures when it is the one that failed."""
        if self._failed == step:
            self.failing.recovered()

    def _started(self) -> None:
        """The API server accepted the watch: what fails from now on is its stream."""
        self._works("start")
        self._step = "stream"

    async def run(self) -> None:
        while True:
            try:
                if not self.version:
                    self._step = "list"
                    items, self.version = await self.kube.list_slices()
                    self.cache.replace(items, self.version)
                    log.debug("ResourceSlices listed at version %s: %d", self.version, len(items))
                    self._works("list")
                self._step = "start"
                await self._watch()
                continue
            except ApiServerError as exc:
                if exc.code == 410 or exc.refused or exc.version_too_large:
                    # expired, too new for this server (client-go lists again), or refused (400 for
                    # a version the server never gave; a proxy's 403 page): listed again
                    self.version = ""
                problem, wait = str(exc), exc.retry_after
            except Exception as exc:  # a fault of the driver itself: logged, and the loop goes on
                problem, wait = f"unexpected {fault(exc)}", None
            self._failed = self._step
            delay = self.failures.next_delay(wait)
            again = "watching them again" if self.version else "listing them again"
            self.failing.report(logging.WARNING, FAILING, f": {problem}; {again} in {delay:.1f} s")
            await self.sleep(delay)

    async def _watch(self) -> None:
        timeout = random.randint(*self.watch_timeout)
        loop = asyncio.get_running_loop()
        started, seen = loop.time(), 0
        events = self.kube.watch_slices(
            self.version, timeout=timeout, read_timeout=self.read_timeout, on_start=self._started
        )
        async with contextlib.aclosing(events) as stream:
            async for kind, obj in stream:
                seen += 1
                if kind != "BOOKMARK":
                    self.cache.apply(kind, obj)
                self.version = obj["metadata"]["resourceVersion"]
        lasted = loop.time() - started
        if lasted < timeout / 2:  # events or not: a stream cut short every time is no reason to loop
            brought = plural(seen, "event") if seen else "no event"
            raise ApiServerError(
                f"GET {SLICES} (watch)", f"ended after {lasted:.1f} s with {brought} (asked for {timeout} s)"
            )
        self._works("stream")
