"""``cdi-plugin serve``: a kubelet device plugin (API v1beta1) that serves CDI kinds as extended resources.

Data comes only from the device inventory (:mod:`cdi_plugin.inventory`, fed by the CDI spec
files on disk); this package never imports :mod:`cdi_plugin.discovery` or
:mod:`cdi_plugin.generate`. Only :mod:`cdi_plugin.deviceplugin.api` imports the generated gRPC
code in ``_proto``.

Pure modules: settings, resources (the catalog), allocate, preferred, state (boards over the
inventory). I/O edges: registration and lifecycle (sockets, gRPC), servicer (gRPC handlers),
daemon (composition root, inotify, signals).

Public names, each imported from its module on first use (gRPC only with the edges):

* the composition root and its settings: ``Daemon``, ``Settings``, ``parse_duration``,
  ``DEFAULT_PLUGIN_DIR``, ``DEFAULT_GRACE_PERIOD``;
* the pure core: ``DeviceState``, ``Catalog``, ``build_catalog``, ``AllocationError``;
* the gRPC edges: ``DevicePluginService``, ``Endpoint``, ``EndpointError``, ``register``,
  ``RegistrationError``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_PLUGIN_DIR",
    "AllocationError",
    "Catalog",
    "Daemon",
    "DevicePluginService",
    "DeviceState",
    "Endpoint",
    "EndpointError",
    "RegistrationError",
    "Settings",
    "build_catalog",
    "parse_duration",
    "register",
]

if TYPE_CHECKING:
    from cdi_plugin.deviceplugin.allocate import AllocationError
    from cdi_plugin.deviceplugin.daemon import Daemon
    from cdi_plugin.deviceplugin.lifecycle import Endpoint, EndpointError
    from cdi_plugin.deviceplugin.registration import RegistrationError, register
    from cdi_plugin.deviceplugin.resources import Catalog, build_catalog
    from cdi_plugin.deviceplugin.servicer import DevicePluginService
    from cdi_plugin.deviceplugin.settings import (
        DEFAULT_GRACE_PERIOD,
        DEFAULT_PLUGIN_DIR,
        Settings,
        parse_duration,
    )
    from cdi_plugin.deviceplugin.state import DeviceState
else:
    __getattr__ = exports(
        __name__,
        {
            "allocate": ["AllocationError"],
            "daemon": ["Daemon"],
            "lifecycle": ["Endpoint", "EndpointError"],
            "registration": ["RegistrationError", "register"],
            "resources": ["Catalog", "build_catalog"],
            "servicer": ["DevicePluginService"],
            "settings": ["DEFAULT_GRACE_PERIOD", "DEFAULT_PLUGIN_DIR", "Settings", "parse_duration"],
            "state": ["DeviceState"],
        },
    )
