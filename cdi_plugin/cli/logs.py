"""Logging of the long-running ``cdi-plugin serve`` and ``cdi-gen watch``: text or JSON lines on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

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
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = (
                    value if isinstance(value, str | int | float | bool) or value is None else str(value)
                )
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(fmt: LogFormat = "text", level: int = logging.INFO) -> None:
    """Send the package's logs to stderr in ``fmt``; quiet down gRPC's own logger."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s"))
    # neither format shows process or thread: skip collecting them for every record
    logging.logProcesses = logging.logThreads = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("cdi_plugin").setLevel(level)
