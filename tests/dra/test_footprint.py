"""The DRA driver's Kubernetes client stays out of a process that does not use it."""

from __future__ import annotations

import subprocess
import sys


def test_the_device_plugin_does_not_load_the_kubernetes_client() -> None:
    code = (
        "import sys, cdi_plugin.deviceplugin.daemon, cdi_plugin.dra.kubelet, cdi_plugin.dra.slices;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightkube', 'httpx2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
