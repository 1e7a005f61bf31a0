"""``cdi-plugin serve --scan``: the watcher of ``cdi-gen watch`` and the device plugin in one process.

This is the usual DaemonSet shape: one container per node both generates the specs and serves
them. The watcher writes into one of the plugin's spec directories (the first one by default),
atomically, so that runtimes find the names, and hands each spec file to the plugin's inventory
(:meth:`~cdi_plugin.inventory.SpecInventory.accept`) as soon as it is renamed into place (the
directory sync and the rest of the batch follow): the plugin serves it at once, without waiting
for its own inotify event, and without reading, parsing, validating or hashing the file again;
that event then finds the file unchanged. The plugin follows the directory as it
follows any other for every other change. Both run in one event loop (the watcher's scans in a
worker thread) and stop together on SIGTERM, SIGINT or SIGHUP, or when one of them fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdi_plugin.cdi.model import Spec
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.discovery.udev import MonitorSource
from cdi_plugin.errors import ConfigError
from cdi_plugin.inventory import SpecInventory
from cdi_plugin.metrics import ScanMetrics
from cdi_plugin.scan import DEFAULT_MAX_VERSION, ScanOptions
from cdi_plugin.scan.watcher import Watcher
from cdi_plugin.scan.watchoptions import WatchOptions
from cdi_plugin.store.registry import Stat


def make_watcher(
    settings: Settings,
    config_file: Path | None,
    *,
    output_dir: Path | None = None,
    fmt: str | None = None,
    max_version: str | None = None,
    source: str | None = None,
    uevent_source: str | None = None,
    allow_hooks_and_mounts: bool = False,
    runtimes: tuple[str, ...] = (),
    metrics: ScanMetrics | None = None,
    inventory: SpecInventory | None = None,
    check_plugin: Callable[[Any, str], object] | None = None,
) -> Watcher:
    """The watcher for ``serve --scan``, handing what it writes to ``inventory``, refusing an edit
    of the configuration whose ``plugin`` section ``check_plugin`` refuses; raises
    ``ConfigError`` (a bad configuration, or an output directory the plugin does not read) or
    ``DiscoveryError``."""
    out = Path(os.path.abspath(output_dir if output_dir is not None else settings.spec_dirs[0]))
    served = [Path(os.path.abspath(d)) for d in settings.spec_dirs]
    if out not in served:
        raise ConfigError(
            f"--output-dir {out}: not one of the plugin's spec directories "
            f"({', '.join(str(d) for d in served)}), so the plugin would never see the specs; "
            f"add --spec-dir {out}"
        )
    events: MonitorSource | None = (
        "udev" if uevent_source == "udev" else "kernel" if uevent_source == "kernel" else None
    )
    options = WatchOptions(
        scan=ScanOptions(
            config=config_file,
            output_dir=out,
            fmt="yaml" if fmt == "yaml" else "json",
            max_version=max_version or DEFAULT_MAX_VERSION,
            skip_refused=True,
            allow_hooks_and_mounts=allow_hooks_and_mounts,
            spec_dirs=settings.spec_dirs,
            runtimes=runtimes,
        ),
        source=source or "udev",
        uevent_source=events,
        plugin_section_used=config_file is not None,
        check_plugin=check_plugin,
    )
    if inventory is None:
        return Watcher(options, metrics=metrics)

    def written(path: Path, spec: Spec | None, stat: Stat | None) -> None:
        inventory.accept({path: spec}, {path: stat})

    return Watcher(options, metrics=metrics, on_written=written)
