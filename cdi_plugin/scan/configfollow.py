"""The configuration file of a running watcher: reloaded when it changes, kept when an edit is bad.

An edit is read again only when the file's bytes differ from the last ones read. A valid edit
replaces the device classes; an invalid one (or a file that cannot be read, or whose ``plugin``
section the serving process would refuse at its next start) is logged in one line naming the
file, the key and the reason, and the last good classes stay in force.

Editors replace a file by renaming a new one over it, and Kubernetes ConfigMaps swap a ``..data``
symlink in the file's directory: so the directory is watched, not the file, and also the
directories of the links the path goes through (``update-alternatives`` retargets a link in
``/etc/alternatives``) and of the file it resolves to.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdi_plugin.cdi.codec import Format
from cdi_plugin.cdi.runtime_checks import format_refusal
from cdi_plugin.cdi.runtimes import targets
from cdi_plugin.errors import ConfigError
from cdi_plugin.generate.config import (
    DEFAULT_CONFIG_NAME,
    DeviceClass,
    classes_of,
    default_classes,
    runtimes_of,
)
from cdi_plugin.store.configfile import ConfigFile, read_config
from cdi_plugin.store.files import link_chain

log = logging.getLogger(__name__)


class ConfigFollower:
    """The device classes of ``path`` (the embedded default without a path or a ``classes``
    section), and the runtimes the specs are for: ``runtimes`` (``--runtime``) and the file's
    ``runtimes``. :meth:`load` raises :class:`ConfigError`; :meth:`reload` never does."""

    def __init__(
        self,
        path: Path | None,
        *,
        plugin_section_used: bool = False,
        allow_hooks_and_mounts: bool = True,
        on_invalid: Callable[[], None] | None = None,
        check_plugin: Callable[[Any, str], object] | None = None,
        runtimes: tuple[str, ...] = (),
        fmt: Format = "json",
    ) -> None:
        """``check_plugin(section, source)`` checks the ``plugin`` section of an edit, raising
        :class:`ConfigError` to refuse the whole edit as a bad one."""
        self.path = path
        self.check_plugin = check_plugin
        self.given_runtimes, self.fmt = runtimes, fmt
        self.runtimes = runtimes
        self.allow_hooks_and_mounts = allow_hooks_and_mounts
        #: Called once for each distinct invalid edit (the metrics count them).
        self.on_invalid = on_invalid
        self.classes: list[DeviceClass] = []
        self.source = DEFAULT_CONFIG_NAME
        #: Whether the process also uses the ``plugin`` section, which is read only at start.
        self.plugin_section_used = plugin_section_used
        self._plugin: Any = None
        self._seen: str | None = None

    def _runtimes(self, config: ConfigFile | None) -> tuple[str, ...]:
        """``--runtime`` and the file's ``runtimes``; ConfigError if one reads no file of the format."""
        runtimes = tuple(dict.fromkeys(self.given_runtimes + runtimes_of(config)))
        for runtime in targets(runtimes):
            refused = format_refusal(runtime, self.fmt)
            if refused is not None:
                where = (
                    f"{self.path}: runtimes"
                    if config is not None and runtime.name in runtimes_of(config)
                    else "--runtime"
                )
                raise ConfigError(f"{where}: {refused}, and the specs are written as {self.fmt}")
        return runtimes

    def load(self) -> None:
        if self.path is None:
            self.classes = default_classes()
            self.runtimes = self._runtimes(None)
            return
        config = read_config(self.path)
        self.classes, self.source = classes_of(config, allow_hooks_and_mounts=self.allow_hooks_and_mounts)
        self.runtimes = self._runtimes(config)
        self._plugin = config.contents.get("plugin")
        self._seen = hashlib.sha256(config.data).hexdigest()

    def _invalid(self, exc: ConfigError) -> None:
        log.error("%s; keeping the last good configuration", exc)
        if self.on_invalid is not None:
            self.on_invalid()

    def dirs(self) -> frozenset[Path]:
        """The directories to watch: the path's own and, for a symlink, that of each link along
        its chain (``/etc/alternatives``) and of the file it ends at."""
        if self.path is None:
            return frozenset()
        path = Path(os.path.abspath(self.path))
        chain = link_chain(path)
        return frozenset({path.parent, Path(os.path.realpath(path.parent)), *(hop.parent for hop in chain)})

    def reload(self) -> bool:
        """Read the file again if it changed; True when the device classes changed."""
        assert self.path is not None
        try:
            config = read_config(self.path)
        except ConfigError as exc:
            seen = f"error: {exc}"
            if seen != self._seen:
                self._seen = seen
                self._invalid(exc)
            return False
        seen = hashlib.sha256(config.data).hexdigest()
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            classes, source = classes_of(config, allow_hooks_and_mounts=self.allow_hooks_and_mounts)
            if self.check_plugin is not None:
                self.check_plugin(config.contents.get("plugin"), config.source)
            runtimes = self._runtimes(config)
        except ConfigError as exc:
            self._invalid(exc)
            return False
        if self.plugin_section_used and config.contents.get("plugin") != self._plugin:
            self._plugin = config.contents.get("plugin")
            log.warning(
                "%s: the 'plugin' section changed; cdi-plugin serve applies it when it starts again",
                self.path,
            )
        if runtimes != self.runtimes:
            log.info(
                "%s: reloaded; the specs are now for %s; rescanning",
                self.path,
                ", ".join(runtimes) or "any runtime",
            )
            self.classes, self.source, self.runtimes = classes, source, runtimes
            return True
        if classes == self.classes:
            log.info("%s: reloaded; the device classes did not change", self.path)
            return False
        before = {c.kind: c for c in self.classes}
        after = {c.kind: c for c in classes}
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
        parts = [f"{label} {', '.join(kinds)}" for label, kinds in
                 (("added", added), ("removed", removed), ("changed", changed)) if kinds]  # fmt: skip
        log.info(
            "%s: reloaded, %d device classes (%s); rescanning",
            self.path,
            len(classes),
            "; ".join(parts) or "order changed",
        )
        self.classes, self.source = classes, source
        return True
