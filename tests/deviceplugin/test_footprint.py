"""The plugin process loads only what it needs: its memory limit in a DaemonSet depends on it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


def test_the_plugin_never_imports_the_scanner_or_the_human_output_stack() -> None:
    probe = (
        "import sys, cdi_plugin.cli.plugin, cdi_plugin.deviceplugin.daemon;"
        "print(' '.join(sorted(m for m in ('jsonschema_rs', 'yaml', 'rich', 'pyudev', 'click') "
        "if m in sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["click"]


_SERVE = """
import atexit, sys
OPTIONAL = ("prometheus_client", "lightkube", "cdi_plugin.deviceplugin._proto.api_pb2_grpc", "ssl",
            "cdi_plugin.discovery")
atexit.register(lambda: print(
    "loaded:", *sorted(m for m in OPTIONAL if sys.modules.get(m)),
    *(["libcrypto"] if "/libcrypto" in open("/proc/self/maps").read() else []), file=sys.stderr, flush=True))
from cdi_plugin.cli.plugin import main
main(["serve", "--spec-dir", sys.argv[1], "--plugin-dir", sys.argv[2], *sys.argv[3:]])
"""


def _serve_loads(tmp_path: Path, *flags: str) -> list[str]:
    """What a real ``cdi-plugin serve`` process loaded of the modules it may do without (the
    generated gRPC stubs included), once it ran (read the spec directory, listening for changes)
    and stopped on SIGTERM."""
    specs, plugins = tmp_path / "cdi", tmp_path / "plugins"
    specs.mkdir()
    plugins.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(specs), str(plugins), *flags],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "nothing to serve yet" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    [loaded] = [line for line in rest.splitlines() if line.startswith("loaded:")]
    return loaded.split()[1:]


def test_serve_without_a_metrics_address_loads_none_of_the_modules_or_openssl_it_does_without(
    tmp_path: Path,
) -> None:
    assert _serve_loads(tmp_path) == []


def test_serve_with_a_metrics_address_loads_prometheus_client_and_the_openssl_it_imports(
    tmp_path: Path,
) -> None:
    loaded = _serve_loads(tmp_path, "--metrics-address", "127.0.0.1:0")
    assert loaded == ["prometheus_client", "ssl", "libcrypto"]
