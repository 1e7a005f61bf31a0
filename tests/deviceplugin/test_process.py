"""``python -m cdi_plugin.cli.plugin serve`` as a real process: signals, sockets, config, errors."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, sock, spec_of, write_spec

KIND = "cdi-plugin.io/test"
COMMAND = [sys.executable, "-m", "cdi_plugin.cli.plugin"]

pytestmark = pytest.mark.timeout(180)


def _serve_args(layout: Layout, *extra: str) -> list[str]:
    return [
        *COMMAND,
        "serve",
        "--spec-dir",
        str(layout.etc),
        "--spec-dir",
        str(layout.run),
        "--plugin-dir",
        str(layout.plugin_dir),
        "--sysfs-root",
        str(layout.sysfs),
        *extra,
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_stops_the_process_with_status_0_and_removes_its_sockets(
    tmp_path: Path, sig: signal.Signals
) -> None:
    layout = Layout.under(tmp_path)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    config = tmp_path / "config.yaml"
    config.write_text('plugin:\n  resources:\n    "cdi-plugin.io/*": {replicas: 2}\n')
    stray = layout.plugin_dir / "someone-else.sock"

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            stray.write_text("")  # not the plugin's: must survive
            proc = await asyncio.create_subprocess_exec(
                *_serve_args(layout, "--config", str(config), "--log-format", "json"),
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                client = await kubelet.wait_registered(KIND)
                devices = await client.wait_until(lambda d: len(d) == 2)
                assert set(devices) == {"a#0", "a#1"}
                answer = await client.allocate(["a#1"])
                assert [d.name for d in answer.cdi_devices] == [f"{KIND}=a"]
                assert sock(layout, KIND) in layout.sockets()
                proc.send_signal(sig)
                code = await asyncio.wait_for(proc.wait(), 60)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert code == 0
            assert layout.sockets() == {"kubelet.sock"}
            assert stray.exists()
            assert proc.stderr is not None
            lines = [json.loads(line) for line in (await proc.stderr.read()).decode().splitlines()]
            messages = [entry["msg"] for entry in lines]
            assert any("registered with the kubelet" in m for m in messages)
            assert any("allocated a#1 -> cdi-plugin.io/test=a" in m for m in messages)
            assert any(f"{sig.name} received, stopping" in m for m in messages)
            assert all({"time", "level", "logger", "msg"} <= set(entry) for entry in lines)
            assert any(entry.get("resource") == KIND for entry in lines)

    run(scenario())


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--config", "{missing}"], 1, "cdi-plugin: error: {missing}: no such file or directory"),
        (
            ["--config", "{bad}"],
            1,
            "cdi-plugin: error: {bad}: plugin.replicas: 0 is less than the minimum of 1",
        ),
        (["--grace-period", "soon"], 2, "invalid duration 'soon'"),
        (["--kind", "gpu"], 2, "'gpu' is not a kind"),
        (["--replicas", "0"], 2, "--replicas"),
        (["--cdi-strategy", "env"], 2, "--cdi-strategy"),
    ],
)
def test_bad_input_gives_a_one_line_error(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    layout = Layout.under(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugin: {replicas: 0}\n")
    names = {"missing": str(tmp_path / "nope.yaml"), "bad": str(bad)}
    args = [a.format(**names) for a in args]
    result = subprocess.run(
        _serve_args(layout, *args), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == code
    assert message.format(**names) in result.stderr
    if code == 1:
        assert result.stderr.count("\n") == 1
    assert layout.sockets() == set()


def test_help_explains_every_option() -> None:
    result = subprocess.run(
        [*COMMAND, "serve", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    for option in (
        "--spec-dir",
        "--plugin-dir",
        "--kubelet-socket",
        "--kind",
        "--replicas",
        "--cdi-strategy",
        "--log-format",
        "--config",
        "--grace-period",
    ):
        assert option in result.stdout
    assert "--sysfs-root" not in result.stdout
    top = subprocess.run([*COMMAND, "--help"], capture_output=True, text=True, timeout=30, check=True)
    assert "serve" in top.stdout
