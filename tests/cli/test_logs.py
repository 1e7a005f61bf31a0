"""Every log line the long-running programs write is one line: text from outside is escaped."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from cdi_plugin.cli.logs import JsonFormatter, TextFormatter, configure_command
from cdi_plugin.wording import escape_controls, shown

FORGED = "fuse\n2026-01-01 00:00:00,000 INFO    all is well\r\x1b[2J\u2028\u202e\x85"


def _record(*args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError(FORGED)
        except ValueError:
            exc_info = sys.exc_info()
    fields = {"name": "cdi_plugin.x", "levelno": logging.WARNING, "levelname": "WARNING"}
    return logging.makeLogRecord(
        {**fields, "msg": "device %s refused", "args": args, "exc_info": exc_info, **extra}
    )


def test_escape_controls() -> None:
    assert escape_controls(FORGED) == (
        "fuse\\n2026-01-01 00:00:00,000 INFO    all is well\\r\\x1b[2J\\u2028\\u202e\\x85"
    )
    assert escape_controls("plain ünïcode / ok") == "plain ünïcode / ok"
    assert shown("x" * 100, 10) == "'xxxxxxxxxx'... (100 characters)"
    assert shown(["a\n"]) == "['a\\n']"


def test_a_text_record_is_one_line_whatever_its_arguments() -> None:
    line = TextFormatter().format(_record(FORGED))
    assert "\n" not in line
    assert "\r" not in line
    assert line.endswith(f"WARNING device {escape_controls(FORGED)} refused")


def test_a_traceback_keeps_its_lines_each_indented_and_escaped() -> None:
    text = TextFormatter().format(_record("x", exc=True))
    first, *rest = text.split("\n")
    assert first.endswith("WARNING device x refused")
    assert rest
    assert all(line.startswith("  ") for line in rest)
    assert "  ValueError: fuse" in rest
    assert "  2026-01-01 00:00:00,000 INFO    all is well\\r\\x1b[2J\\u2028\\u202e\\x85" in rest


@pytest.mark.parametrize("exc", [False, True])
def test_a_json_record_is_one_line_and_its_fields_escaped(exc: bool) -> None:
    line = JsonFormatter().format(_record(FORGED, exc=exc, claim=FORGED, count=3))
    assert "\n" not in line
    assert "\u2028" not in line
    assert "\x85" not in line
    doc = json.loads(line)
    assert doc["msg"] == f"device {escape_controls(FORGED)} refused"
    assert doc["claim"] == escape_controls(FORGED)
    assert doc["count"] == 3
    if exc:
        assert all(part.startswith("  ") for part in doc["error"].split("\n"))


def test_a_one_shot_commands_warning_goes_to_stderr_as_it_is_then(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal spinner (``cdi-gen scan``) puts its own stand-in for stderr while it spins: a
    warning logged meanwhile goes through it, not around it into the spinner's line."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        configure_command("cdi-gen")
        spinning = io.StringIO()
        monkeypatch.setattr(sys, "stderr", spinning)
        logging.getLogger("cdi_plugin.store.files").warning("skipping %s", FORGED)
    finally:
        root.handlers[:] = saved
    assert spinning.getvalue() == f"cdi-gen: warning: skipping {escape_controls(FORGED)}\n"
