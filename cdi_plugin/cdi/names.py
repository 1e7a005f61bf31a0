"""CDI names: kinds (``vendor/class``) and fully-qualified device names (``vendor/class=name``).

The character rules are those of the CDI library's parser; on top of them a vendor or class of one
character is rejected, because every released CDI library panics on it (it indexes ``name[1:-1]``
without a length check), which would crash the runtime that reads the spec.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from cdi_plugin.errors import InvalidNameError
from cdi_plugin.wording import shown

_VENDOR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")

_DIGIT_RUN = re.compile(r"([0-9]+)")

#: Hex digits of :func:`short_hash`: enough to tell apart the names of one node's devices.
SHORT_HASH_LEN = 8


def short_hash(text: str, length: int = SHORT_HASH_LEN) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``text`` (lone surrogates included), for
    names that must stay short and stable."""
    import hashlib  # on first use: cdi_plugin.process may keep OpenSSL out first

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _check_vendor_or_class(what: str, value: str) -> None:
    rule = f"{what}-name"
    if not value:
        raise InvalidNameError(f"empty {what} name", rule)
    if len(value) == 1:
        raise InvalidNameError(
            f"{what} name {shown(value)} has 1 character: released CDI runtimes crash on a 1-character "
            f"vendor or class, use at least 2",
            "short-name",
        )
    if not _VENDOR_CLASS.fullmatch(value):
        raise InvalidNameError(
            f"invalid {what} name {shown(value)}: must start with a letter, end with a letter or digit, "
            f"and contain only letters, digits, '_', '.' and '-'",
            rule,
        )


def validate_vendor(vendor: str) -> None:
    _check_vendor_or_class("vendor", vendor)


def validate_class(class_: str) -> None:
    """Dots are accepted here; they need cdiVersion 0.6.0 (see :mod:`cdi_plugin.cdi.version`)."""
    _check_vendor_or_class("class", class_)


def validate_device_name(name: str) -> None:
    """A digit first needs cdiVersion 0.5.0 (see :mod:`cdi_plugin.cdi.version`)."""
    if not name:
        raise InvalidNameError("empty device name", "device-name")
    if not _DEVICE.fullmatch(name):
        raise InvalidNameError(
            f"invalid device name {shown(name)}: must start and end with a letter or digit, and contain "
            f"only letters, digits, '_', '.', ':' and '-'",
            "device-name",
        )


@dataclass(frozen=True, slots=True)
class Kind:
    vendor: str
    class_: str

    def __str__(self) -> str:
        return f"{self.vendor}/{self.class_}"


@dataclass(frozen=True, slots=True)
class QualifiedName:
    vendor: str
    class_: str
    name: str

    @property
    def kind(self) -> Kind:
        return Kind(self.vendor, self.class_)

    def __str__(self) -> str:
        return f"{self.vendor}/{self.class_}={self.name}"


def parse_kind(kind: str) -> Kind:
    """Parse and validate ``vendor/class``."""
    vendor, sep, class_ = kind.partition("/")
    if not sep:
        raise InvalidNameError(f"invalid kind {shown(kind)}: expected 'vendor/class'", "kind-format")
    if "/" in class_:
        raise InvalidNameError(f"invalid kind {shown(kind)}: more than one '/'", "kind-format")
    validate_vendor(vendor)
    validate_class(class_)
    return Kind(vendor, class_)


def parse_qualified_name(qualified: str) -> QualifiedName:
    """Parse and validate ``vendor/class=name``, splitting where the CDI library does."""
    left, sep, name = qualified.partition("=")
    if not sep:
        raise InvalidNameError(
            f"invalid device name {shown(qualified)}: expected 'vendor/class=name'", "qualified-name"
        )
    try:
        kind = parse_kind(left)
    except InvalidNameError as exc:
        raise InvalidNameError(f"invalid device name {shown(qualified)}: {exc}", exc.rule) from None
    validate_device_name(name)
    return QualifiedName(kind.vendor, kind.class_, name)


def qualified_name(vendor: str, class_: str, name: str) -> str:
    """Format a fully-qualified name, validating every part."""
    validate_vendor(vendor)
    validate_class(class_)
    validate_device_name(name)
    return f"{vendor}/{class_}={name}"


def natural_key_uncached(text: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key that orders ``dev2`` before ``dev10``.

    A run of ASCII digits compares by its value, found from its length and digits rather than by
    converting it (a name may hold thousands of digits, which ``int`` refuses); other text, other
    scripts' digits included, compares as text.
    """
    out = []
    for i, part in enumerate(_DIGIT_RUN.split(text)):
        if i % 2:
            digits = part.lstrip("0")
            out.append((0, len(digits), digits))
        elif part:
            out.append((1, 0, part))
    return tuple(out)


#: :func:`natural_key_uncached`, cached: for device names, which the plugin sorts again and again.
#: Text sorted once per scan (node and sysfs paths) uses the uncached function, so that the cache
#: does not hold a key for each (2000 keys, about 1 MiB, at 1000 devices).
natural_key = functools.lru_cache(maxsize=1 << 16)(natural_key_uncached)
