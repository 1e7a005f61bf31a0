"""Device classes: the ``classes`` section of the configuration as typed values.

The whole file has already passed ``schemas/config.schema.json`` (:mod:`cdi_plugin.store.configfile`);
this module adds the rules a schema cannot express (placeholders, name rules shared with the CDI
core, a kind defined twice) and raises :class:`ConfigError` naming the file, the key and the reason.
The embedded default (``defaults.yaml``, package data) goes through exactly the same checks.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from cdi_plugin.cdi import names
from cdi_plugin.cdi.problems import Problem
from cdi_plugin.errors import CdiPluginError, ConfigError, InvalidNameError
from cdi_plugin.generate import template
from cdi_plugin.generate.template import Template, TemplateError
from cdi_plugin.store.atomic import NAME_MAX
from cdi_plugin.store.configfile import ConfigFile, config_error, parse_config
from cdi_plugin.store.files import KIND_CHARS_MAX
from cdi_plugin.wording import shown

DEFAULT_CONFIG_NAME = "<embedded default config>"

#: Naming strategies by keyword, as templates. The default list goes from most to least stable.
NAMING_KEYWORDS: Mapping[str, str] = {
    "serial": "{serial}",
    "path": "{path}",
    "pci-slot": "pci-{pci_slot}",
    "kernel": "{kernel}",
    "index": "{index}",
}
DEFAULT_NAMING = ("serial", "path", "pci-slot", "kernel")

Globs = tuple[str, ...]
GlobMap = tuple[tuple[str, Globs], ...]


@dataclass(frozen=True, slots=True)
class ParentMatch:
    """What one ancestor must have (all given fields, on the same ancestor)."""

    subsystems: tuple[str, ...] = ()
    kernel: Globs = ()
    driver: Globs = ()
    properties: GlobMap = ()
    attributes: GlobMap = ()


@dataclass(frozen=True, slots=True)
class Match:
    subsystems: tuple[str, ...] = ()
    kernel: Globs = ()
    devnode: Globs = ()
    devtypes: tuple[str, ...] = ()
    driver: Globs = ()
    properties: GlobMap = ()
    attributes: GlobMap = ()
    parent: ParentMatch | None = None


@dataclass(frozen=True, slots=True)
class NamingStrategy:
    source: str  # as written in the config
    template: Template


@dataclass(frozen=True, slots=True)
class NodeSettings:
    attach: bool = True
    path: Template = field(default_factory=lambda: template.parse("{devnode}"))
    permissions: str | None = None


@dataclass(frozen=True, slots=True)
class EnvEdit:
    name: str
    value: Template


@dataclass(frozen=True, slots=True)
class NodeEdit:
    path: Template
    host_path: Template | None = None
    permissions: str | None = None
    optional: bool = False

    @property
    def host(self) -> Template:
        return self.host_path or self.path


@dataclass(frozen=True, slots=True)
class MountEdit:
    host_path: Template
    container_path: Template
    options: tuple[str, ...] | None = None
    type: str | None = None


@dataclass(frozen=True, slots=True)
class HookEdit:
    hook_name: str
    path: str
    args: tuple[Template, ...] | None = None
    env: tuple[EnvEdit, ...] | None = None
    timeout: int | None = None


@dataclass(frozen=True, slots=True)
class EditsTemplate:
    env: tuple[EnvEdit, ...] = ()
    device_nodes: tuple[NodeEdit, ...] = ()
    mounts: tuple[MountEdit, ...] = ()
    hooks: tuple[HookEdit, ...] = ()

    def templates(self) -> list[Template]:
        out = [e.value for e in self.env]
        for n in self.device_nodes:
            out += [n.path, *([n.host_path] if n.host_path else [])]
        for m in self.mounts:
            out += [m.host_path, m.container_path]
        for h in self.hooks:
            out += list(h.args or ()) + [e.value for e in h.env or ()]
        return out


@dataclass(frozen=True, slots=True)
class DeviceClass:
    vendor: str
    class_: str
    match: Match
    enabled: bool = True
    description: str = ""
    naming: tuple[NamingStrategy, ...] = ()
    node: NodeSettings = field(default_factory=NodeSettings)
    siblings: Globs = ()
    edits: EditsTemplate = field(default_factory=EditsTemplate)
    class_edits: EditsTemplate = field(default_factory=EditsTemplate)
    all_device: bool = False
    position: int = 0  # index in the config's list, for messages

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.class_}"

    @property
    def where(self) -> str:
        return f"classes[{self.position}]"

    @property
    def name_prefix(self) -> str:
        """Put in front of a device name that would not start with a letter (``vfio-12``)."""
        return f"{self.class_}-"


# -- parsing ------------------------------------------------------------------------------------


class _Invalid(CdiPluginError):
    def __init__(self, pointer: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.pointer, self.message, self.hint = pointer, message, hint


def _strs(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _glob_map(value: Any) -> GlobMap:
    return tuple((k, _strs(v)) for k, v in sorted((value or {}).items()))


def _tmpl(text: str, at: str) -> Template:
    try:
        return template.parse(text)
    except TemplateError as exc:
        raise _Invalid(at, str(exc), "see docs/config.md for the placeholders") from None


def _env(items: Sequence[str], at: str) -> tuple[EnvEdit, ...]:
    out = []
    for i, entry in enumerate(items):
        name, _, value = entry.partition("=")
        out.append(EnvEdit(name, Template(entry, _tmpl(value, f"{at}/{i}").parts)))
    return tuple(out)


def _edits(obj: Mapping[str, Any] | None, at: str) -> EditsTemplate:
    if not obj:
        return EditsTemplate()
    nodes = tuple(
        NodeEdit(
            path=_tmpl(n["path"], f"{at}/deviceNodes/{i}/path"),
            host_path=_tmpl(n["hostPath"], f"{at}/deviceNodes/{i}/hostPath") if "hostPath" in n else None,
            permissions=n.get("permissions"),
            optional=bool(n.get("optional", False)),
        )
        for i, n in enumerate(obj.get("deviceNodes", ()))
    )
    mounts = tuple(
        MountEdit(
            host_path=_tmpl(m["hostPath"], f"{at}/mounts/{i}/hostPath"),
            container_path=_tmpl(m["containerPath"], f"{at}/mounts/{i}/containerPath"),
            options=tuple(m["options"]) if "options" in m else None,
            type=m.get("type"),
        )
        for i, m in enumerate(obj.get("mounts", ()))
    )
    hooks = tuple(
        HookEdit(
            hook_name=h["hookName"],
            path=h["path"],
            args=tuple(_tmpl(a, f"{at}/hooks/{i}/args/{j}") for j, a in enumerate(h["args"]))
            if "args" in h
            else None,
            env=_env(h["env"], f"{at}/hooks/{i}/env") if "env" in h else None,
            timeout=h.get("timeout"),
        )
        for i, h in enumerate(obj.get("hooks", ()))
    )
    return EditsTemplate(_env(obj.get("env", ()), f"{at}/env"), nodes, mounts, hooks)


def _naming(items: Sequence[str] | None, at: str) -> tuple[NamingStrategy, ...]:
    out = []
    for i, item in enumerate(items or DEFAULT_NAMING):
        key, sep, arg = item.partition(":")
        if item in NAMING_KEYWORDS:
            text = NAMING_KEYWORDS[item]
        elif sep and key in {"property", "attribute"} and "{" not in item:
            text = "{" + f"{key}:{arg}" + "}"
        else:
            text = item
        tmpl = _tmpl(text, f"{at}/{i}")
        if any(p.key == "name" for p in tmpl.placeholders):
            raise _Invalid(f"{at}/{i}", "{name} cannot be used to make the name itself")
        if tmpl.is_literal:
            raise _Invalid(f"{at}/{i}", f"naming strategy {item!r} has no placeholder",
                           "every device would get the same name")  # fmt: skip
        out.append(NamingStrategy(item, tmpl))
    return tuple(out)


def _check_class_edits(edits: EditsTemplate, at: str) -> None:
    for tmpl in edits.templates():
        if not tmpl.is_literal:
            raise _Invalid(
                at,
                f"{tmpl.placeholders[0]} in {tmpl.source!r}: class-wide edits apply to the whole kind",
                "use placeholders in 'edits' (per device)",
            )


def _match(obj: Mapping[str, Any]) -> Match:
    parent = obj.get("parent")
    return Match(
        subsystems=_strs(obj.get("subsystem")),
        kernel=_strs(obj.get("kernel")),
        devnode=_strs(obj.get("devnode")),
        devtypes=_strs(obj.get("devtype")),
        driver=_strs(obj.get("driver")),
        properties=_glob_map(obj.get("properties")),
        attributes=_glob_map(obj.get("attributes")),
        parent=None
        if parent is None
        else ParentMatch(
            subsystems=_strs(parent.get("subsystem")),
            kernel=_strs(parent.get("kernel")),
            driver=_strs(parent.get("driver")),
            properties=_glob_map(parent.get("properties")),
            attributes=_glob_map(parent.get("attributes")),
        ),
    )


def _device_class(obj: Mapping[str, Any], position: int) -> DeviceClass:
    at = f"/classes/{position}"
    for key, check in (("vendor", names.validate_vendor), ("class", names.validate_class)):
        try:
            check(obj[key])
        except InvalidNameError as exc:
            raise _Invalid(f"{at}/{key}", str(exc)) from None
    vendor, class_ = obj["vendor"], obj["class"]
    if len(vendor) + len(class_) > KIND_CHARS_MAX:
        raise _Invalid(
            f"{at}/class",
            f"class {shown(class_)} and vendor {shown(vendor)} have {len(vendor) + len(class_)} "
            f"characters together, at most {KIND_CHARS_MAX}: the spec file, <vendor>-<class>.json, is "
            f"written as .<vendor>-<class>.json.XXXXXXXX.tmp first, and a file name has at most "
            f"{NAME_MAX} bytes",
            "shorten the vendor or the class",
        )
    node_obj = obj.get("node", {})
    node = NodeSettings(
        attach=bool(node_obj.get("attach", True)),
        path=_tmpl(node_obj.get("path", "{devnode}"), f"{at}/node/path"),
        permissions=node_obj.get("permissions"),
    )
    class_edits = _edits(obj.get("classEdits"), f"{at}/classEdits")
    _check_class_edits(class_edits, f"{at}/classEdits")
    return DeviceClass(
        vendor=obj["vendor"],
        class_=obj["class"],
        match=_match(obj["match"]),
        enabled=bool(obj.get("enabled", True)),
        description=obj.get("description", ""),
        naming=_naming(obj.get("naming"), f"{at}/naming"),
        node=node,
        siblings=_strs(obj.get("siblings")),
        edits=_edits(obj.get("edits"), f"{at}/edits"),
        class_edits=class_edits,
        all_device=bool(obj.get("allDevice", False)),
        position=position,
    )


def parse_classes(config: Mapping[str, Any], source: str) -> list[DeviceClass]:
    """The device classes of a configuration that passed the schema; raises ``ConfigError``."""
    out: list[DeviceClass] = []
    seen: dict[str, DeviceClass] = {}  # by spec file name, <vendor>-<class>
    try:
        for i, obj in enumerate(config.get("classes", ())):
            cls = _device_class(obj, i)
            file = f"{cls.vendor}-{cls.class_}"
            other = seen.setdefault(file, cls)
            if other is not cls and other.kind == cls.kind:
                raise _Invalid(
                    f"/classes/{i}/class",
                    f"kind {cls.kind} is already defined by {other.where}",
                    "give each class its own vendor/class",
                )
            if other is not cls:  # ex.com-x/yy and ex.com/x-yy are both ex.com-x-yy.json
                raise _Invalid(
                    f"/classes/{i}/class",
                    f"kind {cls.kind} would be written to the same file as {other.kind} of "
                    f"{other.where}, {file}.json",
                    "give one of them another vendor or class",
                )
            out.append(cls)
    except _Invalid as exc:
        raise config_error(source, [Problem(exc.pointer, "config", exc.message, exc.hint)]) from None
    return out


def refuse_hooks_and_mounts(classes: list[DeviceClass], source: str) -> None:
    """Raise ``ConfigError`` naming the first hook or mount of ``classes``.

    A hook runs as root on the node, and a mount lands in every container given the device; in a
    cluster the classes come from a ConfigMap, which must not be enough to add either.
    """
    for cls in classes:
        for section, edits in (("edits", cls.edits), ("classEdits", cls.class_edits)):
            for field_name in ("hooks", "mounts"):
                if getattr(edits, field_name):
                    raise ConfigError(
                        f"{source}: {cls.where}.{section}.{field_name}: hooks and mounts run as root on "
                        "every node, so cdi-plugin serve --scan accepts them only with "
                        "--allow-hooks-and-mounts (given on the node's command line, not in the file)"
                    )


def runtimes_of(config: ConfigFile | None) -> tuple[str, ...]:
    """The runtimes the configuration's ``runtimes`` names (the schema checked the names)."""
    return tuple(config.contents.get("runtimes", ())) if config is not None else ()


@functools.cache
def default_config_text() -> str:
    """The embedded default configuration, comments included."""
    return resources.files("cdi_plugin.generate").joinpath("defaults.yaml").read_text(encoding="utf-8")


def default_classes() -> list[DeviceClass]:
    config = parse_config(default_config_text().encode(), DEFAULT_CONFIG_NAME)
    return parse_classes(config, DEFAULT_CONFIG_NAME)


def classes_of(
    config: ConfigFile | None, *, allow_hooks_and_mounts: bool = True
) -> tuple[list[DeviceClass], str]:
    """The device classes of ``config`` (the embedded default without one, or without a ``classes``
    section) and where they came from. Raises ``ConfigError``; without ``allow_hooks_and_mounts``,
    also for a class with hooks or mounts."""
    if config is None or "classes" not in config.contents:
        return default_classes(), DEFAULT_CONFIG_NAME
    classes = parse_classes(config.contents, config.source)
    if not allow_hooks_and_mounts:
        refuse_hooks_and_mounts(classes, config.source)
    return classes, config.source
