"""Host device discovery (udev). Nothing here knows about CDI.

Sources come from :func:`make_source` (``udev``, ``simulated``, ``fixture:PATH``); pyudev is
imported only by :mod:`cdi_plugin.discovery.udev`, and only when the udev source is made.

Public names:

* what a source yields and answers (:mod:`.model`): ``DiscoveredDevice``, ``Query``,
  ``Discovery``, the ``DeviceSource`` protocol and ``StaticSource``;
* the factory (:mod:`.sources`): ``make_source``, ``source_problem``.
"""

from cdi_plugin.discovery.model import DeviceSource, DiscoveredDevice, Discovery, Query, StaticSource
from cdi_plugin.discovery.sources import make_source, source_problem

__all__ = [
    "DeviceSource",
    "DiscoveredDevice",
    "Discovery",
    "Query",
    "StaticSource",
    "make_source",
    "source_problem",
]
