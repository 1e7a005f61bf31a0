"""Shell glob patterns (``*``, ``?``, ``[abc]``, ``[!abc]``), matched case-sensitively in linear time.

Each pattern is translated once by :func:`fnmatch.translate` and compiled once (cached). Its
translation matches a run of ``*`` as one and every later ``*`` as an atomic group, which never
backtracks, so ``****************x`` takes time in proportion to the text, not to its power.
Pure: no I/O, no other layer; the matcher for device classes, discovery, the watcher and the
plugin's ``--kind`` and per-kind settings.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable

_Matcher = Callable[[str], "re.Match[str] | None"]


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> _Matcher:
    return re.compile(fnmatch.translate(pattern)).match


def glob_match(pattern: str, value: str) -> bool:
    """Whether ``value`` matches ``pattern``; ``*`` and ``?`` match any character, ``/`` too."""
    return _compiled(pattern)(value) is not None


@functools.lru_cache(maxsize=4096)
def _components(pattern: str) -> tuple[tuple[_Matcher, bool], ...]:
    return tuple((_compiled(part), part.startswith(".")) for part in pattern.split("/"))


def path_glob_match(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` as a shell (and :func:`glob.glob`) would find it: each
    ``/``-separated component on its own, and a wildcard never matches a leading dot."""
    parts = path.split("/")
    components = _components(pattern)
    if len(parts) != len(components):
        return False
    return all(
        (dot or not part.startswith(".")) and match(part) is not None
        for (match, dot), part in zip(components, parts, strict=True)
    )


_WILDCARD = re.compile(r"[*?[]")


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard (else it matches only itself)."""
    return _WILDCARD.search(pattern) is not None


def may_overlap(a: str, b: str) -> bool:
    """False only when no value can match both patterns, because their fixed heads (before the
    first wildcard) or tails (after the last) disagree; True does not promise a common value."""

    def head(p: str) -> str:
        found = _WILDCARD.search(p)
        return p if found is None else p[: found.start()]

    def tail(p: str) -> str:
        if not is_glob(p):
            return p
        return p[max(p.rfind(c) for c in "*?]") + 1 :]  # a ']' matched literally only shortens it

    ha, hb, ta, tb = head(a), head(b), tail(a), tail(b)
    return (ha.startswith(hb) or hb.startswith(ha)) and (ta.endswith(tb) or tb.endswith(ta))


def match_any(patterns: Iterable[str], value: str, *, path: bool = False) -> bool:
    """Whether one of ``patterns`` matches ``value`` (:func:`path_glob_match` if ``path``)."""
    match = path_glob_match if path else glob_match
    return any(match(p, value) for p in patterns)
