"""Logging of the long-running ``cdi-plugin serve`` and ``cdi-gen watch``: text or JSON lines on
stderr; the one-shot commands' warnings as their own are written, ``<program>: warning: ...``.

Messages carry text from outside (file names, device names, the API server's answers), so every
control character in them is written as an escape (a newline as a backslash and ``n``): one record is
one line, and no text can forge another or redraw the terminal. A traceback keeps its lines, each
escaped and indented under the record's.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal

from cdi_plugin.wording import escape_controls

LogFormat = Literal["text", "json"]

#: Attributes every LogRecord has; anything else was passed with ``extra=`` and is a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, msg, then the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": escape_controls(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = _field(value)
        if record.exc_info:
            out["error"] = _traceback(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False)


def _field(value: Any) -> object:
    if isinstance(value, int | float | bool) or value is None:
        return value
    return escape_controls(value if isinstance(value, str) else str(value))


def _traceback(text: str) -> str:
    return "\n".join("  " + escape_controls(line) for line in text.split("\n"))


class TextFormatter(logging.Formatter):
    """``time level message``, the message's control characters escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _traceback(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _traceback(stack_info)


class CommandFormatter(logging.Formatter):
    """``<program>: warning: <message>`` (``error`` from ERROR up), control characters escaped."""

    def __init__(self, program: str) -> None:
        super().__init__()
        self.program = program

    def format(self, record: logging.LogRecord) -> str:
        level = "warning" if record.levelno < logging.ERROR else "error"
        return f"{self.program}: {level}: {escape_controls(record.getMessage())}"


def configure_command(program: str) -> None:
    """Send the package's warnings and errors to stderr as :class:`CommandFormatter` lines, unless
    logging is set up already (a test's capture); a long-running command's :func:`configure`
    replaces this."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(CommandFormatter(program))
        root.addHandler(handler)


def configure(fmt: LogFormat = "text", level: int = logging.INFO) -> None:
    """Send the package's logs to stderr in ``fmt``; quiet down gRPC's own logger."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    # neither format shows process or thread: skip collecting them for every record
    logging.logProcesses = logging.logThreads = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("cdi_plugin").setLevel(level)
