"""NUMA lookup now lives in the inventory; this name stays for the daemon."""

from cdi_plugin.inventory.numa import NumaLocator

__all__ = ["NumaLocator"]
