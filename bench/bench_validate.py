"""How long validating a large CDI spec takes, next to a plain-Python JSON Schema baseline.

Builds a realistic spec of N devices (default 1000; each with a card and a render node, and env),
then times, over R runs in this one process:

* the whole ``cdi-gen validate`` pipeline on the bytes (parse, strict decode, runtime and strict
  rules, the project's JSON Schema through jsonschema-rs), and each of its stages;
* the baseline: the same pipeline with the same schema checked by the pure-Python ``jsonschema``
  package (Draft202012Validator) instead of jsonschema-rs, and that schema check alone;
* the same spec declared too low for a feature every device uses, so that each device yields a
  problem (the report must not grow quadratically with the number of problems).

It also times ``cdi-gen --help`` and ``cdi-gen validate FILE`` as real processes. The target is
under 100 ms for 1000 devices, schema included; when it is missed (or with ``--profile``) a
cProfile summary shows where the time goes.

Run: ``.venv/bin/python bench/bench_validate.py [--devices 1000] [--runs 30] [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from cdi_plugin.cdi import codec, schema, validate

TARGET_MS = 100.0
CDI_GEN = Path(sys.executable).parent / "cdi-gen"


def build_spec(devices: int) -> dict[str, Any]:
    """A GPU-like spec: per device a card and a render node and two env entries, shared edits on top."""
    return {
        "cdiVersion": "0.3.0",
        "kind": "acme.example/gpu",
        "devices": [
            {
                "name": f"card{i}",
                "containerEdits": {
                    "env": [f"ACME_VISIBLE_DEVICES={i}", f"ACME_DEVICE_UUID=GPU-{i:08x}-5e1f-4c2a-9b7d"],
                    "deviceNodes": [
                        {"path": f"/dev/dri/card{i}", "type": "c", "major": 226, "minor": i % 128,
                         "permissions": "rw", "fileMode": 432, "gid": 44},
                        {"path": f"/dev/dri/renderD{128 + i}", "type": "c", "major": 226,
                         "minor": 128 + i % 128, "permissions": "rw", "fileMode": 438, "gid": 105},
                    ],
                },
            }
            for i in range(devices)
        ],
        "containerEdits": {
            "env": ["ACME_DRIVER_CAPABILITIES=compute,utility"],
            "deviceNodes": [{"path": "/dev/acmectl", "type": "c", "major": 195, "minor": 255}],
            "mounts": [
                {"hostPath": "/usr/lib/x86_64-linux-gnu/libacme.so.1",
                 "containerPath": "/usr/lib/x86_64-linux-gnu/libacme.so.1",
                 "options": ["ro", "nosuid", "bind"]}
            ],
            "hooks": [
                {"hookName": "createContainer", "path": "/usr/bin/acme-ctk",
                 "args": ["acme-ctk", "hook", "update-ldcache"]}
            ],
        },
    }  # fmt: skip


def timings(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm caches (compiled schema, YAML loader, imports)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def process_timings(args: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, capture_output=True, check=False)
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(name: str, values: list[float], baseline: list[float] | None = None) -> str:
    median = statistics.median(values)
    ratio = f"{statistics.median(baseline) / median:7.1f}x" if baseline else " " * 8
    return f"  {name:<52} {median:9.2f} {p90(values):9.2f}  {ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--process-runs", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="always show where the time goes")
    args = parser.parse_args()

    doc = build_spec(args.devices)
    data = json.dumps(doc, indent=2).encode()
    obj, _ = codec.parse(data, "bench.json")
    spec = codec.spec_from_obj(obj)
    check = validate.validate_bytes(data, "bench.json")
    assert check.valid, check.problems
    python_schema = Draft202012Validator(schema.load(schema.SPEC_SCHEMA))
    assert python_schema.is_valid(obj)

    def pipeline_python_schema() -> None:
        parsed, _ = codec.parse(data, "bench.json")
        decoded = codec.spec_from_obj(parsed)
        validate.runtime_problems(decoded)
        validate.strict_problems(decoded)
        list(python_schema.iter_errors(parsed))

    ours = timings(lambda: validate.validate_bytes(data, "bench.json"), args.runs)
    theirs = timings(pipeline_python_schema, args.runs)
    stages = {
        "parse (JSON text -> objects)": timings(lambda: codec.parse(data, "bench.json"), args.runs),
        "strict decode (objects -> Spec)": timings(lambda: codec.spec_from_obj(obj), args.runs),
        "runtime + strict rules": timings(
            lambda: (validate.runtime_problems(spec), validate.strict_problems(spec)), args.runs
        ),
    }
    too_low = json.loads(data)
    for device in too_low["devices"]:
        device["containerEdits"]["deviceNodes"][0]["hostPath"] = device["containerEdits"]["deviceNodes"][0][
            "path"
        ]
    too_low_data = json.dumps(too_low).encode()
    assert len(validate.validate_bytes(too_low_data, "bench.json").problems) == args.devices
    every_device_wrong = timings(lambda: validate.validate_bytes(too_low_data, "bench.json"), args.runs)
    schema_rs = timings(lambda: schema.problems(obj), args.runs)
    schema_py = timings(lambda: list(python_schema.iter_errors(obj)), args.runs)

    size = f"{len(data) / 1024:.0f} KiB of JSON"
    print(f"CDI spec validation: {args.devices} devices, {size}, {args.runs} runs")
    print(f"  {'':<52} {'median ms':>9} {'p90 ms':>9}  {'baseline/ours':>8}")
    print(row("validate_bytes, schema by jsonschema-rs (ours)", ours, theirs))
    print(row("same pipeline, schema by Python jsonschema (baseline)", theirs))
    for name, values in stages.items():
        print(row(f"  stage: {name}", values))
    print(row("  stage: JSON Schema, jsonschema-rs (ours)", schema_rs, schema_py))
    print(row("  stage: JSON Schema, Python jsonschema (baseline)", schema_py))
    print(row(f"validate_bytes, {args.devices} problems (hostPath at 0.3.0)", every_device_wrong))
    median = statistics.median(ours)
    verdict = "met" if median < TARGET_MS else "MISSED"
    print(f"target: under {TARGET_MS:.0f} ms for 1000 devices -> {verdict} ({median:.1f} ms)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "acme.example-gpu.json"
        path.write_bytes(data)
        done = subprocess.run([str(CDI_GEN), "validate", str(path)], capture_output=True, check=False)
        assert done.returncode == 0, done.stdout
        runs = args.process_runs
        help_ms = process_timings([str(CDI_GEN), "--help"], runs)
        validate_ms = process_timings([str(CDI_GEN), "validate", str(path)], max(5, runs // 2))
        python_ms = process_timings([sys.executable, "-c", "pass"], runs)
    print(f"\ncdi-gen as a process ({runs} runs; a bare 'python -c pass' for scale)")
    print(f"  {'':<52} {'median ms':>9} {'p90 ms':>9}")
    print(row("python -c pass", python_ms))
    print(row("cdi-gen --help", help_ms))
    print(row(f"cdi-gen validate <{args.devices}-device file>", validate_ms))

    if args.profile or median >= TARGET_MS:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(10):
            validate.validate_bytes(data, "bench.json")
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print("\nwhere validate_bytes spends its time (10 runs, by own time):")
        print(out.getvalue())


if __name__ == "__main__":
    main()
