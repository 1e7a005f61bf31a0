"""The pure CDI core: the spec model, names, versions, decoding and encoding, validation.

No I/O library and no other layer of the package. The model, names, versions and problems are
here; the codec (``codec.decode``, ``codec.encode``), the schema, validation and injection
(``inject``: what a runtime's CDI library gives a container for device names; ``oci``: an OCI
runtime spec it edits) are used as modules, imported where needed (the schema validator is loaded only then).

Public names:

* the spec model (:mod:`.model`): ``Spec``, ``Device``, ``ContainerEdits``, ``DeviceNode``,
  ``Mount``, ``Hook``;
* names (:mod:`.names`): ``Kind``, ``parse_kind``, ``parse_qualified_name``,
  ``validate_device_name``, ``natural_key``, ``short_hash``;
* versions (:mod:`.version`): ``minimum_version``, ``KNOWN_VERSIONS``, ``SUPPORTED_VERSIONS``,
  ``EARLIEST``;
* problems found by validation (:mod:`.problems`): ``Problem``, ``Severity``.
"""

from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdi_plugin.cdi.names import (
    Kind,
    natural_key,
    parse_kind,
    parse_qualified_name,
    short_hash,
    validate_device_name,
)
from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.cdi.version import EARLIEST, KNOWN_VERSIONS, SUPPORTED_VERSIONS, minimum_version

__all__ = [
    "EARLIEST",
    "KNOWN_VERSIONS",
    "SUPPORTED_VERSIONS",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "Kind",
    "Mount",
    "Problem",
    "Severity",
    "Spec",
    "minimum_version",
    "natural_key",
    "parse_kind",
    "parse_qualified_name",
    "short_hash",
    "validate_device_name",
]
