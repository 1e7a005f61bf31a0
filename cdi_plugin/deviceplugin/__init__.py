"""``cdi-plugin serve``: a kubelet device plugin (API v1beta1) that serves CDI kinds as extended resources.

Data comes only from the device inventory (:mod:`cdi_plugin.inventory`, fed by the CDI spec
files on disk); this package never imports :mod:`cdi_plugin.discovery` or
:mod:`cdi_plugin.generate`. Only :mod:`cdi_plugin.deviceplugin.api` imports the generated gRPC
code in ``_proto``.

Pure modules: settings, resources (the catalog), allocate, preferred, state (boards over the
inventory). I/O edges: registration and lifecycle (sockets, gRPC), servicer (gRPC handlers),
daemon (composition root, inotify, signals).
"""
