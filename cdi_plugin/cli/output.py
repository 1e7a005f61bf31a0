"""Standard output written whole or not at all: a reader that goes away in the middle of a
write is an error (:class:`BrokenPipeError`), never output cut without one."""

from __future__ import annotations

import io
import sys


def buffer_stdout() -> None:
    """Put a buffer between ``sys.stdout`` and its file where there is none (``PYTHONUNBUFFERED``,
    ``python -u``).

    Without one, a write that the file takes only part of (a pipe whose reader went away in the
    middle) loses the rest without an error: the text layer ignores a short write. A buffer writes
    the rest, and so meets the reader gone. Flushed at each newline, as line-by-line output was.
    """
    out = sys.stdout
    if not isinstance(out, io.TextIOWrapper) or not isinstance(out.buffer, io.RawIOBase):
        return
    out.flush()
    raw = io.FileIO(out.fileno(), "w", closefd=False)  # the file's own: sys.__stdout__ keeps the old one
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors, line_buffering=True
    )
