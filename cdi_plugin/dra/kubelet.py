"""The driver's side of the kubelet: registration through the plugin watcher, and the DRA service.

Sockets (absolute paths, the same inside and outside the container):

* ``<plugins>/<driver>/dra.sock`` serves ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``, and the
  device health service (:mod:`~cdi_plugin.dra.health_service`) in v1 and v1alpha1;
* ``<plugins_registry>/<driver>-reg.sock`` serves ``pluginregistration.Registration``;
* with a pod UID (two instances side by side during an update, :mod:`~cdi_plugin.dra.rolling`),
  ``dra-<uid>.sock`` and ``<driver>-<uid>-reg.sock`` instead.

The DRA socket starts first, so the kubelet never registers an endpoint that does not answer;
on stop the registration socket goes first. A stale socket is removed before listening.

Prepare checks the namespace, name and UID of every claim the kubelet names (a claim that breaks
the API's name rules is a per-claim error, and nothing is sent), reads each claim through a
:class:`ClaimReader` (a GET, outside the lock, all at once), then, one call at a time across every instance
of the driver on the node (``serialize.lock``, :mod:`~cdi_plugin.dra.serialize`), reads the
prepared claims again if another instance changed them and answers each claim with its devices'
CDI names or a one-line error; a call the kubelet abandons still completes its change. Prepared
claims are kept in ``<plugins>/<driver>/prepared.json`` (:mod:`cdi_plugin.dra.prepared`): a device
prepared for one claim is refused to another until Unprepare, which only names the claim,
releases it, also after the driver restarted (the kubelet does not prepare its claims again
then), and whichever instance the kubelet calls (the file is shared). Each call's changes
are written (and fsynced) before it is answered: a claim whose record cannot be written is not
prepared (or stays prepared), with an error naming the file, and the kubelet calls again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc

from cdi_plugin.aio.sockets import someone_listens
from cdi_plugin.dra import api
from cdi_plugin.dra.health_service import HealthService
from cdi_plugin.dra.inventory import Inventory, ServedDevice
from cdi_plugin.dra.names import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, claim_ref_problem
from cdi_plugin.dra.prepare import Refusal, by_device_name, prepare_claim
from cdi_plugin.dra.prepared import UNTIL_REPAIRED, PreparedClaims, StateWriteError
from cdi_plugin.dra.preparedstate import claim_problem
from cdi_plugin.dra.report import UNREPORTED, PrepareResult, Report, UnprepareResult
from cdi_plugin.dra.serialize import LOCK_NAME, SerializeError, Serializer
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import plural, shown

log = logging.getLogger(__name__)


class ClaimReadError(CdiPluginError):
    """A ResourceClaim could not be read (the API server is down, refused, or kept failing)."""


class ClaimReader(Protocol):
    async def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim object, or ``None`` when it does not exist; ClaimReadError when unknown."""
        ...


@dataclass(frozen=True, slots=True)
class Paths:
    driver: str
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    #: Names the sockets of this instance when not empty (checked: :func:`~.rolling.check_pod_uid`).
    pod_uid: str = ""

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / self.driver

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    @property
    def registration_socket(self) -> Path:
        uid = f"-{self.pod_uid}" if self.pod_uid else ""
        return self.registry_dir / f"{self.driver}{uid}-reg.sock"

    @property
    def state_file(self) -> Path:
        return self.plugin_dir / "prepared.json"

    @property
    def lock_file(self) -> Path:
        return self.plugin_dir / LOCK_NAME


Result = tuple[api.PreparedDevice, ...] | Refusal
#: A claim as looked up for Prepare: the object, None when it does not exist, why it could not be
#: read, or the answer when its names are refused before any request.
Found = Mapping[str, Any] | ClaimReadError | Refusal | None
T = TypeVar("T")


