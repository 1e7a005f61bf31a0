"""``cdi-plugin serve --api dra|both``: the DRA driver in the serving process.

The driver serves the inventory the device plugin side keeps following (spec directories, host
device nodes, grace period), so both APIs always see the same devices. Its life in the process:

1. the driver and node names are checked, and the API server's credentials loaded, before
   anything starts (a one-line error otherwise);
2. the API server is asked for the node, again with backoff while it
   cannot be reached or fails (the device plugin side serves meanwhile); a node it says it does
   not know stops the process. Then for its discovery document of ``resource.k8s.io/v1``: an API
   server without it (before 1.34, or DRA turned off) gets one error line naming the cause and
   the fix, and the driver neither registers with the kubelet nor sends anything else; with
   ``--api both`` the device plugin serves on and the document is asked for again, silently,
   every :data:`DRA_API_RECHECK` seconds, so that an upgraded API server is used; with
   ``--api dra`` alone the process stops (exit status 1);
3. the sockets are named after the pod's UID when it is given and the node's kubelet (1.33 or
   later) serves two instances of a driver side by side, else fixed (one line says why);
   the prepared claims are read (a file that cannot be used is reported, and Prepare refused
   until it is repaired or moved away); the DRA socket, then the registration socket the kubelet's
   plugin watcher finds; the kubelet's two directories are watched, and a socket removed (a
   kubelet restart that wiped them) is bound again, so the plugin watcher registers the driver
   anew, and the prepared claims are written again when their file went. A socket another
   process serves (another instance of the driver) is never replaced: one line says so, and the
   driver serves once it is gone. Sockets served that no kubelet registers within
   :data:`REGISTER_WITHIN` seconds get one warning naming the registration socket;
4. the node's ResourceSlices are watched and follow the inventory: written when they differ
   from it, checked again whenever the kubelet registers the driver (a starting kubelet deletes
   its node's slices);
5. NodePrepareResources reads each claim it is asked for with a GET.

Nothing the API server answers ends the driver or touches the kubelet side and the device
plugin: failures are logged and retried with backoff. A stop removes both sockets (only the ones
it bound) and leaves the slices, the prepared claims and the lock to the instance that follows:
the kubelet deletes the slices once no instance of the driver is connected. docs/dra.md,
Upgrades, tells the whole sequence of an update.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.aio.dirwatch import DirWatch
from cdi_plugin.aio.run import run_until
from cdi_plugin.aio.sockets import MAX_SOCKET_PATH
from cdi_plugin.dra.backoff import Failures
from cdi_plugin.dra.inventory import Inventory
from cdi_plugin.dra.kube import KubeApi
from cdi_plugin.dra.kubelet import KubeletPlugin, Paths, SocketInUseError
from cdi_plugin.dra.names import DraConfigError, check_driver_name, check_node_name
from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError
from cdi_plugin.dra.publisher import RETRY, SlicePublisher
from cdi_plugin.dra.report import UNREPORTED, Report
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.rolling import check_pod_uid, fixed_names_reason
from cdi_plugin.dra.serialize import SerializeError, Serializer
from cdi_plugin.dra.service import DraService
from cdi_plugin.recurring import Recurring

log = logging.getLogger(__name__)

#: A burst of events in the kubelet's directories is handled once it has been quiet this long.
QUIET, LONGEST = 0.05, 0.5
#: How soon sockets that could not be bound again are tried again, without a new event.
REBIND_RETRY = 5.0
#: How often an API server without resource.k8s.io/v1 is asked again (with --api both).
DRA_API_RECHECK = 600.0
#: The kubelet's plugin watcher registers a driver within a second or two of its socket's creation;
#: not registered this long after, the driver says so once.
REGISTER_WITHIN = 60.0


@dataclass(frozen=True, slots=True)
class DraOptions:
    driver: str
    node: str
    paths: Paths
    kubeconfig: Path | None = None
    #: --api dra: no device plugin side to serve on when the API server has no DRA.
    dra_only: bool = False


def dra_options(
    driver: str,
    node: str | None,
    kubeconfig: Path | None,
    plugins_dir: Path,
    registry_dir: Path,
    *,
    pod_uid: str | None = None,
    dra_only: bool = False,
) -> DraOptions:
    """The options checked; DraConfigError names the option and says why it is refused."""
    try:
        check_driver_name(driver)
    except DraConfigError as exc:
        raise DraConfigError(f"--driver-name: {exc}") from None
    if not node:
        raise DraConfigError(
            "--node-name: not given and $NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)"
        )
    try:
        check_node_name(node)
    except DraConfigError as exc:
        raise DraConfigError(f"--node-name: {exc}") from None
    if pod_uid:
        try:
            check_pod_uid(pod_uid)
        except DraConfigError as exc:
            raise DraConfigError(f"--pod-uid: {exc}") from None
    paths = Paths(driver, registry_dir.absolute(), plugins_dir.absolute(), pod_uid or "")
    for option, path in (
        ("--kubelet-plugins-dir", paths.dra_socket),
        ("--kubelet-registry-dir", paths.registration_socket),
    ):
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise DraConfigError(
                f"{option}: the socket {path} is longer than gRPC binds ({MAX_SOCKET_PATH} bytes)"
            )
    return DraOptions(driver, node, paths, kubeconfig, dra_only)


class DraDriver:
    """The driver as one job of ``serve``: :meth:`run` until the stop event is set. What it does
    goes to ``report`` (its metrics and readiness with ``--metrics-address``)."""

    def __init__(
        self,
        options: DraOptions,
        inventory: Inventory,
        kube: KubeApi,
        report: Report = UNREPORTED,
        *,
        recheck: float = DRA_API_RECHECK,
        register_within: float = REGISTER_WITHIN,
    ) -> None:
        self.options = options
        self.inventory = inventory
        self.kube = kube
        self.report = report
        kube.rest.report = report
        self.publisher = SlicePublisher(kube, report=report)
        self.recheck = recheck
        self.register_within = register_within
        #: Why the driver waits and serves nothing (the API server has no DRA), while it does.
        self.not_started: str | None = None

    @classmethod
    def connect(cls, options: DraOptions, inventory: Inventory, report: Report | None = None) -> DraDriver:
        """Loads the API server's credentials; DraConfigError when there are none or they are broken
        (without --kubeconfig, saying where they come from)."""
        try:
            kube = KubeApi.connect(options.driver, options.node, options.kubeconfig)
        except DraConfigError as exc:
            if options.kubeconfig is not None:
                raise
            raise DraConfigError(
                f"{exc}; in a pod, run with the service account and token that deploy/dra gives the "
                "DaemonSet (serviceAccountName, automountServiceAccountToken: true), elsewhere give "
                "--kubeconfig"
            ) from None
        return cls(options, inventory, kube, report or UNREPORTED)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_until(stop, self._serve())
        finally:
            await self.kube.close()

    async def _serve(self) -> None:
        o = self.options
        await self._confirm_node()
        await self._await_dra_api()
        paths = self._instance_paths()
        log.info(
            "DRA driver %s on node %s: sockets %s and %s",
            o.driver, o.node, paths.dra_socket, paths.registration_socket,
        )  # fmt: skip
        prepared = PreparedClaims(paths.state_file)
        service = DraService(
            o.driver, o.node, self.inventory, self.kube, prepared,
            serializer=Serializer(paths.lock_file), report=self.report,
        )  # fmt: skip
        plugin = KubeletPlugin(paths, service, on_registered=self.publisher.wake)
        await self.inventory.settled()  # the first reading of the spec directories, not an empty pool
        kept = {paths.dra_socket, paths.registration_socket, paths.state_file}
        async with DirWatch(
            [paths.registry_dir, paths.plugin_dir],
            name="kubelet plugin dirs",
            relevant=lambda directory, name: directory / name in kept,
        ) as watch:
            try:
                jobs = (
                    self.publisher.run(self.inventory),
                    _keep_bound(plugin, watch, self.register_within),
                    _report_devices(self.inventory, self.report),
                )
                await run_until(asyncio.Event(), *jobs)
            finally:
                await plugin.stop()

    def _instance_paths(self) -> Paths:
        """The sockets named after the pod's UID, unless the kubelet cannot serve two instances
        side by side (said in one line): then the fixed names."""
        o = self.options
        why = fixed_names_reason(self.kube.kubelet_version) if o.paths.pod_uid else None
        if why is None:
            return o.paths
        log.warning(
            "DRA driver %s: fixed socket names on node %s, as %s: during an update the new "
            "instance serves once the old one has stopped (docs/dra.md, Upgrades)",
            o.driver, o.node, why,
        )  # fmt: skip
        return dataclasses.replace(o.paths, pod_uid="")

    async def _confirm_node(self) -> None:
        """Return once the API server knows the node; DraConfigError when it says there is none."""
        failures, failing = Failures(RETRY), Recurring(log, prefix=f"DRA driver {self.options.driver}: ")
        while True:
            try:
                await self.kube.read_node_uid()
                failing.recovered()
                return
            except ApiServerError as exc:
                delay = failures.next_delay(exc.retry_after)
                failing.report(
                    logging.ERROR, f"cannot confirm node {self.options.node}",
                    f": {exc}; not registered with the kubelet yet, trying again in {delay:.0f} s",
                )  # fmt: skip
                await asyncio.sleep(delay)

    async def _await_dra_api(self) -> None:
        """Return once the API server serves resource.k8s.io/v1. Without it: one error line, then
        (with --api both) the question again every :attr:`recheck` seconds, silently;
        DraConfigError with --api dra. An answer that tells nothing (an error, a proxy's page)
        is logged and asked again with backoff, as for the node."""
        o = self.options
        failures, failing = Failures(RETRY), Recurring(log, prefix=f"DRA driver {o.driver}: ")
        while True:
            try:
                problem = await self.kube.dra_api_problem()
            except ApiServerError as exc:
                if self.not_started is None:
                    delay = failures.next_delay(exc.retry_after)
                    failing.report(
                        logging.ERROR, "cannot tell whether the API server serves DRA",
                        f": {exc}; not registered with the kubelet yet, trying again in {delay:.0f} s",
                    )  # fmt: skip
                else:  # said once already: the next question, as planned
                    delay = self.recheck
                    log.debug("DRA driver %s: %s", o.driver, exc)
                await asyncio.sleep(delay)
                continue
            failing.recovered()
            if problem is None:
                if self.not_started is not None:
                    log.info("DRA driver %s: the API server serves DRA now; starting", o.driver)
                    self.not_started = None
                    self.report.serving(True)
                return
            if o.dra_only:
                raise DraConfigError(
                    f"{problem}: the DRA driver {o.driver} is not started; run with --api device-plugin, "
                    "or on a cluster that serves it"
                )
            if self.not_started is None:
                self.not_started = problem
                self.report.serving(False)
                log.error(
                    "%s: the DRA driver %s is not started; run with --api device-plugin, or turn DRA on "
                    "(asked again every %g s)",
                    problem, o.driver, self.recheck,
                )  # fmt: skip
            await asyncio.sleep(self.recheck)


async def _report_devices(inventory: Inventory, report: Report) -> None:
    """Report the health of the devices published, by kind, as they change."""
    async for devices in inventory.changes():
        health: dict[str, list[bool]] = {}
        for device in devices.values():
            health.setdefault(device.kind, []).append(device.healthy)
        report.devices(health)


async def _keep_bound(plugin: KubeletPlugin, watch: DirWatch, register_within: float) -> None:
    """Serve the sockets, and again whenever one is gone (or another process let them go); write
    the prepared claims again when their file is gone. Checked after every event in their
    directories; each problem is logged once, while it lasts, and so is a kubelet that has not
    registered the driver ``register_within`` seconds after its sockets were bound."""
    seen = watch.pulse.count
    problem = ""
    waited = False  # for another process to let the sockets go
    expecting: asyncio.TimerHandle | None = None
    try:
        while True:
            try:
                if await plugin.recover():
                    if expecting is not None:
                        expecting.cancel()
                    expecting = asyncio.get_running_loop().call_later(
                        register_within, _not_registered, plugin, register_within
                    )
            except (OSError, SocketInUseError, StateWriteError, SerializeError) as exc:
                waited = isinstance(exc, SocketInUseError)
                if waited:
                    now = f"DRA driver {plugin.paths.driver}: {exc}; serving once it is gone"
                elif isinstance(exc, (StateWriteError, SerializeError)):
                    now = f"cannot write the prepared claims again: {exc}; trying again"
                else:
                    now = f"cannot serve the DRA sockets: {exc}; trying again"
                if now != problem:
                    (log.warning if waited else log.error)("%s", now)
                problem = now
                await watch.pulse.wait_after(seen, REBIND_RETRY)
                seen = watch.pulse.count
                continue
            if waited:
                log.info("DRA driver %s: the other process is gone; serving", plugin.paths.driver)
            problem, waited = "", False
            seen = await watch.pulse.settle(seen, QUIET, LONGEST)
    finally:
        if expecting is not None:
            expecting.cancel()


def _not_registered(plugin: KubeletPlugin, register_within: float) -> None:
    """Say that the kubelet has not registered the driver (a refusal was said already)."""
    if plugin.registrar.registered.is_set() or plugin.registrar.error:
        return
    log.warning(
        "DRA driver %s: not registered by the kubelet %g s after serving %s; check that the kubelet "
        "runs with DRA on and that this is its plugins_registry directory (its --root-dir; "
        "--kubelet-registry-dir)",
        plugin.paths.driver, register_within, plugin.paths.registration_socket,
    )  # fmt: skip
