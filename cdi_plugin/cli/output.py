"""Standard output written whole or not at all: a reader that goes away in the middle of a
write is an error (:class:`BrokenPipeError`), never output cut without one, and a document is
not cut by an interruption (SIGINT)."""

from __future__ import annotations

import io
import signal
import sys
import threading


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


#: Set once a whole document is out.
_WRITTEN = threading.Event()


def document_written() -> bool:
    """Whether a whole document is out: an interruption after it adds no error document."""
    return _WRITTEN.is_set()


def write_document(document: str | bytes) -> None:
    """Write ``document`` to stdout in one go, SIGINT held until it is out: a reader gets the
    whole document or, interrupted before, nothing of it (a ``--json`` report, the objects of
    ``dra-objects``). KeyboardInterrupt, once it is out, when SIGINT came meanwhile."""
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:  # else nothing to hold
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        if isinstance(document, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(document)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(document)
            sys.stdout.flush()
        _WRITTEN.set()
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    if held:
        raise KeyboardInterrupt
