"""How messages count things (``1 device``, ``2 devices``, ``3 device classes``), list them
(``A, B and C``) and name what a file is (``a FIFO``)."""

from __future__ import annotations

import stat


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1 (``-es`` after a final ``s``)."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith('s') else 's'}"


def joined(items: list[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


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
