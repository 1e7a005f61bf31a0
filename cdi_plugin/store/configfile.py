"""Reading the configuration file (see ``schemas/config.schema.json``): the one reader both
programs use, at start and when a watcher reloads it.

The file is parsed strictly (duplicate keys are errors) and validated as a whole against the
schema before either program uses its section, so a bad file is refused before anything is
written. Errors name the file, the key (``classes[0].match.subsystem``) and the reason. Each
section is then typed by the layer that uses it: ``classes`` by :mod:`cdi_plugin.generate.config`,
``plugin`` by :mod:`cdi_plugin.deviceplugin.settings`. A serving process checks the schema in a
short-lived child process (:mod:`.configcheck`), with the same verdicts and messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.problems import Problem, pointer_parts
from cdi_plugin.errors import ConfigError, SpecLoadError
from cdi_plugin.process import config_checked_in_child
from cdi_plugin.store.files import read_file

MAX_CONFIG_BYTES = 1024 * 1024


def key_path(pointer: str) -> str:
    """``/classes/0/match/subsystem`` -> ``classes[0].match.subsystem``."""
    out = ""
    for part in pointer_parts(pointer):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "(top level)"


def config_error(source: str, problems: list[Problem]) -> ConfigError:
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    hint = f" ({first.hint})" if first.hint else ""
    error = ConfigError(f"{source}: {key_path(first.pointer)}: {first.message}{hint}{more}")
    error.problems = problems
    return error


def parse_config(data: bytes, source: str) -> dict[str, Any]:
    """Parse and validate configuration text; raises :class:`ConfigError`."""
    try:
        obj, _ = codec.parse(data, source, "yaml", "configuration")
    except SpecLoadError as exc:
        where = f"{key_path(exc.pointer)}: " if exc.pointer.strip("/") else ""
        raise ConfigError(f"{source}: {where}{exc.message}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping with 'classes' and/or 'plugin'")
    problems = schema_problems(obj, source)
    if problems:
        raise config_error(source, problems)
    return obj


def schema_problems(obj: dict[str, Any], source: str) -> list[Problem]:
    """The configuration's schema problems, found in this process or, in a serving process, in a
    child process (:func:`cdi_plugin.process.check_config_in_child`); raises :class:`ConfigError`
    only when the child gives no answer."""
    if config_checked_in_child():
        from cdi_plugin.store import configcheck

        return configcheck.problems(obj, source)
    from cdi_plugin.cdi import schema

    return schema.problems(obj, schema.CONFIG_SCHEMA)


def read_config_bytes(path: Path) -> bytes:
    """A configuration file's bytes (through symbolic links: a ConfigMap mounts its files through
    them); raises :class:`ConfigError`."""
    try:
        return read_file(path, MAX_CONFIG_BYTES, "a configuration file")
    except SpecLoadError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A configuration file that passed the schema: where it is, its bytes and its contents."""

    source: str
    data: bytes
    contents: dict[str, Any]


def read_config(path: Path) -> ConfigFile:
    """Read, parse and validate a configuration file; raises :class:`ConfigError`."""
    data = read_config_bytes(path)
    return ConfigFile(str(path), data, parse_config(data, str(path)))


def load_config(path: Path) -> dict[str, Any]:
    """The contents of a configuration file (see :func:`read_config`)."""
    return read_config(path).contents
