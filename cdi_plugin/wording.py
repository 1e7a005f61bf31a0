"""How messages count things: ``1 device``, ``2 devices``, ``3 device classes``."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1 (``-es`` after a final ``s``)."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith('s') else 's'}"
