"""Standard output written whole or not at all: a reader that goes away in the middle of a
write is an error (:class:`BrokenPipeError`), never output cut without one, a document is not
cut by an interruption (SIGINT), and text is cut only where a write of it ends (a line, a table)."""

from __future__ import annotations

import contextlib
import io
import signal
import sys
from collections.abc import Iterator

import click

_SIGINT = {signal.SIGINT}


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked until the block is done, then delivered (KeyboardInterrupt) if it came."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _WholeWrites(io.TextIOWrapper):
    """Each write taken whole, SIGINT held meanwhile: an interruption in the middle of a long one
    (a table into a pipe its reader empties slowly) would make the buffer drop the rest of it,
    leaving a half line before the error."""

    def write(self, s: str) -> int:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)  # as _sigint_held, at half the cost
        try:
            return super().write(s)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def buffer_stdout() -> None:
    """Put ``sys.stdout`` on a buffer of its own, whose writes are whole (:class:`_WholeWrites`).

    Without a buffer (``PYTHONUNBUFFERED``, ``python -u``), a write that the file takes only part
    of (a pipe whose reader went away in the middle, a disk nearly full) loses the rest without an
    error: the text layer ignores a short write. A buffer writes the rest, and so meets the reader
    gone. Flushed at each newline where stdout was (a terminal, no buffer), else when full.
    """
    out = sys.stdout
    if isinstance(out, _WholeWrites) or not isinstance(out, io.TextIOWrapper):
        return
    if not isinstance(out.buffer, io.RawIOBase | io.BufferedWriter):
        return  # not a file (click's test runner)
    out.flush()
    raw = io.FileIO(out.fileno(), "w", closefd=False)  # the file's own: sys.__stdout__ keeps the old one
    sys.stdout = _WholeWrites(
        io.BufferedWriter(raw),
        encoding=out.encoding,
        errors=out.errors,
        line_buffering=out.line_buffering or isinstance(out.buffer, io.RawIOBase),
    )


#: Set in the command's root context once a whole document is out.
_WRITTEN = "cdi_plugin.document_written"


def document_written(ctx: click.Context) -> bool:
    """Whether the command of ``ctx`` wrote a whole document: an interruption after it adds no
    error document."""
    return bool(ctx.find_root().meta.get(_WRITTEN))


def write_document(document: str | bytes) -> None:
    """Write ``document`` to stdout in one go, SIGINT held until it is out: a reader gets the
    whole document or, interrupted before, nothing of it (a ``--json`` report, the objects of
    ``dra-objects``). KeyboardInterrupt, once it is out, when SIGINT came meanwhile."""
    with _sigint_held():
        if isinstance(document, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(document)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(document)
            sys.stdout.flush()
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            ctx.find_root().meta[_WRITTEN] = True
