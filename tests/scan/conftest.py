"""Fixtures for running ``cdi-gen scan`` as a user would: a recorded host and a spec directory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import DiscoveredDevice
from tests.generate.hosts import WORKSTATION


@pytest.fixture
def host_file(tmp_path: Path) -> Callable[[Sequence[DiscoveredDevice]], Path]:
    """Write devices to a fixture file for ``--source fixture:PATH``; world-readable."""
    counter = iter(range(1000))

    def make(devices: Sequence[DiscoveredDevice]) -> Path:
        path = tmp_path / f"host{next(counter)}.json"
        path.write_text(dumps(devices))
        path.chmod(0o644)
        return path

    return make


@pytest.fixture
def workstation(host_file: Callable[[Sequence[DiscoveredDevice]], Path]) -> Path:
    return host_file(WORKSTATION)
