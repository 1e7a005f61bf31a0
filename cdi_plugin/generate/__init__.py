"""Discovered devices to CDI specs: device classes, matching, naming, container edits, spec building.

Pure: no file or device I/O apart from reading the embedded default config (package data).
Never imports the device plugin; the two halves meet only through spec files.

Public names:

* device classes (:mod:`.config`): ``DeviceClass``, ``parse_classes``, ``default_classes``,
  ``classes_of``;
* matching (:mod:`.match`): ``match_devices``, ``query_for``;
* building specs (:mod:`.builder`): ``build_specs``, ``BuildResult``, ``BuiltSpec``.
"""

from cdi_plugin.generate.builder import BuildResult, BuiltSpec, build_specs
from cdi_plugin.generate.config import DeviceClass, classes_of, default_classes, parse_classes
from cdi_plugin.generate.match import match_devices, query_for

__all__ = [
    "BuildResult",
    "BuiltSpec",
    "DeviceClass",
    "build_specs",
    "classes_of",
    "default_classes",
    "match_devices",
    "parse_classes",
    "query_for",
]
