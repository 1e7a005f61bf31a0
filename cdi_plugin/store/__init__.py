"""Files on disk: the spec directories as runtimes read them (``registry``), checks of spec files
(``validation``), planning (``plan``) and writing (``writer``) specs atomically with the ownership
record (``ownership``), the directory lock (``dirlock``) and the configuration file (``configfile``).

Knows nothing of discovery, generation, the plugin or the CLI. The public names are imported from
their modules on first use, so that a reader of one file does not load the schema validator:

* spec directories and files (:mod:`.files`): ``DEFAULT_SPEC_DIRS``, ``spec_dirs``,
  ``list_spec_files``, ``read_spec_bytes``;
* the directories as a runtime resolves them (:mod:`.registry`): ``SpecRegistry``, ``Snapshot``,
  ``ResolvedDevice``, ``NameConflict``, ``load_registry``, ``load_spec_file``;
* what cdi-gen owns (:mod:`.ownership`): ``RECORD_NAME``, ``OwnedFile``, ``read_record``,
  ``owned_kinds``;
* writing a scan (:mod:`.plan`, :mod:`.writer`, :mod:`.dirlock`, :mod:`.atomic`): ``plan_writes``,
  ``Plan``, ``apply``, ``Applied``, ``DirLock``, ``write_atomic`` and the errors ``ConflictError``,
  ``PartialWriteError``, ``LockTimeoutError``;
* state changed in place, two slots written in turn (:mod:`.slotfile`, imported by its users);
* checks of spec files (:mod:`.validation`): ``validate_paths``, ``ValidationReport``;
* the configuration file (:mod:`.configfile`): ``ConfigFile``, ``load_config``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "DEFAULT_SPEC_DIRS",
    "RECORD_NAME",
    "Applied",
    "ConfigFile",
    "ConflictError",
    "DirLock",
    "LockTimeoutError",
    "NameConflict",
    "OwnedFile",
    "PartialWriteError",
    "Plan",
    "ResolvedDevice",
    "Snapshot",
    "SpecRegistry",
    "ValidationReport",
    "apply",
    "list_spec_files",
    "load_config",
    "load_registry",
    "load_spec_file",
    "owned_kinds",
    "plan_writes",
    "read_record",
    "read_spec_bytes",
    "spec_dirs",
    "validate_paths",
    "write_atomic",
]

if TYPE_CHECKING:
    from cdi_plugin.store.atomic import write_atomic
    from cdi_plugin.store.configfile import ConfigFile, load_config
    from cdi_plugin.store.dirlock import DirLock, LockTimeoutError
    from cdi_plugin.store.files import DEFAULT_SPEC_DIRS, list_spec_files, read_spec_bytes, spec_dirs
    from cdi_plugin.store.ownership import RECORD_NAME, OwnedFile, owned_kinds, read_record
    from cdi_plugin.store.plan import ConflictError, Plan, plan_writes
    from cdi_plugin.store.registry import (
        NameConflict,
        ResolvedDevice,
        Snapshot,
        SpecRegistry,
        load_registry,
        load_spec_file,
    )
    from cdi_plugin.store.validation import ValidationReport, validate_paths
    from cdi_plugin.store.writer import Applied, PartialWriteError, apply
else:
    __getattr__ = exports(
        __name__,
        {
            "atomic": ["write_atomic"],
            "configfile": ["ConfigFile", "load_config"],
            "dirlock": ["DirLock", "LockTimeoutError"],
            "files": ["DEFAULT_SPEC_DIRS", "list_spec_files", "read_spec_bytes", "spec_dirs"],
            "ownership": ["RECORD_NAME", "OwnedFile", "owned_kinds", "read_record"],
            "plan": ["ConflictError", "Plan", "plan_writes"],
            "registry": [
                "NameConflict",
                "ResolvedDevice",
                "Snapshot",
                "SpecRegistry",
                "load_registry",
                "load_spec_file",
            ],
            "validation": ["ValidationReport", "validate_paths"],
            "writer": ["Applied", "PartialWriteError", "apply"],
        },
    )
