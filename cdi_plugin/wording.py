"""How messages count things (``1 device``, ``2 devices``) and list them (``A, B and C``)."""

from __future__ import annotations


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
