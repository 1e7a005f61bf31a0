"""``cdi-gen watch`` against simulated hot-plug: umockdev testbeds emitting add/remove uevents."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.scan.helpers import CDI_GEN

HERE = Path(__file__).resolve().parent
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi and gir1.2-umockdev-1.0
BINDER = """classes:
  - vendor: cdi-plugin.io
    class: binder
    match: {subsystem: misc, kernel: "binder*"}
    naming: [kernel]
"""

pytestmark = pytest.mark.umockdev


def test_simulated_devices_plugged_in_and_out_update_the_spec(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(BINDER)
    out = tmp_path / "out"
    spec_file = out / "cdi-plugin.io-binder.json"
    env = {**os.environ, "TMPDIR": "/dev/shm"} if os.access("/dev/shm", os.W_OK) else None
    watcher = [str(CDI_GEN), "watch", "--config", str(config), "--output-dir", str(out),
               "--spec-dir", str(out), "--log-format", "json"]  # fmt: skip
    done = subprocess.run(
        ["umockdev-wrapper", SYSTEM_PYTHON, str(HERE / "umockdev_driver.py"), str(spec_file), *watcher],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["seen"] == [["binder7"], ["binder7", "binder8"], ["binder8"], None], result["messages"]
    assert result["status"] == 0, result["messages"]
    messages = result["messages"]
    assert any(m.endswith("devices added: cdi-plugin.io/binder=binder7") for m in messages)
    assert any(m.endswith("devices removed: cdi-plugin.io/binder=binder7") for m in messages)
    assert messages[-1] == "stopped watching"
