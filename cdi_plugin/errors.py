"""Errors raised by cdi-plugin. The CLI turns each into a one-line message and an exit code.

CdiPluginError
 ├── InvalidNameError      a kind, device name or qualified name breaks the CDI name rules
 ├── SpecLoadError         a spec file cannot be read or decoded (file, pointer, rule)
 ├── ConfigError           a device-class config is invalid (file, key, reason)
 ├── SpecWriteError        a spec could not be written; nothing on disk was changed
 │    └── SpecInvalidError  a generated spec failed validation, so it was not written
 ├── DiscoveryError        udev or sysfs could not be read
 └── GenerateError         devices could not become specs (name collision, version above the maximum)
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
    pass


class SpecInvalidError(SpecWriteError):
    pass


class DiscoveryError(CdiPluginError):
    pass


class GenerateError(CdiPluginError):
    """Discovered devices could not be turned into specs (a name collision, a version above the maximum)."""
