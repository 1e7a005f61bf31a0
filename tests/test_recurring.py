"""A lasting condition: said once, summarised at most every interval, a new reason at once, its end once."""

from __future__ import annotations

import logging
import re

import pytest

from cdi_plugin.recurring import Recurring, duration

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    out = [(r.levelno, r.getMessage()) for r in caplog.records]
    caplog.clear()
    return out


def test_a_lasting_condition_is_said_once_then_summarised_then_its_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    condition = Recurring(logging.getLogger("t"), every=300, clock=clock, extra={"resource": "r"})
    assert not condition
    assert not condition.recovered()
    condition.report(logging.ERROR, "refused: no", "; retrying in 1s")
    assert getattr(caplog.records[0], "resource", None) == "r"
    assert said(caplog) == [(logging.ERROR, "refused: no; retrying in 1s")]
    assert condition
    assert condition.due() == 300
    for _ in range(5):
        clock.now += 59
        condition.report(logging.ERROR, "refused: no", "; retrying in 2s")
    assert said(caplog) == [(logging.DEBUG, "refused: no; retrying in 2s")] * 5
    clock.now += 5
    assert condition.due() == 0
    condition.report(logging.ERROR, "refused: no", "; retrying in 2s")
    ((level, line),) = said(caplog)
    assert level == logging.ERROR
    assert re.fullmatch(rf"still refused: no \(7 times since {WHEN}, for 5\.0 min\)", line), line
    clock.now += 10
    condition.report(logging.ERROR, "refused: no", "")
    assert said(caplog) == [(logging.DEBUG, "refused: no")], "the next summary waits a whole interval"
    condition.report(logging.WARNING, "unreachable", "; retrying in 2s")
    assert said(caplog) == [(logging.WARNING, "unreachable; retrying in 2s")], "a new reason at once"
    clock.now += 42
    assert condition.recovered()
    ((level, line),) = said(caplog)
    assert level == logging.INFO
    assert re.fullmatch(rf"recovered after 42 s \(1 time since {WHEN}\): unreachable", line), line
    assert not condition.recovered()
    assert said(caplog) == []
    condition.report(logging.ERROR, "unreachable", "")
    assert said(caplog) == [(logging.ERROR, "unreachable")], "the same reason after a recovery is new"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "0.2 s"), (9.94, "9.9 s"), (42.4, "42 s"), (119, "119 s"), (300, "5.0 min"), (9000, "2.5 h")],
)
def test_durations(seconds: float, text: str) -> None:
    assert duration(seconds) == text
