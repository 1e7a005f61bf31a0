"""How long the spec writer's check takes, this checkout against another one, in one run.

The writer checks every spec it writes: a whole spec on each write (``plan.encode_checked``) and
one device's spec on each hot-plug event (``LiveSpec._entry``). This times, over R runs:

* ``check_spec(spec)``: the semantic rules on the built spec, without the JSON Schema pass (and
  without encoding and decoding the spec), when this checkout has it;
* ``validate_object(codec.spec_to_obj(spec))``: what the writer ran before (encode to objects,
  strict decode, the rules, the JSON Schema through jsonschema-rs);

for the GPU-like spec of ``bench_validate.py`` with N devices (default 1000) and for one device's
spec. With ``--compare PYTHON`` (e.g. ``<another checkout>/.venv/bin/python``) the same measurements also
run under that interpreter's cdi_plugin, in a child process, and are printed beside these.

Then, for each interpreter, a fresh process imports the writer (``cdi_plugin.store.plan``), writes
the spec's file contents once (``encode_checked``) and reports its VmRSS and whether jsonschema-rs
was loaded (``tests/cdi/test_writer_check.py`` checks that the writer never runs the schema).

Run: ``.venv/bin/python bench/bench_writer_check.py [--devices 1000] [--runs 30] [--compare PY]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_validate import build_spec, timings

from cdi_plugin.cdi import codec, validate
from cdi_plugin.cdi.model import Spec

CASES = ("spec", "entry")


def measure(devices: int, runs: int) -> dict[str, Any]:
    """Medians in ms per case and check."""
    spec = codec.spec_from_obj(build_spec(devices))
    entry = Spec(cdi_version=spec.cdi_version, kind=spec.kind, devices=spec.devices[:1])
    check_spec = getattr(validate, "check_spec", None)
    out: dict[str, Any] = {"python": sys.executable}
    if check_spec is not None:
        assert check_spec(spec).valid
        assert check_spec(entry).valid
        for case, value in zip(CASES, (spec, entry), strict=True):
            out[f"check_spec, {case}"] = statistics.median(timings(lambda v=value: check_spec(v), runs))
    for case, value in zip(CASES, (spec, entry), strict=True):
        times = timings(lambda v=value: validate.validate_object(codec.spec_to_obj(v)), runs)
        out[f"validate_object(spec_to_obj), {case}"] = statistics.median(times)
    return out


WRITE_ONCE = """
import json, sys
from pathlib import Path
from cdi_plugin.cdi import codec
from cdi_plugin.store.plan import encode_checked
spec = codec.spec_from_obj(json.loads(sys.stdin.read()))
encode_checked(spec, Path("bench.json"), "json", None)
rss = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmRSS:"))
loaded = "jsonschema_rs" in sys.modules
print(json.dumps({"VmRSS MiB after one write": int(rss) / 1024, "loads jsonschema-rs": loaded}))
"""


def write_once(python: str, devices: int) -> dict[str, Any]:
    """A fresh writer process's memory after writing one spec (median VmRSS of 5 processes)."""
    doc = json.dumps(build_spec(devices))
    with tempfile.TemporaryDirectory() as elsewhere:  # not this checkout, which `-c` would import
        runs = [
            json.loads(subprocess.run([python, "-c", WRITE_ONCE], input=doc, capture_output=True, text=True,
                                      check=True, cwd=elsewhere).stdout)
            for _ in range(5)
        ]  # fmt: skip
    key = "VmRSS MiB after one write"
    return {**runs[0], key: statistics.median(r[key] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--compare", help="another checkout's Python to measure beside this one")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the child's output
    args = parser.parse_args()
    ours = measure(args.devices, args.runs)
    if args.json:
        print(json.dumps(ours))
        return
    columns = [ours]
    if args.compare:
        child = [args.compare, __file__, "--json", "--devices", str(args.devices), "--runs", str(args.runs)]
        done = subprocess.run(child, capture_output=True, text=True, check=True, cwd=Path(__file__).parent)
        columns.append(json.loads(done.stdout))
    for column in columns:
        column.update(write_once(column["python"], args.devices))
    print(f"writer's check, {args.devices} devices (spec) and one device (entry); median ms of {args.runs}")
    print(f"  {'':<44}" + "".join(f"{'this' if c is ours else 'compared':>12}" for c in columns))
    keys = [k for k in ours if k != "python"] + [k for c in columns[1:] for k in c if k not in ours]
    for key in keys:
        cells = (c.get(key) for c in columns)
        print(f"  {key:<44}" + "".join(f"{_cell(v):>12}" for v in cells))
    if args.compare:
        print(f"  compared: {columns[1]['python']}")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.2f}"


if __name__ == "__main__":
    main()