def _ref_problem(ref: api.Claim) -> Refusal | None:
    """Why the claim the kubelet names cannot be read (names the API refuses), as its error."""
    problem = claim_ref_problem(ref.namespace, ref.name, ref.uid)
    where = f"claim {shown(f'{ref.namespace}/{ref.name}')}"
    return None if problem is None else Refusal(f"{where}: {problem}", "invalid-claim")


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
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.inventory = inventory
        self.claims = claims
        self.prepared = prepared
        self.serializer = serializer
        self.report = report
        report.claims_prepared(len(prepared.state.claims))
        self._lock = asyncio.Lock()
        self._served: tuple[Mapping[str, ServedDevice], Mapping[str, ServedDevice]] | None = None

    def _by_name(self) -> Mapping[str, ServedDevice]:
        """The served devices by their name in the pool, worked out again only when they changed."""
        devices = self.inventory.devices()
        if self._served is None or self._served[0] is not devices:
            self._served = (devices, by_device_name(devices))
        return self._served[1]

    async def _read(self, ref: api.Claim) -> Mapping[str, Any] | ClaimReadError | None:
        try:
            return await self.claims.read_claim(ref.namespace, ref.name)
        except ClaimReadError as exc:
            return exc

    async def _look_up(self, refs: list[api.Claim], found: dict[str, Found]) -> None:
        """Add the claims of ``refs`` to ``found``: each read with a GET, all at once, but one whose
        names the API would refuse, which is refused without a request."""
        unknown = []
        for ref in refs:
            refused = _ref_problem(ref)
            if refused is None:
                unknown.append(ref)
            else:
                found[ref.uid] = refused
        read = await asyncio.gather(*(self._read(ref) for ref in unknown))
        found.update((ref.uid, obj) for ref, obj in zip(unknown, read, strict=True))

    def _unprepared(self, refs: list[api.Claim], found: Mapping[str, Found]) -> list[api.Claim]:
        return [ref for ref in refs if ref.uid not in found and self.prepared.get(ref.uid) is None]

    @contextlib.asynccontextmanager
    async def _serialized(self) -> AsyncIterator[None]:
        """One call at a time on the node, with the prepared claims as the last change left them:
        read again when another instance changed them (else one lstat). A file that cannot be used
        is read again by :meth:`PreparedClaims.unusable` instead, which says when it is usable."""
        async with self._lock, self.serializer.hold() if self.serializer else contextlib.nullcontext():
            if self.prepared.problem is None and not self.prepared.reload():
                log.error("%s; %s", self.prepared.problem, UNTIL_REPAIRED)
            try:
                yield
            finally:
                self.report.claims_prepared(len(self.prepared.state.claims))

    async def prepare(self, refs: list[api.Claim]) -> dict[str, Result]:
        if not refs:
            return {}
        started = time.perf_counter()
        # A claim prepared already is not read again.
        found: dict[str, Found] = {}
        await self._look_up(self._unprepared(refs, found), found)
        await self.inventory.settled()
        out: dict[str, Result]
        try:
            out = await _completed(self._prepare(refs, found))
        except SerializeError as exc:
            log.error("prepare failed: %s", exc)
            out = {
                ref.uid: Refusal(f"claim {ref.namespace}/{ref.name}: not prepared: {exc}", "lock-error")
                for ref in refs
            }
        causes: list[PrepareResult] = [r.cause if isinstance(r, Refusal) else "ok" for r in out.values()]
        self.report.prepare(causes, time.perf_counter() - started)
        return out

    async def _prepare(self, refs: list[api.Claim], found: dict[str, Found]) -> dict[str, Result]:
        out: dict[str, Result] = {}
        async with self._serialized():
            # Released by another instance since it was looked at: read it now.
            await self._look_up(self._unprepared(refs, found), found)
            unusable = self.prepared.unusable()
            served = self._by_name()
            state = self.prepared.state
            added: dict[str, tuple[api.PreparedDevice, ...]] = {}
            for ref in refs:
                where = f"claim {ref.namespace}/{ref.name}"
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
                try:
                    await self.prepared.put(added)
                except StateWriteError as exc:
                    log.error("prepare failed: cannot record %s: %s", plural(len(added), "claim"), exc)
                    for ref in refs:
                        if ref.uid in added:
                            out[ref.uid] = Refusal(
                                f"claim {ref.namespace}/{ref.name}: not prepared: {exc}", "state-error"
                            )
                else:
                    log.debug("prepared claims %s", ", ".join(added))
        return out

    async def unprepare(self, refs: list[api.Claim]) -> dict[str, str]:
        if not refs:
            return {}
        started = time.perf_counter()
        cause: UnprepareResult = "state-error"
        try:
            out = await _completed(self._unprepare(refs))
        except SerializeError as exc:
            log.error("unprepare failed: %s", exc)
            out = {ref.uid: f"claim {ref.namespace}/{ref.name}: still prepared: {exc}" for ref in refs}
            cause = "lock-error"
        results: list[UnprepareResult] = [cause if error else "ok" for error in out.values()]
        self.report.unprepare(results, time.perf_counter() - started)
        return out

    async def _unprepare(self, refs: list[api.Claim]) -> dict[str, str]:
        async with self._serialized():
            unusable = self.prepared.unusable()
            if unusable is not None:
                return {ref.uid: f"claim {ref.namespace}/{ref.name}: {unusable}" for ref in refs}
            try:
                await self.prepared.drop(ref.uid for ref in refs)
            except StateWriteError as exc:
                log.error("unprepare failed: cannot record the release: %s", exc)
                kept = self.prepared.state.claims
                return {
                    ref.uid: f"claim {ref.namespace}/{ref.name}: still prepared: {exc}"
                    if ref.uid in kept
                    else ""
                    for ref in refs
                }
        return {ref.uid: "" for ref in refs}

    async def restore(self) -> bool:
        """Write the prepared claims again if their file is gone (StateWriteError if it fails)."""
        if os.path.lexists(self.prepared.path):
            return False
        async with self._serialized():  # another instance may have written it again already
            return await self.prepared.restore()

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return api.prepare_response(api.version_of(request), await self.prepare(api.claims_of(request)))

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return api.unprepare_response(api.version_of(request), await self.unprepare(api.claims_of(request)))


