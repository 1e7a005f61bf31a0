"""How fast ``cdi-gen scan`` is: 1000 simulated devices, the real host, and start-up.

Run: ``.venv/bin/python bench/bench_scan.py [--runs N]``. Prints the median (and min/max) of N
runs per case next to its target. Cases:

* 1000 binder devices from a StaticSource: discovery, naming, edits, validation, plan and atomic
  write of a 1000-device spec into an empty directory; then the same scan again (unchanged: no write).
* the real host through UdevSource with the embedded default: discovery alone, and the whole
  scan into an empty directory (in-process, interpreter start-up excluded).
* ``cdi-gen --help`` and a whole ``cdi-gen scan --dry-run`` process, start-up included.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cdi_plugin.discovery.model import DiscoveredDevice, NodeInfo, StaticSource
from cdi_plugin.generate.config import default_classes
from cdi_plugin.generate.match import query_for
from cdi_plugin.scan import ScanOptions, run_scan

VENV_BIN = Path(sys.executable).parent


def binders(n: int) -> list[DiscoveredDevice]:
    return [
        DiscoveredDevice(
            subsystem="misc",
            sys_name=f"binder{i}",
            sys_path=f"/sys/devices/virtual/misc/binder{i}",
            devnode=f"/dev/binderfs/binder{i}",
            node=NodeInfo("c", 10, 60 + i, 0o666, 0, 0),
            properties={"MAJOR": "10", "MINOR": str(60 + i), "DEVNAME": f"binderfs/binder{i}"},
        )
        for i in range(n)
    ]


def timed(fn: Callable[[], object], runs: int, setup: Callable[[], object] | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    rows: list[tuple[str, list[float], float | None]] = []
    work = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    try:
        source = StaticSource(binders(1000))
        out = work / "binder"
        options = ScanOptions(output_dir=out, spec_dirs=())

        def fresh() -> None:
            shutil.rmtree(out, ignore_errors=True)

        report = run_scan(options, source)
        assert report.device_count == 1000, report.device_count
        rows.append(
            (
                "1000 devices: scan+build+validate+write",
                timed(lambda: run_scan(options, source), runs, fresh),
                1.0,
            )
        )
        run_scan(options, source)
        rows.append(
            ("1000 devices: same scan, unchanged", timed(lambda: run_scan(options, source), runs), 1.0)
        )

        from cdi_plugin.discovery.udev import UdevSource

        udev = UdevSource()
        query = query_for(default_classes())
        rows.append(("real host: UdevSource discovery", timed(lambda: udev.discover(query), runs), None))
        host_out = work / "host"
        host_options = ScanOptions(output_dir=host_out, spec_dirs=())
        rows.append(
            (
                "real host: whole scan (embedded default)",
                timed(
                    lambda: run_scan(host_options, udev),
                    runs,
                    lambda: shutil.rmtree(host_out, ignore_errors=True),
                ),
                0.2,
            )
        )
        rows.append(
            (
                "process: cdi-gen --help",
                timed(
                    lambda: subprocess.run([VENV_BIN / "cdi-gen", "--help"], capture_output=True, check=True),
                    runs,
                ),
                0.15,
            )
        )
        rows.append(
            (
                "process: cdi-gen scan --dry-run (real host)",
                timed(
                    lambda: subprocess.run(
                        [VENV_BIN / "cdi-gen", "scan", "--dry-run", "--output-dir", work / "cli"],
                        capture_output=True,
                        check=True,
                    ),
                    runs,
                ),
                None,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'case':46} {'median':>9} {'min':>9} {'max':>9} {'target':>9}  result   (runs: {runs})")
    for name, times, target in rows:
        med = statistics.median(times)
        verdict = "" if target is None else ("ok" if med < target else "MISSED")
        tgt = "-" if target is None else f"{target * 1000:.0f} ms"
        low, high = min(times) * 1000, max(times) * 1000
        print(f"{name:46} {med * 1000:7.1f}ms {low:7.1f}ms {high:7.1f}ms {tgt:>9}  {verdict}")


if __name__ == "__main__":
    main()
