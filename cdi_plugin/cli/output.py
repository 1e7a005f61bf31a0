"""Standard output written whole or not at all: a reader that goes away in the middle of a
write is an error (:class:`BrokenPipeError`), never output cut without one, a document is not
cut by an interruption (SIGINT), and text is cut only where a write of it ends (a line, a table)."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import click


class _SigintHeld:
    """SIGINT held until the block is done, then given to its handler (KeyboardInterrupt) if it
    came. Only the first one of the process is held: a later one (Ctrl-C twice) is given at once,
    standard output dropped, as its reader may never read (stopped, or a pager that ignores
    SIGINT). Held where Python handles signals (the main thread), unless it is ignored."""

    #: The SIGINTs the process took while holding them.
    taken = 0
    #: SIGINT's handler, given back at the end (None: nothing held).
    previous: Callable[[int, FrameType | None], Any] | int | None

    def __enter__(self) -> None:
        self.came = False
        self.previous = signal.getsignal(signal.SIGINT)
        if (
            self.previous in (signal.SIG_IGN, None)
            or isinstance(self.previous, _SigintHeld)  # held already (a write inside a document's)
            or threading.current_thread() is not threading.main_thread()
        ):
            self.previous = None
            return
        signal.signal(signal.SIGINT, self)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            if self.came:
                signal.raise_signal(signal.SIGINT)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        _SigintHeld.taken += 1
        if _SigintHeld.taken == 1:
            self.came = True
            return
        drop_stdout()
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        signal.raise_signal(signal.SIGINT)


def drop_stdout() -> None:
    """Send what stdout still holds, and will be given, to /dev/null: its reader is gone, or
    will not take it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _WholeWrites(io.TextIOWrapper):
    """Each write and flush taken whole, SIGINT held meanwhile: an interruption in the middle of a
    long write (a table into a pipe its reader empties slowly) would make the buffer drop the rest
    of it, leaving a half line before the error; one in the middle of a flush would leave the rest
    to the flush at exit, after the error, or for ever when the reader does not read."""

    def write(self, s: str) -> int:
        with _SigintHeld():
            return super().write(s)

    def flush(self) -> None:
        with _SigintHeld():
            super().flush()


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
    with _SigintHeld():
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
