"""Real HTTP GETs against the metrics endpoint, and the exposition parsed by prometheus_client."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str, method: str = "GET") -> tuple[int, str]:
    """(status, body) of one request; error statuses are returned, not raised."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> Samples:
    """Every sample of a text exposition, keyed by (name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def scrape(base_url: str) -> Samples:
    status, body = get(base_url + "/metrics")
    assert status == 200, body
    return samples(body)


async def metrics_until(
    base: str, predicate: Callable[[Samples], bool], what: str = "metrics", timeout: float = 60.0
) -> Samples:
    """Scrape until ``predicate(samples)`` holds (a counter may follow the answer it counts);
    AssertionError naming ``what`` if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = await asyncio.to_thread(scrape, base)
        if predicate(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s; {found}")
        await asyncio.sleep(0.05)


async def ready_until(base: str, status: int, body: str, timeout: float = 60.0) -> None:
    """Ask ``/readyz`` until it answers ``status`` with ``body`` (one line); ``timeout`` only
    bounds a failure."""
    deadline = time.monotonic() + timeout
    while (found := await asyncio.to_thread(get, base + "/readyz")) != (status, body + "\n"):
        if time.monotonic() > deadline:
            raise AssertionError(f"/readyz {(status, body)}: not within {timeout}s; last {found}")
        await asyncio.sleep(0.05)
