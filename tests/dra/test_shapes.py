"""The API server's answers checked before use: pure, no server needed."""

from __future__ import annotations

import email.utils
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.dra import api
from cdi_plugin.dra.backoff import Backoff, Failures
from cdi_plugin.dra.shapes import (
    Allocated,
    BadAnswer,
    claim_results,
    decode_object,
    retry_after,
    slice_problem,
    status_of,
)
from cdi_plugin.dra.slices import build_pool
from tests.dra.conftest import DRIVER, NODE
from tests.dra.test_kubelet import claim_obj

REF = api.Claim("ns", "c", "uid-1")


def test_claim_results_of_the_driver() -> None:
    claim = claim_obj(REF, ("main/sub", NODE, "gpu-card0"), ("x", NODE, "fuse-fuse"), admin=True)
    claim["status"]["allocation"]["devices"]["results"].append({"driver": "other.io", "pool": 7})
    assert claim_results(claim, "ns", "c", DRIVER) == (
        "uid-1",
        (Allocated("main/sub", NODE, "gpu-card0", True), Allocated("x", NODE, "fuse-fuse", True)),
    )
    assert claim_results({"metadata": {"namespace": "ns", "name": "c", "uid": "u"}}, "ns", "c", DRIVER) == (
        "u",
        None,
    )


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    )
)
@settings(max_examples=300, deadline=None)  # fmt: skip
def test_any_json_is_a_claim_or_a_bad_answer(value: Any) -> None:
    """Whatever the shape of an answer, a claim is read or refused, never a KeyError or TypeError."""
    nested = {"metadata": {"namespace": "ns", "name": "c", "uid": "u"}, "status": {"allocation": value}}
    for claim in (value, {"metadata": value}, nested):
        if not isinstance(claim, dict):
            continue
        problems = []
        try:
            claim_results(claim, "ns", "c", DRIVER)
        except BadAnswer as exc:
            problems.append(str(exc))
        problems.append(slice_problem(claim) or "")
        status_of(claim)
        assert all("\n" not in p for p in problems)


def test_a_slice_the_driver_builds_is_one_it_accepts() -> None:
    built = build_pool(DRIVER, NODE, {}, taints=True).slices(3)[0]
    built["metadata"]["resourceVersion"] = "5"
    assert slice_problem(built) is None
    built["spec"]["pool"]["generation"] = -1
    assert slice_problem(built) == "spec.pool.generation: -1 is negative"
    built["spec"]["pool"]["generation"] = True
    assert slice_problem(built) == "spec.pool.generation: True is not an integer"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe{}", "not JSON"),
        (b"   ", "an empty body"),
        (b"null", "a JSON null, not an object"),
        (b"1e999999", "a JSON number, not an object"),
        (b'{"a": 1}{"b": 2}', "not JSON"),
    ],
)
def test_decode_object(data: bytes, reason: str) -> None:
    with pytest.raises(BadAnswer, match=reason):
        decode_object(data)


def test_status_of() -> None:
    assert str(status_of({"kind": "Status", "code": 410, "reason": "Expired", "message": "old"})) == (
        "410 Expired: old"
    )
    assert status_of({"kind": "Status", "code": "410"}) is None
    long = status_of({"kind": "Status", "code": 500, "reason": "R" * 50, "message": "m\n" * 150})
    escaped_newlines = "m\\n" * 100
    assert str(long) == f"500 {'R' * 40}... (50 characters): {escaped_newlines}... (300 characters)"
    assert status_of({"error": "x"}) is None


def test_a_version_too_large_is_told_by_its_cause_or_by_its_message() -> None:
    def too_large(**fields: Any) -> bool:
        status = status_of({"kind": "Status", "code": 504, "reason": "Timeout", **fields})
        assert status is not None
        return status.version_too_large

    assert too_large(details={"causes": [{"type": "ResourceVersionTooLarge"}]})
    assert too_large(message="Timeout: Too large resource version: 5, current: 4")
    assert not too_large(message="Timeout: request did not complete within 60s")
    late = [{}] * 40 + [{"type": "ResourceVersionTooLarge"}]  # past the causes looked at
    for causes in ("x", [1, None, "ResourceVersionTooLarge"], [{"type": 5}], late):
        assert not too_large(details={"causes": causes})
    assert not too_large(details=[])


def test_failures_back_off_to_the_cap_and_are_forgotten_after_a_quiet_while() -> None:
    random.seed(1)
    now = [0.0]
    failures = Failures(Backoff(1.0, 30.0), reset_after=120.0, clock=lambda: now[0])
    delays = []
    for _ in range(8):
        delays.append(failures.next_delay())
        now[0] += delays[-1]
    assert delays == sorted(delays)
    assert 0.8 <= delays[0] <= 1.2
    assert all(24 <= d <= 36 for d in delays[5:])
    now[0] += 121
    assert 0.8 <= failures.next_delay() <= 1.2


def test_a_failure_waits_as_long_as_the_server_asks_up_to_the_cap() -> None:
    failures = Failures(Backoff(1.0, 30.0))
    assert 7.0 <= failures.next_delay(7.0) <= 8.4
    assert 30.0 <= failures.next_delay(3600.0) <= 36.0
    assert 3.2 <= failures.next_delay(0.5) <= 4.8  # the backoff's own delay when longer


def test_nodes_told_the_same_retry_after_do_not_come_back_at_the_same_instant() -> None:
    """The same jitter as the backoff's own, upwards only: never sooner than asked."""
    delays = [Failures(Backoff(1.0, 30.0)).next_delay(7.0) for _ in range(1000)]
    assert all(7.0 <= d <= 8.4 for d in delays)
    assert max(delays) - min(delays) > 1.0


NOW = 1_800_000_000.0


def test_a_retry_after_is_seconds_or_a_date_else_nothing() -> None:
    assert retry_after(["7"], NOW) == 7.0
    assert retry_after([" 120 "], NOW) == 120.0
    assert retry_after([email.utils.formatdate(NOW + 20, usegmt=True)], NOW) == 20.0
    assert retry_after([email.utils.formatdate(NOW + 20)], NOW) == 20.0  # as -0000, taken as GMT
    for garbage in ("", "0", "-5", "1.5", "1e3", "soon", "\u0663", "9" * 65, "86401",
                    email.utils.formatdate(NOW - 20, usegmt=True), "Mon, 99 Foo 2015 99:99:99 GMT",
                    "Sat, 01 Jan 10000 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"):  # fmt: skip
        assert retry_after([garbage], NOW) is None, garbage
    assert retry_after([], NOW) is None


def test_a_repeated_or_folded_retry_after_counts_by_its_first_wait() -> None:
    date = email.utils.formatdate(NOW + 20, usegmt=True)
    assert retry_after(["5", "7"], NOW) == 5.0
    assert retry_after(["3, 4"], NOW) == 3.0
    assert retry_after(["soon", "4"], NOW) == 4.0
    assert retry_after(["soon,4"], NOW) == 4.0
    assert retry_after([f"{date}, 4"], NOW) == 20.0  # an HTTP-date's own comma is no separator
    assert retry_after([f"{email.utils.formatdate(NOW - 20, usegmt=True)}, 4"], NOW) == 4.0
    assert retry_after(["9" * 65, "6"], NOW) == 6.0  # a line too long is no wait
    assert retry_after(["x, y", "z", "a", "b", "5"], NOW) is None  # the first members only
