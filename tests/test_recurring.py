"""A lasting condition: said once, summarised at most every interval, a new reason at once, its end once."""

from __future__ import annotations

import logging
import re

import pytest

from cdi_plugin.recurring import REASONS_SAID, Recurring, duration

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


def test_two_reasons_in_turn_are_each_said_once_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    """A kubelet that is now missing, now refusing: each reason once, then no line per retry."""
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    condition = Recurring(logging.getLogger("t"), every=300, clock=clock)
    for _ in range(10):
        clock.now += 20
        condition.report(logging.INFO, "waiting")
        condition.report(logging.WARNING, "refused")
    first, *rest = zip(*[iter(said(caplog))] * 2, strict=True)
    assert first == ((logging.INFO, "waiting"), (logging.WARNING, "refused"))
    assert {level for pair in rest for level, _ in pair} == {logging.DEBUG}, "no line per retry"
    clock.now += 200
    condition.report(logging.INFO, "waiting")
    condition.report(logging.WARNING, "refused")
    summaries = said(caplog)
    assert [level for level, _ in summaries] == [logging.INFO, logging.WARNING]
    assert re.fullmatch(rf"still waiting \(11 times since {WHEN}, for 6\.3 min\)", summaries[0][1])
    assert re.fullmatch(rf"still refused \(11 times since {WHEN}, for 6\.3 min\)", summaries[1][1])
    clock.now += 10
    assert condition.recovered()
    ((_, line),) = said(caplog)
    assert re.fullmatch(rf"recovered after 6\.5 min \(11 times since {WHEN}\): refused", line), line


def test_a_reason_that_changes_at_every_attempt_is_said_a_few_times_then_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An address or a counter in the reason: the first reasons in full, then one summary per
    interval counting those logged at debug level, the existing rules kept for the rest."""
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    condition = Recurring(logging.getLogger("t"), every=300, clock=clock)
    for attempt in range(100):  # one every 10 s
        condition.report(logging.WARNING, f"refused: attempt {attempt}", "; retrying in 10 s")
        clock.now += 10
    lines = said(caplog)
    loud = [line for level, line in lines if level == logging.WARNING]
    assert loud[:REASONS_SAID] == [f"refused: attempt {i}; retrying in 10 s" for i in range(REASONS_SAID)]
    summaries = loud[REASONS_SAID:]
    assert len(summaries) == 3  # at 340 s, 640 s and 940 s
    for summary, attempt in zip(summaries, (34, 64, 94), strict=True):
        new = rf"\(30 new reasons since {WHEN}, logged at debug level\)"
        assert re.fullmatch(rf"still refused: attempt {attempt} {new}", summary), summary
    assert [line for level, line in lines if level == logging.DEBUG] == [
        f"refused: attempt {i}; retrying in 10 s" for i in range(REASONS_SAID, 100) if i not in (34, 64, 94)
    ]
    condition.report(logging.WARNING, "refused: attempt 99")  # the same again: the usual summary
    assert said(caplog) == [(logging.DEBUG, "refused: attempt 99")]
    assert condition.recovered()
    ((_, line),) = said(caplog)
    quiet = rf"; 5 new reasons since {WHEN} logged at debug level"  # 95 to 99, counted in no line yet
    assert re.fullmatch(
        rf"recovered after 10 s \(2 times since {WHEN}{quiet}\): refused: attempt 99", line
    ), line
    for attempt in range(REASONS_SAID):  # a new condition: its reasons said in full again
        condition.report(logging.WARNING, f"refused: again {attempt}")
    assert [level for level, _ in said(caplog)] == [logging.WARNING] * REASONS_SAID
