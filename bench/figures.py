"""What the benchmarks print, and read to print it: percentiles, rows of timings, the load
average, a process's memory from /proc."""

from __future__ import annotations

import os
import statistics
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (0.99: p99), one of the values itself."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(name: str, values: list[float], *, width: int = 44, digits: int = 3, peak: bool = True) -> str:
    """``name``, then columns of the p50, the p99, the maximum (if ``peak``) and the count."""
    cells = [statistics.median(values), pct(values, 0.99), *([max(values)] if peak else [])]
    return f"  {name:<{width}}" + "".join(f" {cell:8.{digits}f}" for cell in cells) + f" {len(values):6d}"


def line(name: str, values_ms: list[float], indent: str = "  ") -> str:
    """``name``, then the p50 and the p99 in ms, and the count."""
    return (
        f"{indent}{name:<34} p50 {statistics.median(values_ms):8.3f} ms   p99 {pct(values_ms, 0.99):8.3f} ms"
        f"   (n={len(values_ms)})"
    )


def load() -> str:
    """The load average over 1, 5 and 15 minutes."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def status_kib(pid: int, key: str) -> int:
    """A field of /proc/PID/status in KiB (``VmRSS``, ``VmHWM``)."""
    for entry in Path(f"/proc/{pid}/status").read_text().splitlines():
        if entry.startswith(key + ":"):
            return int(entry.split()[1])
    raise RuntimeError(f"no {key}")
