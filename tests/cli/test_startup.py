"""``cdi-gen`` start-up: help and version, and that help loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys

from cdi_plugin import __version__
from tests.cli.conftest import CDI_GEN, Invoke, run_cdi_gen

HEAVY = ("grpc", "google.protobuf", "yaml", "jsonschema_rs", "rich", "pyudev", "cdi_plugin.deviceplugin")


def test_help(cli: Invoke) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    assert "Generate, check and list Container Device Interface (CDI) specs." in result.stdout
    for command in ("validate", "list", "inspect"):
        assert f"  {command} " in result.stdout
    assert cli("-h").stdout == result.stdout


def test_command_help(cli: Invoke) -> None:
    result = cli("validate", "--help")
    assert result.exit_code == 0
    assert "--cdi-version-max VERSION" in result.stdout
    assert "--json" in result.stdout
    assert "Exit status: 0 when everything is valid, 1 when anything is invalid, 2 on usage errors." in (
        " ".join(result.stdout.split())
    )


def test_version(cli: Invoke) -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout == f"cdi-gen, version {__version__}\n"


def test_help_as_a_real_program_imports_nothing_heavy() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(CDI_GEN), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "validate" in done.stdout
    imported = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "click" in imported
    assert "cdi_plugin.cli.gen" in imported
    heavy = [m for m in imported if m.startswith(HEAVY)]
    assert heavy == []


def test_help_leaves_grpc_out_of_sys_modules() -> None:
    code = (
        "import sys\n"
        "from cdi_plugin.cli.gen import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'grpc', 'google', 'yaml', 'rich'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]"


def test_version_as_a_real_program() -> None:
    done = run_cdi_gen("--version")
    assert (done.returncode, done.stdout) == (0, f"cdi-gen, version {__version__}\n")


def test_python_dash_m_runs_cdi_gen() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cdi_plugin", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"cdi-gen, version {__version__}\n")
