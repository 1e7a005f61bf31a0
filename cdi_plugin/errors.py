"""Errors raised by cdi-plugin. The CLI turns each into a one-line message and an exit code.

Every exception class defined in the package derives from :class:`CdiPluginError`; the classes
defined elsewhere say in which module they live (tests/test_errors.py keeps this tree complete).

CdiPluginError
 ├── InvalidNameError      a kind, device name or qualified name breaks the CDI name rules
 ├── SpecLoadError         a spec file cannot be read or decoded (file, pointer, rule)
 ├── ConfigError           a device-class config is invalid (file, key, reason)
 ├── SpecWriteError        a spec could not be written; nothing on disk was changed
 │    ├── SpecInvalidError  a generated spec failed validation, so it was not written
 │    ├── LockTimeoutError  (store.dirlock) another scan held the directory's lock too long
 │    │    └── LockWaitStopped  (store.dirlock) the process stopped while it waited for the lock
 │    ├── ConflictError     (store.plan) a kind to write is defined by a spec cdi-gen does not own
 │    └── PartialWriteError (store.writer) applying stopped half-way; names what was done
 ├── DiscoveryError        udev or sysfs could not be read
 ├── GenerateError         devices could not become specs (name collision, version above the maximum)
 ├── TemplateError         (generate.template) a name or edit template is malformed
 ├── Refused               (generate.edits) a device or class cannot be given edits
 ├── InjectError           (cdi.inject) a device node a runtime could not create for a container
 ├── OciSpecError          (cdi.oci) an OCI runtime spec that CDI edits cannot be written into
 ├── RegistrationError     (deviceplugin.registration) the kubelet refused or did not answer Register
 ├── EndpointError         (deviceplugin.lifecycle) the plugin's socket cannot be served
 ├── AllocationError       (deviceplugin.allocate) an Allocate request cannot be served
 ├── DraConfigError        (dra.names) a driver or node name the Kubernetes API would refuse
 ├── ClaimReadError        (dra.prepare) a ResourceClaim could not be read
 ├── SocketInUseError      (dra.kubelet) another process serves a socket the driver would bind
 ├── SerializeError        (dra.serialize) the lock the driver's instances share could not be taken
 ├── PreparedStateError    (dra.preparedstate) the prepared-claims file is unreadable or a field is wrong
 ├── StateWriteError       (dra.prepared) the prepared claims could not be written; nothing changed
 ├── ApiServerError        (dra.rest) a request failed: refused, unanswered, or answered with garbage
 ├── BadAnswer             (dra.shapes) an answer that is not JSON, or a field of the wrong shape
 ├── Uncertain             (scan.livespecs) internal: a device's update needs a rescan of its class
 ├── _Ended                (aio.run) internal: ends a run loop's task group
 ├── _Err                  (cdi.codec) internal: a decoding problem before the source is attached
 ├── _NoCredentials        (dra.rest) internal: lightkube's authentication failed during a request
 ├── _TooBig               (dra.rest) internal: an answer passed its size bound
 ├── _Wrong                (dra.preparedstate) internal: a wrong field before the file is attached
 ├── _YamlRefused          (cdi.textparse) internal: a YAML construct a spec may not use
 ├── _NotFinite            (cdi.textparse) internal: a spec's JSON number that is not finite
 └── _Invalid              (generate.config) internal: a config problem before the source is attached
"""

from __future__ import annotations

from collections.abc import Sequence


class CdiPluginError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidNameError(CdiPluginError, ValueError):
    def __init__(self, message: str, rule: str = "name") -> None:
        super().__init__(message)
        self.rule = rule


class SpecLoadError(CdiPluginError):
    def __init__(self, source: str, pointer: str, rule: str, message: str, hint: str = "") -> None:
        self.source = source
        self.pointer = pointer
        self.rule = rule
        self.message = message
        self.hint = hint
        where = f"{source}: {pointer}: " if pointer else f"{source}: "
        super().__init__(where + message)


class ConfigError(CdiPluginError):
    """``problems`` holds every schema problem when the file failed validation."""

    problems: Sequence[object]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.problems = []


class SpecWriteError(CdiPluginError):
    """``nothing_written`` is True when the message already says that nothing was written."""

    def __init__(self, message: str, *, nothing_written: bool = False) -> None:
        super().__init__(message)
        self.nothing_written = nothing_written


class SpecInvalidError(SpecWriteError):
    pass


class DiscoveryError(CdiPluginError):
    pass


class GenerateError(CdiPluginError):
    """Discovered devices could not be turned into specs (a name collision, a version above the maximum)."""
