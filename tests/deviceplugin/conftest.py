"""The fixture the device plugin's scenarios share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deviceplugin.helpers import Layout


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    """Spec, device, sysfs and kubelet directories under ``tmp_path``."""
    return Layout.under(tmp_path)
