"""The spec directories' reader now lives in the inventory; this name stays for the daemon."""

from cdi_plugin.inventory.source import SpecSource

__all__ = ["SpecSource"]
