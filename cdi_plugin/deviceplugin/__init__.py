"""``cdi-plugin serve``: a kubelet device plugin (API v1beta1) that serves CDI kinds as extended resources.

Data comes only from the CDI spec files on disk (read through :mod:`cdi_plugin.store`); this
package never imports :mod:`cdi_plugin.discovery` or :mod:`cdi_plugin.generate`. Only
:mod:`cdi_plugin.deviceplugin.api` imports the generated gRPC code in ``_proto``.

Pure modules: settings, resources, health, topology (sysfs reads only), allocate, preferred, state.
I/O edges: specsource (spec files), watch (inotify), registration and lifecycle (sockets, gRPC),
servicer (gRPC handlers), daemon (composition root, signals).
"""
