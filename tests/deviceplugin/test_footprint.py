"""The plugin process loads only what it needs: its memory limit in a DaemonSet depends on it."""

from __future__ import annotations

import subprocess
import sys


def test_the_plugin_never_imports_the_scanner_or_the_human_output_stack() -> None:
    probe = (
        "import sys, cdi_plugin.cli.plugin, cdi_plugin.deviceplugin.daemon;"
        "print(' '.join(sorted(m for m in ('jsonschema_rs', 'yaml', 'rich', 'pyudev', 'click') "
        "if m in sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["click"]
