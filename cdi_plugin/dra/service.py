"""NodePrepareResources and NodeUnprepareResources: the DRA service the kubelet calls.

Prepare checks the namespace, name and UID of every claim the kubelet names (a claim that breaks
the API's name rules is a per-claim error, and nothing is sent), reads each claim through a
:class:`ClaimReader` (a GET, outside the lock, 16 at once), then, one call at a time across every instance
of the driver on the node (``serialize.lock``, :mod:`~cdi_plugin.dra.serialize`), reads the
prepared claims again if another instance changed them and answers each claim with its devices'
CDI names or a one-line error; a call the kubelet abandons still completes its change. Prepared
claims are kept in ``<plugins>/<driver>/prepared.json`` (:mod:`cdi_plugin.dra.prepared`): a device
prepared for one claim is refused to another until Unprepare, which only names the claim,
releases it, also after the driver restarted (the kubelet does not prepare its claims again
then), and whichever instance the kubelet calls (the file is shared). Each call's changes
are written (and fsynced) before it is answered: a claim whose record cannot be written is not
prepared (or stays prepared), with an error naming the file, and the kubelet calls again.
A call naming more than :data:`MAX_CLAIMS` claims is refused before any read; an answer over the
kubelet's 4 MiB fails the call, naming its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import grpc

from cdi_plugin.dra import api
from cdi_plugin.dra.inventory import Inventory, ServedDevice
from cdi_plugin.dra.names import LABEL_MAX, SUBDOMAIN_MAX, claim_ref_problem
from cdi_plugin.dra.prepare import ClaimReadError, Refusal, by_device_name, prepare_claim
from cdi_plugin.dra.prepared import UNTIL_REPAIRED, PreparedClaims, StateWriteError
from cdi_plugin.dra.preparedstate import claim_problem
from cdi_plugin.dra.report import UNREPORTED, PrepareResult, Report, UnprepareResult
from cdi_plugin.dra.serialize import SerializeError, Serializer
from cdi_plugin.grpcutil import KUBELET_MAX_MESSAGE
from cdi_plugin.wording import clipped, plural, shown

log = logging.getLogger(__name__)

#: How long a call may take before it stops waiting for its turn (the calls before it in this
#: process, then the lock of the node's instances): a Prepare's claim reads and that wait together
#: stay inside the kubelet's 45 s.
CALL_BUDGET = 40.0
#: Claims read from the API server at once, by all calls together: a call naming thousands of
#: claims reads them in turn instead of sending thousands of requests that time out together.
MAX_READS = 16
#: Claims one call may name (a pod's claims of this driver: a handful); a call naming more is
#: refused before any read or change. Their answers, one-line errors included, stay well inside
#: the 4 MiB the kubelet accepts; a larger answer fails the call, naming its size.
MAX_CLAIMS = 4096


class ClaimReader(Protocol):
    async def read_claim(
        self, namespace: str, name: str, *, until: float | None = None
    ) -> Mapping[str, Any] | None:
        """The claim object, or ``None`` when it does not exist; ClaimReadError when unknown.
        ``until`` (event loop time): when the call needs its answer."""
        ...


Result = tuple[api.PreparedDevice, ...] | Refusal
#: A claim as looked up for Prepare: the object, None when it does not exist, why it could not be
#: read, or the answer when its names are refused before any request.
Found = Mapping[str, Any] | ClaimReadError | Refusal | None
T = TypeVar("T")


def _claim(ref: api.Claim) -> str:
    """The claim the kubelet names, for a message (its names escaped and cut past the longest
    valid ones: they may not be valid)."""
    return f"claim {clipped(f'{ref.namespace}/{ref.name}', LABEL_MAX + 1 + SUBDOMAIN_MAX)}"


def _ref_problem(ref: api.Claim) -> Refusal | None:
    """Why the claim the kubelet names cannot be read (names the API refuses), as its error."""
    problem = claim_ref_problem(ref.namespace, ref.name, ref.uid)
    where = f"claim {shown(f'{ref.namespace}/{ref.name}')}"
    return None if problem is None else Refusal(f"{where}: {problem}", "invalid-claim")


def _named_twice(refs: list[api.Claim]) -> dict[str, Refusal]:
    """The UIDs the call names for two different claims (namespace and name), each refused: the
    answer has one entry per UID, and neither claim can be told to be the one meant."""
    first: dict[str, api.Claim] = {}
    out: dict[str, Refusal] = {}
    for ref in refs:
        seen = first.setdefault(ref.uid, ref)
        if seen != ref and ref.uid not in out:
            twice = f"{_claim(seen)}: its UID {shown(ref.uid)} is named for {_claim(ref)} too in this call"
            out[ref.uid] = Refusal(twice, "invalid-claim")
    return out


class DraService:
    """NodePrepareResources / NodeUnprepareResources for both API versions.

    ``serializer`` is the lock shared with the other instances of the driver on the node; without
    it, calls take turns within this process only. Each call, its claims' results and the claims
    prepared after it go to ``report``."""

    def __init__(
        self,
        driver: str,
        pool: str,
        inventory: Inventory,
        claims: ClaimReader,
        prepared: PreparedClaims,
        *,
        serializer: Serializer | None = None,
        report: Report = UNREPORTED,
        call_budget: float = CALL_BUDGET,
        max_message: int = KUBELET_MAX_MESSAGE,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.inventory = inventory
        self.claims = claims
        self.prepared = prepared
        self.serializer = serializer
        self.report = report
        self.call_budget = call_budget
        self.max_message = max_message
        report.claims_prepared(len(prepared.state.claims))
        self._lock = asyncio.Lock()
        self._reads = asyncio.Semaphore(MAX_READS)
        self._served: tuple[Mapping[str, ServedDevice], Mapping[str, ServedDevice]] | None = None

    def _by_name(self) -> Mapping[str, ServedDevice]:
        """The served devices by their name in the pool, worked out again only when they changed."""
        devices = self.inventory.devices()
        if self._served is None or self._served[0] is not devices:
            self._served = (devices, by_device_name(devices))
        return self._served[1]

    async def _read(self, ref: api.Claim, until: float) -> Mapping[str, Any] | ClaimReadError | None:
        async with self._reads:
            if asyncio.get_running_loop().time() >= until:
                return ClaimReadError("the call's other claims took the time the kubelet gives the call")
            try:  # a read started late in a call of many claims ends with the call's time too
                async with asyncio.timeout_at(until):
                    return await self.claims.read_claim(ref.namespace, ref.name, until=until)
            except ClaimReadError as exc:
                return exc
            except TimeoutError:
                return ClaimReadError("no answer within the time the kubelet gives the call")

    async def _look_up(self, refs: list[api.Claim], found: dict[str, Found], until: float) -> None:
        """Add the claims of ``refs`` to ``found``: each read with a GET, :data:`MAX_READS` at once,
        none started after ``until`` (event loop time), but one whose names the API would refuse,
        which is refused without a request."""
        unknown = []
        for ref in refs:
            refused = _ref_problem(ref)
            if refused is None:
                unknown.append(ref)
            else:
                found[ref.uid] = refused
        read = await asyncio.gather(*(self._read(ref, until) for ref in unknown))
        found.update((ref.uid, obj) for ref, obj in zip(unknown, read, strict=True))

    def _unprepared(self, refs: list[api.Claim], found: Mapping[str, Found]) -> list[api.Claim]:
        return [ref for ref in refs if ref.uid not in found and self.prepared.get(ref.uid) is None]

    @contextlib.asynccontextmanager
    async def _serialized(self, until: float | None = None) -> AsyncIterator[Callable[[], None]]:
        """One call at a time on the node, with the prepared claims as the last change left them:
        read again when another instance changed them (else one lstat). A file that cannot be used
        is read again by :meth:`PreparedClaims.unusable` instead, which says when it is usable.
        The calls before it in this process, then the node's lock, are waited for until ``until``
        (event loop time) at most: a call never starts its change after the kubelet stopped waiting
        for it (and may have called Unprepare, or Prepare, since). The block gets a function that
        raises SerializeError when the node's lock no longer excludes the other instances: call it
        before writing a change."""
        try:
            async with asyncio.timeout_at(until):
                await self._lock.acquire()
        except TimeoutError:
            raise SerializeError(
                "its turn did not come within the time the kubelet gives the call: the calls before it "
                "wait for the node's lock"
            ) from None
        held = self.serializer.hold(until) if self.serializer else contextlib.nullcontext(_alone)
        try:
            async with held as still_held:
                if self.prepared.problem is None and not self.prepared.reload():
                    log.error("%s; %s", self.prepared.problem, UNTIL_REPAIRED)
                try:
                    yield still_held
                finally:
                    self.report.claims_prepared(len(self.prepared.state.claims))
        finally:
            self._lock.release()

    async def prepare(self, refs: list[api.Claim]) -> dict[str, Result]:
        if not refs:
            return {}
        started = time.perf_counter()
        until = asyncio.get_running_loop().time() + self.call_budget
        # A claim prepared already is not read again.
        found: dict[str, Found] = dict(_named_twice(refs))
        await self._look_up(self._unprepared(refs, found), found, until)
        await self.inventory.settled()
        out: dict[str, Result]
        try:
            out = await _completed(self._prepare(refs, found, until))
        except SerializeError as exc:
            log.error("prepare failed: %s", exc)
            out = {ref.uid: Refusal(f"{_claim(ref)}: not prepared: {exc}", "lock-error") for ref in refs}
        causes: list[PrepareResult] = [r.cause if isinstance(r, Refusal) else "ok" for r in out.values()]
        self.report.prepare(causes, time.perf_counter() - started)
        return out

    async def _prepare(
        self, refs: list[api.Claim], found: dict[str, Found], until: float
    ) -> dict[str, Result]:
        out: dict[str, Result] = {}
        async with self._serialized(until) as still_held:
            # Released by another instance since it was looked at: read it now.
            await self._look_up(self._unprepared(refs, found), found, until)
            unusable = self.prepared.unusable()
            served = self._by_name()
            state = self.prepared.state
            added: dict[str, tuple[api.PreparedDevice, ...]] = {}
            for ref in refs:
                where = _claim(ref)
                obj = found.get(ref.uid)
                done = state.claims.get(ref.uid)
                result: Result
                if unusable is not None:  # logged once, when the file was found so
                    out[ref.uid] = Refusal(f"{where}: {unusable}", "state-error")
                    continue
                if done is not None:
                    out[ref.uid] = done
                    continue
                if isinstance(obj, Refusal):
                    result = obj
                elif isinstance(obj, ClaimReadError):
                    result = Refusal(f"{where}: cannot read it: {obj}", "api-error")
                else:
                    result = prepare_claim(
                        ref,
                        obj,
                        driver=self.driver,
                        pool=self.pool,
                        served=served,
                        in_use=state.holders,
                        problem=self.inventory.problem,
                    )
                    why = None if isinstance(result, str) else claim_problem(ref.uid, result)
                    if why is not None:
                        result = Refusal(f"{where}: cannot be recorded as prepared: {why}", "invalid-claim")
                if isinstance(result, str):
                    log.warning("prepare failed: %s", result)
                else:
                    added[ref.uid] = result
                    state = state.with_claims({ref.uid: result})
                out[ref.uid] = result
            if added:
                still_held()
                try:
                    await self.prepared.put(added)
                except StateWriteError as exc:
                    log.error("prepare failed: cannot record %s: %s", plural(len(added), "claim"), exc)
                    for ref in refs:
                        if ref.uid in added:
                            out[ref.uid] = Refusal(f"{_claim(ref)}: not prepared: {exc}", "state-error")
                else:
                    log.debug("prepared claims %s", ", ".join(added))
        return out

    async def unprepare(self, refs: list[api.Claim]) -> dict[str, str]:
        if not refs:
            return {}
        started = time.perf_counter()
        until = asyncio.get_running_loop().time() + self.call_budget
        cause: UnprepareResult = "state-error"
        try:
            out = await _completed(self._unprepare(refs, until))
        except SerializeError as exc:
            log.error("unprepare failed: %s", exc)
            out = {ref.uid: f"{_claim(ref)}: still prepared: {exc}" for ref in refs}
            cause = "lock-error"
        results: list[UnprepareResult] = [cause if error else "ok" for error in out.values()]
        self.report.unprepare(results, time.perf_counter() - started)
        return out

    async def _unprepare(self, refs: list[api.Claim], until: float) -> dict[str, str]:
        async with self._serialized(until) as still_held:
            unusable = self.prepared.unusable()
            if unusable is not None:
                return {ref.uid: f"{_claim(ref)}: {unusable}" for ref in refs}
            still_held()
            try:
                await self.prepared.drop(ref.uid for ref in refs)
            except StateWriteError as exc:
                log.error("unprepare failed: cannot record the release: %s", exc)
                kept = self.prepared.state.claims
                return {
                    ref.uid: f"{_claim(ref)}: still prepared: {exc}" if ref.uid in kept else ""
                    for ref in refs
                }
        return {ref.uid: "" for ref in refs}

    async def restore(self) -> bool:
        """Write the prepared claims again if their file is gone (StateWriteError if it fails,
        SerializeError if the node's lock cannot be taken). When there is nothing to write
        (:meth:`PreparedClaims.gone`), the lock is not taken."""
        if not self.prepared.gone():
            return False
        async with self._serialized() as still_held:  # another instance may have written it again
            still_held()
            return await self.prepared.restore()

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        await self._check_count("NodePrepareResources", request, context)
        answer = await self.prepare(api.claims_of(request))
        response = api.prepare_response(api.version_of(request), answer)
        await self._check_size("NodePrepareResources", response, "their preparation stands", context)
        return response

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        await self._check_count("NodeUnprepareResources", request, context)
        answer = await self.unprepare(api.claims_of(request))
        response = api.unprepare_response(api.version_of(request), answer)
        await self._check_size("NodeUnprepareResources", response, "their release stands", context)
        return response

    async def _check_count(self, method: str, request: Any, context: Any) -> None:
        """Refuse a call naming more than :data:`MAX_CLAIMS` claims before any read or change."""
        if (count := len(request.claims)) > MAX_CLAIMS:
            message = (
                f"{method} names {count} claims, more than the {MAX_CLAIMS} the driver takes in one call; "
                "nothing was done"
            )
            log.error("%s", message)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    async def _check_size(self, method: str, response: Any, done: str, context: Any) -> None:
        """Fail a call whose answer the kubelet would refuse, naming its size (the change is made:
        a call the kubelet abandons completes it too)."""
        if (size := response.ByteSize()) > self.max_message:
            message = (
                f"the answer to {method} for {plural(len(response.claims), 'claim')} would take {size} "
                f"bytes, more than the {self.max_message} the kubelet accepts; {done}"
            )
            log.error("%s", message)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def _alone() -> None:
    """Calls of a driver without a node's lock take turns in this process alone."""


async def _completed(change: Awaitable[T]) -> T:
    """The result of ``change``, which runs to its end even if the caller is cancelled (the kubelet
    gave up on the call): the lock is released only once the state is as the change left it."""
    task = asyncio.ensure_future(change)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # raised below, or nobody waits
    return await asyncio.shield(task)
