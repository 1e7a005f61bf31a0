"""Making text that comes from a device safe to put into a spec.

A device chooses some of its own udev properties and sysfs attributes (a USB serial number, a
model string), so they are hostile input. Each function here maps ANY string to a value that is
safe in one place of a spec:

* :func:`device_name`: a CDI device name that also works as a kubelet device ID and inside a
  ``cdi.k8s.io/`` annotation key: letters, digits, ``_ . -`` only, a letter first, a letter or digit
  last, at most 63 characters (longer names keep a prefix and end in a short hash of the input).
* :func:`safe_value`: an env value or hook argument: no ``/`` (cannot name a path), no leading
  ``-`` (cannot pass an option), no leading ``.``, no control characters (no newline, no NUL).
* :func:`path_component`: one component of a path: like :func:`safe_value`, never empty, so never
  ``.`` or ``..`` and never a separator.
* :func:`clean_node_path`: whether a device node path reported by discovery may be used as is.
* :func:`hostile_reason`: why a value is an injection attempt rather than merely untidy text.
  Untidy text (spaces, punctuation, non-ASCII) is sanitised silently; a hostile value makes
  cdi-gen refuse the device, since a device that sends one is not to be trusted at all.
"""

from __future__ import annotations

import re
from string import ascii_letters

from cdi_plugin.cdi.names import SHORT_HASH_LEN, short_hash

NAME_MAX = 63
VALUE_MAX = 255

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+@-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_LEADING = re.compile(r"^[-.]+")
_PATH_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+@/-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def device_name(raw: str, prefix: str) -> str | None:
    """A safe device name for ``raw``, or None when nothing usable is left.

    ``prefix`` (which must itself start with a letter) is put in front when the cleaned text
    does not start with a letter, e.g. a serial number ``0042`` becomes ``<prefix>0042``.
    """
    cleaned = _EDGE.sub("", _NAME_UNSAFE.sub("_", raw))
    if not cleaned:
        return None
    if cleaned[0] not in ascii_letters:
        cleaned = prefix + cleaned
    if len(cleaned) <= NAME_MAX:
        return cleaned
    head = _EDGE.sub("", cleaned[: NAME_MAX - SHORT_HASH_LEN - 1])
    return f"{head}-{short_hash(raw)}"


def safe_value(raw: str) -> str:
    """``raw`` as an env value or argument that cannot name a path, pass an option or break a line."""
    cleaned = _LEADING.sub("_", _VALUE_UNSAFE.sub("_", raw))
    if len(cleaned) > VALUE_MAX:
        cleaned = cleaned[: VALUE_MAX - SHORT_HASH_LEN - 1] + "_" + short_hash(raw)
    return cleaned


def path_component(raw: str) -> str:
    """``raw`` as exactly one path component: never empty, ``.``, ``..`` or containing ``/``."""
    return safe_value(raw) or "_"


def clean_node_path(path: str) -> bool:
    """True for an absolute, normalised path without odd characters (``/dev/bus/usb/001/002``).

    Discovery reports node paths from the kernel; anything else (``..``, ``//``, spaces, control
    characters, a trailing ``/``) means the data cannot be trusted, and the device is refused.
    """
    if not path.startswith("/") or len(path) > 4096 or _PATH_UNSAFE.search(path):
        return False
    parts = path.split("/")[1:]
    return all(p not in {"", ".", ".."} for p in parts)


def hostile_reason(raw: str) -> str | None:
    """What makes ``raw`` an attempt to inject a path, an option or a line; None if it is not."""
    if _CONTROL.search(raw):
        return "a control character (newline, NUL, escape)"
    if "/" in raw:
        return "a path separator '/'"
    if raw.startswith("-"):
        return "a leading '-' (an option)"
    if raw in {".", ".."}:
        return "a relative path component"
    return None
