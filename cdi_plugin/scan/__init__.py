"""Scanning the host into CDI specs: the pipeline of ``cdi-gen scan`` (:mod:`.pipeline`) and the
watcher that reruns it for ``cdi-gen watch`` and ``serve --scan`` (:mod:`.watcher`).

Public names, each imported from its module on first use, so that a one-off scan does not load
inotify or the uevent monitor:

* the pipeline: ``run_scan``, ``ScanOptions``, ``ScanReport``, ``DEFAULT_MAX_VERSION``;
* the watcher: ``Watcher``, ``WatchOptions``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "DEFAULT_MAX_VERSION",
    "ScanOptions",
    "ScanReport",
    "WatchOptions",
    "Watcher",
    "run_scan",
]

if TYPE_CHECKING:
    from cdi_plugin.scan.pipeline import DEFAULT_MAX_VERSION, ScanOptions, ScanReport, run_scan
    from cdi_plugin.scan.watcher import Watcher
    from cdi_plugin.scan.watchoptions import WatchOptions
else:
    __getattr__ = exports(
        __name__,
        {
            "pipeline": ["DEFAULT_MAX_VERSION", "ScanOptions", "ScanReport", "run_scan"],
            "watcher": ["Watcher"],
            "watchoptions": ["WatchOptions"],
        },
    )
