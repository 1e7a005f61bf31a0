"""``cdi-plugin``: the Kubernetes device plugin that serves CDI devices by name.

This module imports only click; ``serve`` imports gRPC and the plugin when it runs, so that
``cdi-plugin --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cdi_plugin import __version__
from cdi_plugin.cli.helpsections import SectionedCommand
from cdi_plugin.cli.scanopts import (
    JsonErrorsGroup,
    PathOf,
    absolute,
    fail,
    format_option,
    log_format_option,
    max_version_option,
    metrics_address_option,
    output_dir_option,
    parsed,
    runtime_option,
    source_option,
    uevent_source_option,
)
from cdi_plugin.deviceplugin.settings import ALLOW_BOTH_FLAG, APIS, MAX_REPLICAS, STRATEGIES, parse_duration
from cdi_plugin.dra.names import DEFAULT_DRIVER, DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR

PROGRAM = "cdi-plugin"
#: Where the DaemonSet puts the node's name (the downward API's spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
#: Where the DRA component puts the pod's UID (the downward API's metadata.uid).
POD_UID_ENV = "POD_UID"


#: The sections of ``serve --help`` and their options (parameter names), in order.
SERVE_SECTIONS = {
    "Devices served (both kubelet APIs)": ["config_file", "spec_dirs", "kinds", "grace_period", "api",
                                           "allow_exclusive_kinds_on_both_apis"],
    "Device plugin API": ["plugin_dir", "kubelet_socket_path", "replicas", "cdi_strategy"],
    "Scanner (with --scan)": [
        "scan", "output_dir", "fmt", "cdi_version_max", "runtimes", "source", "uevent_source",
        "allow_hooks_and_mounts",
    ],
    "DRA driver (with --api dra or both)": [
        "driver_name", "node_name", "kubeconfig", "kubelet_plugins_dir", "kubelet_registry_dir", "pod_uid",
    ],
    "Logging and metrics": ["log_format", "metrics_address", "verbose"],
}  # fmt: skip


def _kinds(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...] | None:
    for glob in value:
        vendor, sep, class_ = glob.partition("/")
        if not sep or not vendor or not class_ or "/" in class_ or any(c.isspace() for c in glob):
            raise click.BadParameter(
                f"{glob!r} is not a kind: use vendor/class, globs allowed (vendor.example/*)"
            )
    return value or None


def _dirs(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> tuple[Path, ...] | None:
    return tuple(absolute(p) for p in value) or None


def _absolute(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    return None if value is None else absolute(value)


@click.group(cls=JsonErrorsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cdi-plugin")
def main() -> None:
    """Kubernetes device plugin and DRA driver for CDI devices.

    Serves the devices described by CDI spec files (/etc/cdi, /var/run/cdi) to the kubelet: as a
    device plugin, one extended resource per CDI kind, and (serve --api dra or both) as a DRA
    driver publishing ResourceSlices. Either answers with nothing but CDI device names.

    Runtimes configured to read other directories: set CDI_SPEC_DIRS (e.g.
    /etc/cdi:/var/run/cdi:/opt/cdi, lowest priority first), the default of --spec-dir.
    """


@main.command(
    cls=SectionedCommand,
    sections=SERVE_SECTIONS,
    short_help="Serve CDI devices to the kubelet as a device plugin and a DRA driver.",
)
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=PathOf("directory"),
    callback=_dirs,
    metavar="DIR",
    help="CDI spec directory, lowest priority first; repeat for several "
    "[default: the 'plugin' section's specDirs, else $CDI_SPEC_DIRS, else /etc/cdi then /var/run/cdi]. "
    "A directory that does not exist yet is watched for.",
)
@click.option(
    "--plugin-dir",
    type=PathOf("directory"),
    default=None,
    callback=_absolute,
    metavar="DIR",
    help="The kubelet's device plugin directory, where the plugin's sockets go "
    "[default: /var/lib/kubelet/device-plugins].",
)
@click.option(
    "--kubelet-socket",
    "kubelet_socket_path",
    type=PathOf("socket"),
    default=None,
    callback=_absolute,
    metavar="PATH",
    help="The kubelet's registration socket [default: <plugin-dir>/kubelet.sock].",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    callback=_kinds,
    metavar="GLOB",
    help="Also serve the CDI kinds matching GLOB (e.g. vendor.example/*); repeatable. By default "
    "only the kinds cdi-gen wrote are served, never a vendor's own (its device plugin owns the name).",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, MAX_REPLICAS),
    default=None,
    metavar="N",
    help="Advertise each device N times so that N containers can share it [default: 1]; per-kind "
    "values in the configuration file win.",
)
@click.option(
    "--cdi-strategy",
    type=click.Choice(STRATEGIES),
    default=None,
    help="Where Allocate puts the CDI names: the cdi_devices field (cri; kubelet >= 1.29, or 1.28 "
    "with DevicePluginCDIDevices), cdi.k8s.io/ annotations (annotations; for runtimes that only "
    "read those), or both [default: both]. See docs/device-plugin.md.",
)
@click.option(
    "--grace-period",
    callback=parsed(parse_duration),
    metavar="DURATION",
    help="How long a device whose spec entry disappeared stays advertised as Unhealthy before it "
    "is dropped, e.g. 90s, 5m, 1h [default: 5m].",
)
@click.option(
    "--config",
    "config_file",
    type=PathOf("file"),
    default=None,
    metavar="FILE",
    help="Configuration file (YAML); its 'plugin' section sets the defaults of these options "
    "and, per kind, replicas and the API serving it.",
)
@click.option(
    "--scan",
    is_flag=True,
    help="Also generate the specs, as cdi-gen watch does: scan the host, then rescan on udev events "
    "and --config edits, writing into --output-dir. One process per node (see docs/hotplug.md).",
)
@output_dir_option(" [default: the first --spec-dir].")
@format_option(None)
@max_version_option(None)
@source_option(None, watch=True)
@uevent_source_option
@runtime_option()
@click.option(
    "--allow-hooks-and-mounts",
    is_flag=True,
    default=None,
    help="Accept device classes with hooks or mounts. They run as root on the node and "
    "land in every container given the device, so a configuration (e.g. a ConfigMap) alone cannot "
    "add them [default: refused].",
)
@click.option(
    "--api",
    type=click.Choice(APIS),
    default=None,
    help="Which kubelet APIs serve the devices: the device plugin API, Dynamic Resource Allocation "
    "(dra), or both while a cluster migrates, each kind through the API its plugin.resources entry "
    "names (api), the device plugin when none does [default: the 'plugin' section's api, else "
    "device-plugin]. See docs/dra.md.",
)
@click.option(
    ALLOW_BOTH_FLAG,
    "allow_exclusive_kinds_on_both_apis",
    is_flag=True,
    default=None,
    help="Accept plugin.resources api: both for kinds with replicas 1 (as allowExclusiveKindsOnBothApis "
    "does). RISK: the scheduler counts extended resources and DRA claims apart, so it can give one "
    "such device (a USB serial adapter) to two pods at once, one through each API [default: refused].",
)
@click.option(
    "--driver-name",
    default=None,
    metavar="NAME",
    help=f"The DRA driver's name, a DNS subdomain [default: {DEFAULT_DRIVER}].",
)
@click.option(
    "--node-name",
    envvar=NODE_NAME_ENV,
    default=None,
    metavar="NAME",
    help=f"This node's name in the API server [default: ${NODE_NAME_ENV}].",
)
@click.option(
    "--kubeconfig",
    type=PathOf("file"),
    default=None,
    metavar="FILE",
    help="The API server's address and credentials [default: the pod's "
    "service account, else $KUBECONFIG, else ~/.kube/config].",
)
@click.option(
    "--kubelet-plugins-dir",
    type=PathOf("directory"),
    default=None,
    callback=_absolute,
    metavar="DIR",
    help=f"The kubelet's plugins directory; the DRA socket goes into "
    f"DIR/<driver>/ [default: {DEFAULT_PLUGINS_DIR}].",
)
@click.option(
    "--kubelet-registry-dir",
    type=PathOf("directory"),
    default=None,
    callback=_absolute,
    metavar="DIR",
    help=f"The kubelet's plugin watcher directory, where the registration "
    f"socket goes [default: {DEFAULT_REGISTRY_DIR}].",
)
@click.option(
    "--pod-uid",
    envvar=POD_UID_ENV,
    default=None,
    metavar="UID",
    help=f"This instance's pod UID, so that the old and the new pod of a DaemonSet update serve side by "
    f"side [default: ${POD_UID_ENV}]. With --api dra|both on a kubelet >= 1.33 the DRA sockets are "
    "named after it (an older kubelet: the fixed names, taken over once the old pod has stopped); a "
    "--metrics-address in use is waited for instead of refused. See docs/dra.md, Upgrades.",
)
@log_format_option
@metrics_address_option
@click.option("-v", "--verbose", is_flag=True, help="Also log debug messages (every ListAndWatch update).")
@click.option("--sysfs-root", type=PathOf("directory"), default=None, hidden=True)
def serve(
    *,
    config_file: Path | None,
    log_format: str,
    verbose: bool,
    metrics_address: tuple[str, int] | None,
    scan: bool,
    output_dir: Path | None,
    fmt: str | None,
    cdi_version_max: str | None,
    source: str | None,
    uevent_source: str | None,
    allow_hooks_and_mounts: bool | None,
    runtimes: tuple[str, ...],
    driver_name: str | None,
    node_name: str | None,
    kubeconfig: Path | None,
    kubelet_plugins_dir: Path | None,
    kubelet_registry_dir: Path | None,
    pod_uid: str | None,
    **flags: Any,
) -> None:
    """Serve CDI devices to the kubelet until SIGTERM, SIGINT or SIGHUP (exit status 0).

    Every CDI kind served becomes an extended resource named after the kind (vendor/class), every
    CDI device one or more devices of it. Allocate answers with the devices' fully-qualified CDI
    names only; the container runtime (containerd >= 1.7, CRI-O, iSulad) applies the specs.
    Spec files and device nodes are watched: devices come and go, turn Unhealthy when a host
    device node disappears and Healthy when it returns, and the plugin registers again by itself
    after a kubelet restart. A signal stops the servers and removes the sockets they bound; a
    restart reads the configuration again.

    With --scan the same process keeps the specs in step with the host, as 'cdi-gen watch' does,
    with the 'classes' of --config (the embedded default without): a device plugged in or removed
    reaches the kubelet within a fraction of a second.

    With --api dra or both the devices are also (or only) served as a DRA driver: published as
    ResourceSlices of this node through the API server, prepared for the kubelet with their CDI
    names. With both, each kind goes to one API: the one its plugin.resources entry names (api),
    else the device plugin; a kind shared by design (replicas above 1) may be named for both. It
    needs the node's name (--node-name, $NODE_NAME) and refuses to start if the API server does
    not know it; while the API server cannot be reached it retries, and the device plugin side
    serves meanwhile. An API server without resource.k8s.io/v1 (before 1.34) gets one error
    line: with both the device plugin serves on (and the API server is asked again every 10
    minutes), with dra the process stops.
    """
    import logging

    from cdi_plugin.cli.logs import configure
    from cdi_plugin.deviceplugin import settings
    from cdi_plugin.errors import CdiPluginError
    from cdi_plugin.process import check_config_in_child

    check_config_in_child()  # jsonschema-rs stays out of this long-running process
    configure("json" if log_format == "json" else "text", logging.DEBUG if verbose else logging.INFO)
    try:
        section = None
        if config_file is not None:
            from cdi_plugin.store.configfile import load_config

            section = load_config(config_file).get("plugin")
        config = settings.build(section, str(config_file), **flags)
    except CdiPluginError as exc:
        fail(PROGRAM, str(exc))
    scanner_options = {"--output-dir": output_dir, "--format": fmt, "--cdi-version-max": cdi_version_max,
                       "--source": source, "--uevent-source": uevent_source,
                       "--allow-hooks-and-mounts": allow_hooks_and_mounts,
                       "--runtime": runtimes or None}  # fmt: skip
    given = [name for name, value in scanner_options.items() if value is not None]
    if given and not scan:
        raise click.UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --scan")
    dra_flags = {"--driver-name": driver_name, "--kubeconfig": kubeconfig,
                 "--kubelet-plugins-dir": kubelet_plugins_dir,
                 "--kubelet-registry-dir": kubelet_registry_dir}  # fmt: skip
    given = [name for name, value in dra_flags.items() if value is not None]
    if given and config.api == "device-plugin":
        verb = "needs" if len(given) == 1 else "need"
        raise click.UsageError(f"{', '.join(given)} {verb} --api dra or both")
    if config.api == "device-plugin" and metrics_address is None:
        from cdi_plugin.process import forgo_openssl

        forgo_openssl()  # no TLS: neither the DRA driver's API client nor prometheus_client
    import asyncio
    import functools

    from cdi_plugin.deviceplugin import daemon
    from cdi_plugin.metrics import PluginMetrics, ScanMetrics

    metrics = PluginMetrics(spec_dirs=config.spec_dirs, export=metrics_address is not None)
    plugin = daemon.Daemon(config, metrics, endpoints=config.api != "dra")
    watcher = None
    if scan:
        from cdi_plugin.cli.serve_scan import make_watcher

        try:
            watcher = make_watcher(
                config,
                config_file,
                output_dir=output_dir,
                fmt=fmt,
                max_version=cdi_version_max,
                source=source,
                uevent_source=uevent_source,
                allow_hooks_and_mounts=bool(allow_hooks_and_mounts),
                runtimes=runtimes,
                metrics=None if metrics.registry is None else ScanMetrics(metrics.registry),
                inventory=plugin.state.inventory,
                check_plugin=lambda section, source: settings.build(section, source, **flags),
            )
        except CdiPluginError as exc:
            fail(PROGRAM, str(exc))
    jobs = [plugin.run] if watcher is None else [watcher.run, plugin.run]
    if config.api != "device-plugin":
        from cdi_plugin.cli.serve_dra import DraDriver, dra_options
        from cdi_plugin.cli.udev_facts import udev_facts
        from cdi_plugin.inventory import KindView

        plugin.state.inventory.facts = udev_facts()
        served = KindView(plugin.state.inventory, lambda kind: config.left_out("dra", kind), "DRA driver")

        try:
            options = dra_options(
                driver_name or DEFAULT_DRIVER,
                node_name,
                kubeconfig,
                kubelet_plugins_dir or DEFAULT_PLUGINS_DIR,
                kubelet_registry_dir or DEFAULT_REGISTRY_DIR,
                pod_uid=pod_uid,
                dra_only=config.api == "dra",
            )
            report = None
            if metrics.registry is not None:
                from cdi_plugin.metrics import DraMetrics

                report = DraMetrics(metrics.registry, metrics.probes, options.driver)
            jobs.append(DraDriver.connect(options, served, report).run)
        except CdiPluginError as exc:
            fail(PROGRAM, str(exc))
    from cdi_plugin.cli.service import run_until_stopped, serve_when_free, start_metrics_server

    if watcher is not None:
        metrics.probes.track("rescans", lambda: watcher.stalled_since)
    server = None
    if metrics_address is not None and metrics.registry is not None:
        server = start_metrics_server(
            metrics_address, metrics.registry, metrics.probes, PROGRAM, wait_if_busy=bool(pod_uid)
        )
        if not server.started:
            jobs.append(functools.partial(serve_when_free, server))
    try:
        asyncio.run(run_until_stopped(*jobs))
    except OSError as exc:
        fail(PROGRAM, f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")
    except CdiPluginError as exc:  # the watcher's event source failed
        fail(PROGRAM, str(exc))
    finally:
        if server is not None:
            server.close()


from cdi_plugin.cli.dra_objects import dra_objects  # noqa: E402  (a command of its own module)
from cdi_plugin.cli.prepared_claims import prepared_claims  # noqa: E402

main.add_command(dra_objects)
main.add_command(prepared_claims)


if __name__ == "__main__":
    main()
