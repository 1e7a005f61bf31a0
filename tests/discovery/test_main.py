"""``python -m cdi_plugin.discovery``: print a query's result as a fixture file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cdi_plugin.discovery.__main__ import main
from cdi_plugin.discovery.fixture import loads, simulated


def test_replays_the_bundled_fixture_for_a_query(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--source", f"fixture:{simulated()}", "-s", "kfd", "-g", "/dev/vfio/[0-9]*", "-a", "vendor"])
    out = capsys.readouterr().out
    assert code == 0
    devices = loads(out, "stdout")
    assert [(d.subsystem, d.devnode) for d in devices] == [("kfd", "/dev/kfd"), ("", "/dev/vfio/42")]


def test_records_the_live_host_as_a_loadable_fixture() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cdi_plugin.discovery", "-s", "misc", "-g", "/dev/loop[0-9]*", "-a", "dev"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    devices = {d.devnode: d for d in loads(done.stdout, "stdout")}
    assert devices["/dev/fuse"].attributes == {"dev": "10:229"}
    assert devices["/dev/loop0"].subsystem == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "nvml"], "--source 'nvml': must be 'udev' or 'fixture:PATH'"),
        (
            ["--source", "fixture:/nonexistent.json"],
            "/nonexistent.json: cannot read: No such file or directory",
        ),
        (
            ["-g", "/proc/*"],
            "devnode glob '/proc/*': must be an absolute path under /dev without '.', '..' or '//'",
        ),
    ],
)
def test_errors_are_one_line_with_exit_1(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"python -m cdi_plugin.discovery: error: {message}\n"


def test_help_says_what_it_prints_and_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0
    assert "Print what discovery finds, as a fixture file" in text
    assert "``" not in text
    assert "default: /dev" in text
