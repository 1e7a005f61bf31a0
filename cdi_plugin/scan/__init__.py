"""Scanning the host into CDI specs: the pipeline of ``cdi-gen scan`` (:mod:`.pipeline`) and the
watcher that reruns it for ``cdi-gen watch`` and ``serve --scan`` (:mod:`.watcher`).

The pipeline's names are re-exported here; the watcher is imported from its module, so that a
one-off scan does not load inotify or the uevent monitor.
"""

from cdi_plugin.scan.pipeline import (
    DEFAULT_MAX_VERSION,
    ScanOptions,
    ScanReport,
    run_scan,
)

__all__ = [
    "DEFAULT_MAX_VERSION",
    "ScanOptions",
    "ScanReport",
    "run_scan",
]
