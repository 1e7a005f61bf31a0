"""deploy/systemd/: the units pass `systemd-analyze verify` without a single warning, and say what
the host needs: a boot-time scan ordered before the runtimes, a watcher that restarts, both as
root without capabilities and able to write /etc/cdi and nothing else."""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_plugin.cli import gen
from cdi_plugin.discovery.fixture import simulated

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED_BIN = "/opt/cdi-plugin/bin/"
VENV_BIN = str(Path(sys.executable).parent) + "/"
SIMULATED = simulated()
RUNTIMES = {"containerd.service", "crio.service", "docker.service", "podman.service", "kubelet.service"}


def _unit(name: str) -> dict[str, dict[str, list[str]]]:
    """Sections of a unit file, each key with every value it was given, in order."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in (UNITS / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def _one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section][key]
    assert len(values) == 1, (section, key, values)
    return values[0]


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Verified as installed, with the ExecStart binaries pointing at this checkout's venv."""
    names = sorted(p.name for p in UNITS.glob("*.service"))
    assert names == ["cdi-gen-scan.service", "cdi-gen-watch.service"]
    for name in names:
        text = (UNITS / name).read_text()
        assert INSTALLED_BIN + "cdi-gen " in text
        (tmp_path / name).write_text(text.replace(INSTALLED_BIN, VENV_BIN))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in names)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # it only warns about unknown keys and bad values; any output is a mistake
    assert result.stderr == ""
    assert result.stdout == ""


def test_verify_notices_a_mistake(tmp_path: Path) -> None:
    text = (UNITS / "cdi-gen-watch.service").read_text().replace(INSTALLED_BIN, VENV_BIN)
    (tmp_path / "typo.service").write_text(text.replace("Restart=on-failure", "Restrat=on-failure"))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "typo.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Unknown key 'Restrat'" in result.stderr


def test_the_boot_scan_runs_once_before_the_runtimes() -> None:
    unit = _unit("cdi-gen-scan.service")
    assert _one(unit, "Service", "Type") == "oneshot"
    assert _one(unit, "Service", "RemainAfterExit") == "yes"
    command = shlex.split(_one(unit, "Service", "ExecStart"))
    assert command[:3] == [INSTALLED_BIN + "cdi-gen", "scan", "--skip-refused"]
    assert command[3:] == ["$CDI_GEN_OPTIONS"]
    assert set(_one(unit, "Unit", "Before").split()) >= RUNTIMES
    assert "systemd-udev-trigger.service" in _one(unit, "Unit", "After").split()
    assert _one(unit, "Install", "WantedBy") == "multi-user.target"


def test_the_watcher_runs_cdi_gen_watch_and_restarts() -> None:
    unit = _unit("cdi-gen-watch.service")
    assert _one(unit, "Service", "Type") == "simple"
    command = shlex.split(_one(unit, "Service", "ExecStart"))
    assert command == [INSTALLED_BIN + "cdi-gen", "watch", "$CDI_GEN_OPTIONS"]
    assert _one(unit, "Service", "Restart") == "on-failure"
    assert "cdi-gen-scan.service" in _one(unit, "Unit", "After").split()
    assert _one(unit, "Install", "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("name", ["cdi-gen-scan.service", "cdi-gen-watch.service"])
def test_root_without_capabilities_writing_only_etc_cdi(name: str) -> None:
    service = _unit(name)["Service"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["ProtectSystem"] == ["strict"]
    assert service["ConfigurationDirectory"] == ["cdi"]
    assert service["UMask"] == ["0022"]
    assert "User" not in service
    # the uevent socket must stay in the host's network namespace
    assert "PrivateNetwork" not in service
    assert "AF_NETLINK" in service["RestrictAddressFamilies"][0].split()
    # options for both units come from one optional file
    assert service["EnvironmentFile"] == ["-/etc/default/cdi-gen"]
    assert service["Environment"] == ["CDI_GEN_OPTIONS="]


def test_the_scan_units_command_line_runs(tmp_path: Path) -> None:
    """The boot unit's exact command line, with options as /etc/default/cdi-gen would add them."""
    command = shlex.split(_one(_unit("cdi-gen-scan.service"), "Service", "ExecStart"))
    command = [c.replace(INSTALLED_BIN, VENV_BIN) for c in command if c != "$CDI_GEN_OPTIONS"]
    out = tmp_path / "cdi"
    result = subprocess.run(
        [*command, "--source", "simulated", "--output-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.glob("*.json"))


def test_the_watch_units_command_line_runs_until_sigterm(tmp_path: Path) -> None:
    """The watcher unit's exact command line, fed a recorded host instead of udev."""
    command = shlex.split(_one(_unit("cdi-gen-watch.service"), "Service", "ExecStart"))
    command = [c.replace(INSTALLED_BIN, VENV_BIN) for c in command if c != "$CDI_GEN_OPTIONS"]
    out = tmp_path / "cdi"

    async def scenario() -> tuple[int, str]:
        watcher = await asyncio.create_subprocess_exec(
            *command, "--source", f"fixture:{SIMULATED}", "--output-dir", str(out),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert watcher.stderr is not None
        try:
            async with asyncio.timeout(20):  # the first scan is logged once its specs are written
                while "initial scan" not in (line := (await watcher.stderr.readline()).decode()):
                    assert line, "cdi-gen watch ended before its first scan"
            assert (out / "cdi-plugin.io-fuse.json").is_file()
            watcher.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                stderr = await watcher.stderr.read()
                return await watcher.wait(), stderr.decode()
        finally:
            if watcher.returncode is None:
                watcher.kill()
                await watcher.wait()

    status, stderr = asyncio.run(scenario())
    assert status == 0, stderr


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart.md", "docs/deploy.md"])
def test_the_docs_install_the_tools_where_the_units_run_them_and_on_path(doc: str) -> None:
    text = (ROOT / doc).read_text()
    venv = INSTALLED_BIN.removesuffix("/bin/")
    assert f"python3 -m venv {venv} " in text.replace("\n", " ")
    assert f"{venv}/bin/pip install ." in text
    assert f"ln -sf {INSTALLED_BIN}cdi-gen {INSTALLED_BIN}cdi-plugin /usr/local/bin/" in text
    assert ".venv/bin/cdi-gen" not in text


def test_the_options_named_for_both_units_are_those_scan_and_watch_take() -> None:
    def options(command: str) -> set[str]:
        return {
            o for p in gen.main.commands[command].params for o in getattr(p, "opts", ()) if o.startswith("--")
        }

    # --source: a host's units read udev (fixture:PATH is for tests and demos)
    both = (options("scan") & options("watch")) - {"--help", "--source"}
    comment = (UNITS / "cdi-gen-scan.service").read_text().partition("(options both")[2].partition(")")[0]
    docs = (ROOT / "docs" / "deploy.md").read_text().partition("Only options both commands take")[2]
    docs = docs.partition(")")[0]
    for named in (comment, docs):
        assert set(re.findall(r"--[\w-]+", named)) == both
