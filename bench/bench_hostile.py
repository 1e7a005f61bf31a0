"""What hostile input costs: YAML alias bombs, oversize numbers, many-star globs, and the price
of composing YAML event by event (which is what lets anchors be refused) on an ordinary spec.

Times, as medians over R runs:

* ``cdi-gen validate`` on a 200 KB alias bomb and ``cdi-gen scan --dry-run`` on a 1 KB
  billion-laughs config, as real processes, with their peak RSS (from ``wait4``);
* parsing a spec holding one 5000-digit number (JSON and YAML);
* one glob match of sixteen ``*`` and a missing literal against a 2000-character value;
* parsing an ordinary YAML spec of N devices (default 3000, about 0.5 MB) with the strict loader,
  next to plain ``yaml.load`` with libyaml's C loader (which composes in C and builds aliases).

Run: ``.venv/bin/python bench/bench_hostile.py [--devices 3000] [--runs 9]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from cdi_plugin.cdi import codec, model
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.globs import glob_match

BIN = Path(sys.executable).parent


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def process(args: list[str]) -> tuple[float, int]:
    """Wall time (ms) and peak RSS (MiB) of one run of ``args``."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return (time.perf_counter() - start) * 1000, usage.ru_maxrss // 1024


def refused(data: bytes, fmt: codec.Format) -> None:
    try:
        codec.decode(data, "bench", fmt)
    except SpecLoadError:
        return
    raise AssertionError("accepted")


def ordinary_spec(devices: int) -> bytes:
    spec = model.Spec(
        cdi_version="0.5.0",
        kind="example.com/gpu",
        devices=tuple(
            model.Device(
                name=f"gpu{i}",
                container_edits=model.ContainerEdits(
                    env=(f"GPU={i}",),
                    device_nodes=(model.DeviceNode(path=f"/dev/dri/card{i}", major=226, minor=i),),
                ),
            )
            for i in range(devices)
        ),
    )
    return codec.encode(spec, "yaml")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bomb, laughs = Path(tmp) / "bomb.yaml", Path(tmp) / "config.yaml"
        head = "cdiVersion: 0.5.0\nkind: ex.io/bomb\ndevices:\n  - &d\n    name: a\n    containerEdits: {}\n"
        bomb.write_text(head + "  - *d\n" * ((200_000 - len(head)) // 7))
        lines = ["laugh0: &laugh0 [" + ", ".join(["lol"] * 10) + "]"]
        lines += [f"laugh{i}: &laugh{i} [" + ", ".join([f"*laugh{i - 1}"] * 10) + "]" for i in range(1, 10)]
        laughs.write_text("\n".join(lines) + "\n")
        gen = str(BIN / "cdi-gen")
        for name, argv in (
            (f"cdi-gen validate, {bomb.stat().st_size // 1000} KB alias bomb", [gen, "validate", str(bomb)]),
            (
                f"cdi-gen scan, {laughs.stat().st_size} B billion-laughs config",
                [gen, "scan", "--dry-run", "--output-dir", tmp + "/out", "--config", str(laughs)],
            ),
        ):
            runs = [process(argv) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            print(f"{name}: {wall:.0f} ms, peak RSS {max(r[1] for r in runs)} MiB (median of {args.runs})")
    digits = "9" * 5000
    for fmt, data in (
        ("json", f'{{"cdiVersion": "0.5.0", "kind": "a.b/c", "devices": [], "x": {digits}}}'.encode()),
        ("yaml", f"cdiVersion: 0.5.0\nx: {digits}\n".encode()),
    ):
        took = median_ms(lambda fmt=fmt, data=data: refused(data, fmt), args.runs)
        print(f"{fmt} spec with a 5000-digit number refused: {took:.2f} ms")
    value = "a" * 2000
    per_match = median_ms(lambda: [glob_match("*" * 16 + "x", value) for _ in range(1000)], args.runs)
    print(f"glob of sixteen '*' and a missing literal, 2000 characters: {per_match:.4f} µs per match")
    data = ordinary_spec(args.devices)
    text = data.decode()
    strict = median_ms(lambda: codec.parse(data, "bench", "yaml"), args.runs)
    plain = median_ms(lambda: yaml.load(text, Loader=yaml.CSafeLoader), args.runs)
    print(
        f"{len(data) // 1000} KB YAML spec ({args.devices} devices): strict loader {strict:.0f} ms, "
        f"plain C loader {plain:.0f} ms (ratio {strict / plain:.2f})"
    )


if __name__ == "__main__":
    main()
