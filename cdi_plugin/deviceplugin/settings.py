"""The settings of ``cdi-plugin serve``: defaults, the config file's ``plugin`` section, flags.

Precedence: a flag given on the command line, then the ``plugin`` section of the configuration
file (``schemas/plugin-settings.schema.json``), then the defaults here. Per-kind replicas from the
file's ``resources`` win over the global ``replicas`` (flag or file) for the kinds they match.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cdi_plugin.errors import ConfigError
from cdi_plugin.globs import glob_match
from cdi_plugin.store import files

Strategy = Literal["cri", "annotations", "both"]
STRATEGIES: tuple[Strategy, ...] = ("cri", "annotations", "both")
#: Which kubelet API serves the devices: the device plugin API, DRA, or both at once (migration).
Api = Literal["device-plugin", "dra", "both"]
APIS: tuple[Api, ...] = ("device-plugin", "dra", "both")

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET_NAME = "kubelet.sock"
DEFAULT_GRACE_PERIOD = 300.0
MAX_REPLICAS = 1000

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """Seconds from ``90``, ``1.5``, ``90s``, ``5m``, ``1h30m`` or ``250ms``; raises ValueError."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip()
        try:
            seconds = float(raw)
        except ValueError:
            parts = _DURATION_PART.findall(raw)
            if not parts or "".join(n + u for n, u in parts) != raw:
                raise ValueError(
                    f"invalid duration {raw!r}: use seconds or a duration such as 90s, 5m, 1h30m"
                ) from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"invalid duration {text!r}: must be a finite, non-negative number of seconds")
    return seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    #: Default: ``$CDI_SPEC_DIRS``, else /etc/cdi and /var/run/cdi.
    spec_dirs: tuple[Path, ...] = field(default_factory=files.spec_dirs)
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    #: None means ``<plugin_dir>/kubelet.sock``.
    kubelet_socket_path: Path | None = None
    #: Globs of kinds to serve besides the ones cdi-gen wrote.
    kinds: tuple[str, ...] = ()
    replicas: int = 1
    #: (kind or glob, replicas), in the configuration file's order.
    per_kind_replicas: tuple[tuple[str, int], ...] = ()
    cdi_strategy: Strategy = "both"
    grace_period: float = DEFAULT_GRACE_PERIOD
    api: Api = "device-plugin"
    sysfs_root: Path = Path("/sys")
    #: Passed to gRPC; the kubelet's own requests are far smaller.
    max_message_bytes: int = field(default=4 * 1024 * 1024)

    @property
    def kubelet_socket(self) -> Path:
        return self.kubelet_socket_path or self.plugin_dir / KUBELET_SOCKET_NAME

    def replicas_for(self, kind: str) -> int:
        """The exact kind's replicas, else the first matching glob's, else the global value."""
        for pattern, replicas in self.per_kind_replicas:
            if pattern == kind:
                return replicas
        for pattern, replicas in self.per_kind_replicas:
            if glob_match(pattern, kind):
                return replicas
        return self.replicas

    def matching_glob(self, kind: str) -> str | None:
        """The first ``kinds`` glob that names ``kind``, if any."""
        return next((g for g in self.kinds if glob_match(g, kind)), None)


def from_config(section: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ``plugin`` section (already schema-valid) as keyword arguments of :class:`Settings`."""
    out: dict[str, Any] = {}
    if "specDirs" in section:
        out["spec_dirs"] = tuple(Path(d) for d in section["specDirs"])
    if "pluginDir" in section:
        out["plugin_dir"] = Path(section["pluginDir"])
    if "kubeletSocket" in section:
        out["kubelet_socket_path"] = Path(section["kubeletSocket"])
    if "kinds" in section:
        out["kinds"] = tuple(section["kinds"])
    if "replicas" in section:
        out["replicas"] = int(section["replicas"])
    if "resources" in section:
        out["per_kind_replicas"] = tuple(
            (pattern, int(entry["replicas"]))
            for pattern, entry in section["resources"].items()
            if "replicas" in entry
        )
    if "cdiStrategy" in section:
        out["cdi_strategy"] = section["cdiStrategy"]
    if "api" in section:
        out["api"] = section["api"]
    if "gracePeriod" in section:
        try:
            out["grace_period"] = parse_duration(section["gracePeriod"])
        except ValueError as exc:
            raise ConfigError(f"{source}: plugin.gracePeriod: {exc}") from None
    return out


#: gRPC refuses unix socket paths over 105 bytes; the plugin's longest socket name (a hashed one,
#: ``cdi-plugin-<16 hex digits>.sock``) must fit under the plugin directory.
MAX_PLUGIN_DIR_BYTES = 105 - len("/cdi-plugin-0123456789abcdef.sock")


def build(config_section: Mapping[str, Any] | None, source: str, **flags: Any) -> Settings:
    """Settings from the configuration file's ``plugin`` section and the flags given (None = not given)."""
    values = from_config(config_section or {}, source)
    values.update({k: v for k, v in flags.items() if v is not None})
    built = Settings(**values)
    size = len(os.fsencode(built.plugin_dir))
    if size > MAX_PLUGIN_DIR_BYTES:
        raise ConfigError(
            f"--plugin-dir {built.plugin_dir}: {size} bytes is too long for the unix sockets in it "
            f"(at most {MAX_PLUGIN_DIR_BYTES})"
        )
    return built
