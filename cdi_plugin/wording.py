"""How messages count things (``1 device``, ``2 devices``, ``3 device classes``), list them
(``A, B and C``), name what a file is (``a FIFO``) and show text from outside (escaped and cut),
an unexpected exception's among it."""

from __future__ import annotations

import re
import stat


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1 (``-es`` after a final ``s``)."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith('s') else 's'}"


def joined(items: list[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def some(items: list[str], most: int = 5, total: int | None = None) -> str:
    """Up to ``most`` of ``items``, then how many more: ``A, B, C, D, E and 3 more`` (of ``total``
    when ``items`` holds only the first ones)."""
    count = len(items) if total is None else total
    if count <= most:
        return joined(items)
    return f"{', '.join(items[:most])} and {count - most} more"


def first_few(items: list[str], shown: int = 3) -> str:
    """The first ``shown`` of ``items``, then ``...`` if there are more: ``A, B, C, ...``."""
    return ", ".join(items[:shown] + (["..."] if len(items) > shown else []))


def defined_in(paths: list[str]) -> str:
    """``defined in both A and B``, ``defined in A, B and C``: where a name is defined twice or more."""
    return f"defined in {'both ' if len(paths) == 2 else ''}{joined(paths)}"


def file_type(mode: int) -> str:
    """What a file of ``st_mode`` is, with its article: ``a FIFO``, ``a directory``, ..."""
    for test, name in _FILE_TYPES:
        if test(mode):
            return name
    return "an unknown kind of file"


_FILE_TYPES = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


#: Characters that end or redraw a line on a terminal or in a log reader: C0 and C1 controls, DEL,
#: the Unicode line and paragraph separators, and the bidirectional overrides and isolates; and
#: lone surrogates (a JSON string may hold one), which UTF-8, gRPC's strings among them, cannot carry.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``, ``\\u2028``),
    so that text from outside can never start a line of its own or rewrite one in a log, nor make
    a message that cannot be encoded (``\\ud800``)."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def shown(value: object, limit: int = 80) -> str:
    """``value`` for a message: a string quoted, anything else as Python writes it, control
    characters escaped, cut after ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    quote = "'" if isinstance(value, str) else ""
    return quote + escape_controls(text[:limit]) + quote + _cut(text, limit)


def clipped(text: str, limit: int = 80) -> str:
    """``text`` for a message, unquoted: control characters escaped, cut after ``limit`` characters."""
    return escape_controls(text[:limit]) + _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    return f"... ({len(text)} characters)" if len(text) > limit else ""


#: What is shown of the text of an exception no one expected (it may hold a whole answer or file).
FAULT_CHARS = 300


def fault(exc: BaseException) -> str:
    """``Type: text`` of an exception no one expected, for a message: the text escaped and cut
    after :data:`FAULT_CHARS` characters, so that no message can make a huge log line."""
    text = str(exc)
    return f"{type(exc).__name__}: {clipped(text, FAULT_CHARS)}" if text else type(exc).__name__
