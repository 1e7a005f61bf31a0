"""A bound on the streams a server keeps open at once: opening one more ends the oldest.

A client that restarts opens its new stream before its old one is seen to close: ending the
oldest, rather than refusing the newest, keeps the newest client served, and a client that opens
streams in a loop holds at most ``limit`` of them. A server whose client does not open a stream
again once it ends (the kubelet's ListAndWatch) refuses one more instead, checking ``len()``
before it opens one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class OpenStreams:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[object, asyncio.Event] = {}  # in the order they opened

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def opened(self) -> Iterator[asyncio.Event]:
        """A stream's slot for the block, ending the oldest streams beyond the limit first; the
        event is set when a newer stream ended this one (it then ends as soon as it can)."""
        while len(self._open) >= self.limit:
            self._open.pop(next(iter(self._open))).set()
        key, ended = object(), asyncio.Event()
        self._open[key] = ended
        try:
            yield ended
        finally:
            self._open.pop(key, None)