async def _completed(change: Awaitable[T]) -> T:
    """The result of ``change``, which runs to its end even if the caller is cancelled (the kubelet
    gave up on the call): the lock is released only once the state is as the change left it."""
    task = asyncio.ensure_future(change)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # raised below, or nobody waits
    return await asyncio.shield(task)


class Registrar:
    """The Registration service the kubelet's plugin watcher calls. The driver counts as registered
    (:attr:`registered`, and to ``report``) from the kubelet's confirmation until the kubelet
    refuses it or the socket stops being served (:meth:`unregistered`)."""

    def __init__(
        self,
        driver: str,
        endpoint: Path,
        on_registered: Callable[[], None] | None = None,
        report: Report = UNREPORTED,
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.on_registered = on_registered
        self.report = report
        self.registered = asyncio.Event()
        self.error = ""

    def unregistered(self, why: str = "") -> None:
        self.registered.clear()
        self.report.registered(False, why)

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return api.PluginInfo(
            type=api.PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(api.ADVERTISED),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            self.error = ""
            self.registered.set()
            self.report.registered(True)
            log.info("registered with the kubelet as DRA driver %s", self.driver)
            if self.on_registered is not None:
                self.on_registered()
        else:
            self.error = request.error
            reason = request.error or "no reason given"
            self.unregistered(f"refused: {reason}")
            log.error("the kubelet refused DRA driver %s: %s", self.driver, reason)
        return api.RegistrationStatusResponse()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class SocketInUseError(CdiPluginError):
    """Another process serves a socket this plugin would bind (another instance of the driver)."""


async def _listen(path: Path, add: Any) -> grpc.aio.Server:
    path.parent.mkdir(parents=True, exist_ok=True)
    if someone_listens(path):
        raise SocketInUseError(
            f"{path}: another process is serving it (another instance of the driver?); not replacing it"
        )
    path.unlink(missing_ok=True)  # stale: nothing listens on it
    server = grpc.aio.server()
    add(server)
    if server.add_insecure_port(f"unix://{path}") == 0:
        raise OSError(f"{path}: cannot listen")
    await server.start()
    return server


class KubeletPlugin:
    """Both sockets, started DRA first and stopped registration first; use ``async with``.

    A socket another process serves is never replaced (SocketInUseError), and on stop a socket is
    removed only while it is the one this plugin bound. When a socket disappears (a kubelet
    restart that wiped its directories), :meth:`recover` starts both again, and the kubelet's
    plugin watcher registers the driver anew; the prepared claims are written again too.
    """

    def __init__(
        self, paths: Paths, service: DraService, on_registered: Callable[[], None] | None = None
    ) -> None:
        """``on_registered()`` is called each time the kubelet confirms the registration."""
        self.paths = paths
        self.service = service
        self.health = HealthService(service.pool, service.inventory)

        def registered() -> None:
            self.health.registered()
            if on_registered is not None:
                on_registered()

        self.registrar = Registrar(paths.driver, paths.dra_socket.absolute(), registered, service.report)
        self._servers: list[tuple[Path, grpc.aio.Server, tuple[int, int] | None]] = []

    async def start(self) -> None:
        def add_dra(server: grpc.aio.Server) -> None:
            for version in api.VERSIONS:
                api.add_dra_servicer(version, self.service, server)
            for version in api.HEALTH_VERSIONS:
                api.add_health_servicer(version, self.health, server)

        try:
            for path, add in (
                (self.paths.dra_socket, add_dra),
                (self.paths.registration_socket, lambda s: api.add_registration_servicer(self.registrar, s)),
            ):
                server = await _listen(path, add)
                self._servers.append((path, server, _identity(path)))
        except BaseException:
            await self.stop()
            raise

    async def stop(self, grace: float = 1.0) -> None:
        self.health.shutdown()
        self.registrar.unregistered()
        while self._servers:
            path, server, bound = self._servers.pop()
            await server.stop(grace)
            if bound is not None and _identity(path) == bound:
                path.unlink(missing_ok=True)

    async def recover(self) -> bool:
        """Start when not serving (the first time, or a socket is gone or replaced, or a start
        failed); True when it did. Then write the prepared claims again if their file is gone
        (StateWriteError if it fails)."""
        intact = len(self._servers) == 2 and all(_identity(p) == inode for p, _, inode in self._servers)
        if not intact:
            if self._servers:
                log.warning(
                    "a DRA plugin socket of %s disappeared; serving and registering again", self.paths.driver
                )
            await self.stop()
            await self.start()
        await self.service.restore()
        return not intact

    async def __aenter__(self) -> KubeletPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
