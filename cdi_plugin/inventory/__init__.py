"""The device inventory: which devices this node serves, in which kind, with which health and
NUMA node, and which CDI name each resolves to; fed by the spec directories, followed by its
consumers (the kubelet device plugin, the DRA driver) through a change stream.

record: the device record every consumer reads; source: one consistent reading of the spec
directories and cdi-gen's ownership records; readings: when it is taken, and whether a change may be
pending; selection: the kinds served; health and numa: the host device nodes; grace: the grace
period; problems: skipped files, logged once; spec_inventory: the parts put together; view: the
inventory restricted to the kinds one consumer serves. Nothing here knows gRPC, the kubelet, DRA,
discovery or the CLI.

Public names:

* the inventory and its input: ``SpecInventory``, ``SpecSource``, ``Reading``, ``NumaLocator``;
  the view of one consumer, ``KindView``;
* what consumers read: ``ServedDevice``, ``UdevFacts`` and the reasons ``GONE_REASON``,
  ``NOT_SERVED_REASON``.
"""

from cdi_plugin.inventory.numa import NumaLocator
from cdi_plugin.inventory.record import GONE_REASON, NOT_SERVED_REASON, ServedDevice, UdevFacts
from cdi_plugin.inventory.source import Reading, SpecSource
from cdi_plugin.inventory.spec_inventory import SpecInventory
from cdi_plugin.inventory.view import KindView

__all__ = [
    "GONE_REASON",
    "NOT_SERVED_REASON",
    "KindView",
    "NumaLocator",
    "Reading",
    "ServedDevice",
    "SpecInventory",
    "SpecSource",
    "UdevFacts",
]
