"""``cdi-plugin serve --api dra|both``: the DRA driver in the serving process.

The driver serves the inventory the device plugin side keeps following (spec directories, host
device nodes, grace period), so both APIs always see the same devices. Its life in the process:

1. the driver and node names are checked, and the API server's credentials loaded, before
   anything starts (a one-line error otherwise);
2. the API server is asked for the node (its one GET of the node), again with backoff while it
   cannot be reached or fails (the device plugin side serves meanwhile); a node it says it does
   not know stops the process;
3. the prepared claims are read (a file that cannot be used is reported, and Prepare refused
   until it is repaired or moved away); the DRA socket, then the registration socket the kubelet's
   plugin watcher finds; the kubelet's two directories are watched, and a socket removed (a
   kubelet restart that wiped them) is bound again, so the plugin watcher registers the driver
   anew, and the prepared claims are written again when their file went;
4. the node's ResourceSlices are watched and follow the inventory: written when they differ
   from it, checked again whenever the kubelet registers the driver (a starting kubelet deletes
   its node's slices);
5. NodePrepareResources reads each claim it is asked for with a GET.

Nothing the API server answers ends the driver or touches the kubelet side and the device
plugin: failures are logged and retried with backoff. A stop removes both sockets and leaves the
slices: the kubelet deletes them once no driver instance is connected.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.aio.dirwatch import DirWatch
from cdi_plugin.aio.run import run_until
from cdi_plugin.dra.backoff import Failures
from cdi_plugin.dra.inventory import Inventory
from cdi_plugin.dra.kube import KubeApi
from cdi_plugin.dra.kubelet import DraService, KubeletPlugin, Paths, SocketInUseError
from cdi_plugin.dra.names import DraConfigError, check_driver_name, check_node_name
from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError
from cdi_plugin.dra.publisher import RETRY, SlicePublisher
from cdi_plugin.dra.rest import ApiServerError

log = logging.getLogger(__name__)

#: gRPC refuses longer unix socket paths.
MAX_SOCKET_BYTES = 107
#: A burst of events in the kubelet's directories is handled once it has been quiet this long.
QUIET, LONGEST = 0.05, 0.5
#: How soon sockets that could not be bound again are tried again, without a new event.
REBIND_RETRY = 5.0


@dataclass(frozen=True, slots=True)
class DraOptions:
    driver: str
    node: str
    paths: Paths
    kubeconfig: Path | None = None


def dra_options(
    driver: str, node: str | None, kubeconfig: Path | None, plugins_dir: Path, registry_dir: Path
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
    paths = Paths(driver, registry_dir=registry_dir.absolute(), plugins_dir=plugins_dir.absolute())
    for option, path in (
        ("--kubelet-plugins-dir", paths.dra_socket),
        ("--kubelet-registry-dir", paths.registration_socket),
    ):
        if len(os.fsencode(path)) > MAX_SOCKET_BYTES:
            raise DraConfigError(
                f"{option}: the socket {path} is longer than a unix socket allows ({MAX_SOCKET_BYTES} bytes)"
            )
    return DraOptions(driver, node, paths, kubeconfig)


class DraDriver:
    """The driver as one job of ``serve``: :meth:`run` until the stop event is set."""

    def __init__(self, options: DraOptions, inventory: Inventory, kube: KubeApi) -> None:
        self.options = options
        self.inventory = inventory
        self.kube = kube
        self.publisher = SlicePublisher(kube)

    @classmethod
    def connect(cls, options: DraOptions, inventory: Inventory) -> DraDriver:
        """Loads the API server's credentials; DraConfigError when there are none or they are broken."""
        return cls(options, inventory, KubeApi.connect(options.driver, options.node, options.kubeconfig))

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_until(stop, self._serve())
        finally:
            await self.kube.close()

    async def _serve(self) -> None:
        o = self.options
        log.info(
            "DRA driver %s on node %s: sockets %s and %s",
            o.driver, o.node, o.paths.dra_socket, o.paths.registration_socket,
        )  # fmt: skip
        await self._confirm_node()
        prepared = PreparedClaims(o.paths.state_file)
        service = DraService(o.driver, o.node, self.inventory, self.kube, prepared)
        plugin = KubeletPlugin(o.paths, service, on_registered=self.publisher.wake)
        await self.inventory.settled()  # the first reading of the spec directories, not an empty pool
        kept = {o.paths.dra_socket, o.paths.registration_socket, o.paths.state_file}
        async with (
            DirWatch(
                [o.paths.registry_dir, o.paths.plugin_dir],
                name="kubelet plugin dirs",
                relevant=lambda directory, name: directory / name in kept,
            ) as watch,
            plugin,
        ):
            await run_until(asyncio.Event(), self.publisher.run(self.inventory), _keep_bound(plugin, watch))

    async def _confirm_node(self) -> None:
        """Return once the API server knows the node; DraConfigError when it says there is none."""
        failures = Failures(RETRY)
        while True:
            try:
                await self.kube.read_node_uid()
                return
            except ApiServerError as exc:
                delay = failures.next_delay()
                log.error(
                    "DRA driver %s: cannot confirm node %s: %s; not registered with the kubelet yet, "
                    "trying again in %.0f s",
                    self.options.driver, self.options.node, exc, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)


async def _keep_bound(plugin: KubeletPlugin, watch: DirWatch) -> None:
    """Bind the sockets again whenever one is gone, and write the prepared claims again when their
    file is (checked after every event in their directories)."""
    seen = watch.pulse.count
    while True:
        try:
            await plugin.recover()
        except (OSError, SocketInUseError, StateWriteError) as exc:
            what = (
                "write the prepared claims" if isinstance(exc, StateWriteError) else "serve the DRA sockets"
            )
            log.error("cannot %s again: %s; trying again", what, exc)
            await watch.pulse.wait_after(seen, REBIND_RETRY)
            seen = watch.pulse.count
            continue
        seen = await watch.pulse.settle(seen, QUIET, LONGEST)
