"""Which kinds are served: those cdi-gen wrote (by its ownership record) and those matching ``--kind``.

A kind whose spec file someone changed since cdi-gen wrote it is no longer cdi-gen's, and is let
go at once: a reading of the spec directories never catches cdi-gen's own rewrite half-way
(:mod:`cdi_plugin.inventory.source`). Each kind's decision is logged once, when it changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

from cdi_plugin.inventory.source import Reading

log = logging.getLogger(__name__)


class KindSelection:
    def __init__(self, matching_glob: Callable[[str], str | None]) -> None:
        """``matching_glob(kind)``: the ``--kind`` glob that names ``kind``, or None."""
        self._matching_glob = matching_glob
        self._logged: dict[str, str] = {}
        self._owned_before: set[str] = set()
        self._seen: frozenset[str] = frozenset()
        self._served: set[str] = set()

    def select(self, kinds: Set[str], reading: Reading) -> set[str]:
        """The kinds among ``kinds`` (those present in the reading) to serve. Only kinds new since
        the last call, or that a record names, are judged again: the others' decision depends
        only on ``--kind``, which does not change."""
        again = (kinds - self._seen) | (
            (reading.owned | reading.recorded | self._owned_before | self._served) & kinds
        )
        served = (self._served & kinds) - again
        for kind in sorted(again):
            glob = self._matching_glob(kind)
            if kind in reading.owned:
                why = f"serving kind {kind}: its spec was written by cdi-gen"
            elif glob is not None:
                why = f"serving kind {kind}: it matches --kind {glob}"
            elif kind in self._owned_before or kind in reading.recorded:
                why = (
                    f"not serving kind {kind}: its spec file was changed since cdi-gen wrote it "
                    f"(serve it with --kind {kind})"
                )
            else:
                why = f"not serving kind {kind}: cdi-gen did not write it (serve it with --kind {kind})"
            if kind in reading.owned or glob is not None:
                served.add(kind)
            if self._logged.get(kind) != why:
                self._logged[kind] = why
                log.info("%s", why)
        self._owned_before = served & set(reading.owned)
        self._seen = frozenset(kinds)
        self._served = served
        return set(served)
