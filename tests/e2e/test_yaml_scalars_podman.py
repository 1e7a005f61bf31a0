"""A YAML spec as ``cdi-gen scan --format yaml`` writes it, read by podman's CDI library, whose
YAML reader (go-yaml v2) takes ``y`` for a boolean and ``1e3`` for a number where PyYAML reads text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import DiscoveredDevice
from tests.e2e.podman import PodmanEnv
from tests.generate.hosts import char, props
from tests.scan.helpers import run_cdi_gen

pytestmark = [pytest.mark.podman, pytest.mark.root]

CONFIG = """\
classes:
  - vendor: example.com
    class: serial
    match: {{subsystem: mem, kernel: "null"}}
    naming: [serial]
    edits:
      hooks:
        - hookName: createRuntime
          path: /bin/sh
          args: [sh, -c, 'echo "$1" > {seen}', sh, "{{property:ID_MODEL}}"]
"""


def test_a_device_named_y_is_found_by_podman_under_that_name(podman_env: PodmanEnv, tmp_path: Path) -> None:
    """A USB device chooses its serial number; one of ``y`` must not name a device the runtime
    calls ``true`` (nor a model of ``1e3`` become the argument ``1000``)."""
    null = DiscoveredDevice(
        subsystem="mem",
        sys_name="null",
        sys_path="/sys/devices/virtual/mem/null",
        devnode="/dev/null",
        node=char(1, 3, 0o666, 0),
        properties=props(ID_SERIAL_SHORT="y", ID_MODEL="1e3"),
    )
    host = tmp_path / "host.json"
    host.write_text(dumps([null]))
    config = tmp_path / "config.yaml"
    seen = tmp_path / "hook-argument"
    config.write_text(CONFIG.format(seen=seen))
    out = tmp_path / "cdi"
    args = (
        "scan",
        "--config",
        config,
        "--source",
        f"fixture:{host}",
        "--output-dir",
        out,
        "--format",
        "yaml",
    )
    report = json.loads(run_cdi_gen(*args, "--cdi-spec-dirs", out, "--json", check=0).stdout)
    assert [d["name"] for f in report["files"] for d in f["devices"]] == ["y"]
    ran = podman_env.run_container(["example.com/serial=y"], "echo ok", spec_dir=out)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ok"
    assert seen.read_text() == "1e3\n"
