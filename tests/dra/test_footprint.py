"""The DRA driver's Kubernetes client stays out of a process that does not use it, and gRPC out
of its API server side."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def test_the_device_plugin_does_not_load_the_kubernetes_client() -> None:
    code = (
        "import sys, cdi_plugin.deviceplugin.daemon, cdi_plugin.dra.kubelet, cdi_plugin.dra.slices;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightkube', 'httpx2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_the_api_server_side_does_not_load_grpc() -> None:
    code = (
        "import sys, cdi_plugin.dra.kube, cdi_plugin.dra.publisher;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_serve_with_the_device_plugin_api_only_does_not_load_it(tmp_path: Path) -> None:
    """``cdi-plugin serve`` run in a fresh interpreter for 3 s, then stopped by SIGTERM; nor pyudev,
    which only the DRA driver's udev facts need."""
    plugins = Path(tempfile.mkdtemp(prefix="dp-"))  # short: unix socket paths
    args = ["serve", "--spec-dir", str(tmp_path / "cdi"), "--plugin-dir", str(plugins)]
    code = (
        "import signal, sys, threading\n"
        "from cdi_plugin.cli.plugin import main\n"
        "threading.Timer(3, lambda: signal.raise_signal(signal.SIGTERM)).start()\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightkube', 'httpx2', 'pyudev')))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        plugins.rmdir()
    assert out.stdout.strip() == "[]", out.stderr
    assert "starting: spec dirs" in out.stderr  # it did serve
