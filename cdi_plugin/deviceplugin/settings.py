"""The settings of ``cdi-plugin serve``: defaults, the config file's ``plugin`` section, flags.

Precedence: a flag given on the command line, then the ``plugin`` section of the configuration
file (``schemas/plugin-settings.schema.json``), then the defaults here. Per-kind replicas from the
file's ``resources`` win over the global ``replicas`` (flag or file) for the kinds they match.

``api`` says which sides of ``serve`` run; ``resources.*.api`` which API serves a kind
(:meth:`Settings.api_for`), so that a kind moves from the device plugin to DRA on its own. A kind
offered through both APIs can be handed out twice (the scheduler counts extended resources and
claims apart): only kinds shared by design (replicas above 1) may be, or any kind with
``allowExclusiveKindsOnBothApis``; :func:`build` refuses other configurations.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from cdi_plugin.aio.sockets import MAX_SOCKET_PATH
from cdi_plugin.errors import ConfigError
from cdi_plugin.globs import glob_match, is_glob, may_overlap
from cdi_plugin.store import files

Strategy = Literal["cri", "annotations", "both"]
STRATEGIES: tuple[Strategy, ...] = ("cri", "annotations", "both")
#: Which kubelet API serves the devices (``--api``: which sides run) or a kind (``resources.*.api``).
Api = Literal["device-plugin", "dra", "both"]
APIS: tuple[Api, ...] = ("device-plugin", "dra", "both")
#: One side of ``serve``.
Side = Literal["device-plugin", "dra"]
ALLOW_BOTH_KEY = "allowExclusiveKindsOnBothApis"
ALLOW_BOTH_FLAG = "--allow-exclusive-kinds-on-both-apis"
_T = TypeVar("_T")

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
    #: The sides that run.
    api: Api = "device-plugin"
    #: (kind or glob, the API serving it), in the configuration file's order.
    per_kind_api: tuple[tuple[str, Api], ...] = ()
    #: Whether a kind of one device ID per device (replicas 1) may be served through both APIs.
    allow_exclusive_kinds_on_both_apis: bool = False
    sysfs_root: Path = Path("/sys")
    #: Passed to gRPC; the kubelet's own requests are far smaller.
    max_message_bytes: int = field(default=4 * 1024 * 1024)

    @property
    def kubelet_socket(self) -> Path:
        return self.kubelet_socket_path or self.plugin_dir / KUBELET_SOCKET_NAME

    def replicas_for(self, kind: str) -> int:
        """The exact kind's replicas, else the first matching glob's, else the global value."""
        found = _entry(self.per_kind_replicas, kind)
        return self.replicas if found is None else found[1]

    @property
    def default_api(self) -> Side:
        """The API of kinds without one of their own: the one side that runs, else the device plugin."""
        return "dra" if self.api == "dra" else "device-plugin"

    def api_for(self, kind: str) -> Api:
        """The exact kind's API, else the first matching glob's, else :attr:`default_api`."""
        found = _entry(self.per_kind_api, kind)
        return self.default_api if found is None else found[1]

    def serves(self, side: Side, kind: str) -> bool:
        """Whether ``side`` runs and serves ``kind``."""
        return self.api in (side, "both") and self.api_for(kind) in (side, "both")

    def left_out(self, side: Side, kind: str) -> str | None:
        """Why ``side``, which runs, does not serve ``kind`` (for its log), or None."""
        if self.api not in (side, "both") or self.serves(side, kind):
            return None
        found = _entry(self.per_kind_api, kind)
        if found is None:
            return "no plugin.resources entry names its api, so with --api both the device plugin serves it"
        key, api = found
        other = "the device plugin" if api == "device-plugin" else "DRA"
        why = f"plugin.resources.{key}.api is {api}"
        return why if self.api == "both" else f"{why}, and {other} does not run (--api {self.api})"

    def exclusive_on_both(self) -> tuple[str, str] | None:
        """The first ``resources`` key whose ``api: both`` reaches, or may reach, a kind with
        replicas 1, and why; None if there is none or that is allowed. Judged on the keys alone:
        a glob counts when its kinds take replicas 1, or a glob of replicas 1 may name some."""
        if self.allow_exclusive_kinds_on_both_apis:
            return None
        keys = dict.fromkeys(k for k, _ in (*self.per_kind_api, *self.per_kind_replicas))
        for kind in (k for k in keys if not is_glob(k)):
            found = _entry(self.per_kind_api, kind)
            if found is not None and found[1] == "both" and self.replicas_for(kind) <= 1:
                return found[0], f"kind {kind} is exclusive (replicas 1)"
        replicas = dict(self.per_kind_replicas)
        for glob in (k for k, api in self.per_kind_api if api == "both" and is_glob(k)):
            own = replicas.get(glob)
            if (self.replicas if own is None else own) <= 1:
                return glob, "its kinds are exclusive (replicas 1)"
            # the globs whose replicas a kind matching this one may take first
            order = list(replicas)
            before = order if own is None else order[: order.index(glob)]
            for other in before:
                if replicas[other] <= 1 and is_glob(other) and may_overlap(other, glob):
                    return glob, f"its kinds may be exclusive (replicas 1 from plugin.resources.{other})"
        return None

    def matching_glob(self, kind: str) -> str | None:
        """The first ``kinds`` glob that names ``kind``, if any."""
        return next((g for g in self.kinds if glob_match(g, kind)), None)


def _entry(entries: tuple[tuple[str, _T], ...], kind: str) -> tuple[str, _T] | None:
    """The entry of the exact kind, else of the first glob matching it, else None."""
    for entry in entries:
        if entry[0] == kind:
            return entry
    return next((e for e in entries if glob_match(e[0], kind)), None)


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
        entries = section["resources"].items()
        out["per_kind_replicas"] = tuple((p, int(e["replicas"])) for p, e in entries if "replicas" in e)
        out["per_kind_api"] = tuple((p, e["api"]) for p, e in entries if "api" in e)
    if ALLOW_BOTH_KEY in section:
        out["allow_exclusive_kinds_on_both_apis"] = bool(section[ALLOW_BOTH_KEY])
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


#: The plugin's longest socket name (a hashed one, ``cdi-plugin-<16 hex digits>.sock``) must fit
#: under the plugin directory in a path gRPC binds.
MAX_PLUGIN_DIR_BYTES = MAX_SOCKET_PATH - len("/cdi-plugin-0123456789abcdef.sock")


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
    both = built.exclusive_on_both()
    if both is not None:
        raise ConfigError(
            f"{source}: plugin.resources.{both[0]}.api: both, but {both[1]}: one device could then go "
            f"to two pods at once, one through each API; give it one API, replicas above 1 if it is "
            f"shared, or set {ALLOW_BOTH_KEY} ({ALLOW_BOTH_FLAG})"
        )
    return built
