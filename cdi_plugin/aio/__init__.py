"""Generic asyncio tools, with no knowledge of devices or specs: a pulse tasks wait on
(:mod:`.pulse`), coalescing of event bursts (:mod:`.coalesce`), inotify on directories that may
not exist yet (:mod:`.dirwatch`), running tasks as one group until a stop (:mod:`.run`), and
asking whether anyone listens on a unix socket (:mod:`.sockets`).

Public names, each imported from its module on first use (asyncinotify only with ``DirWatch``):

* events: ``Pulse``, ``Coalescer``; directories: ``DirWatch`` and its event masks ``ENTRIES``,
  ``FILES``;
* running: ``run_until``, ``run_jobs``, ``cancel_and_wait``, ``stop_on_signals``, ``STOP_SIGNALS``;
* sockets: ``someone_listens``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "ENTRIES",
    "FILES",
    "STOP_SIGNALS",
    "Coalescer",
    "DirWatch",
    "Pulse",
    "cancel_and_wait",
    "run_jobs",
    "run_until",
    "someone_listens",
    "stop_on_signals",
]

if TYPE_CHECKING:
    from cdi_plugin.aio.coalesce import Coalescer
    from cdi_plugin.aio.dirwatch import ENTRIES, FILES, DirWatch
    from cdi_plugin.aio.pulse import Pulse
    from cdi_plugin.aio.run import STOP_SIGNALS, cancel_and_wait, run_jobs, run_until, stop_on_signals
    from cdi_plugin.aio.sockets import someone_listens
else:
    __getattr__ = exports(
        __name__,
        {
            "coalesce": ["Coalescer"],
            "dirwatch": ["ENTRIES", "FILES", "DirWatch"],
            "pulse": ["Pulse"],
            "run": ["STOP_SIGNALS", "cancel_and_wait", "run_jobs", "run_until", "stop_on_signals"],
            "sockets": ["someone_listens"],
        },
    )
