"""The whole suite runs against private spec directories, never the host's.

A real host has specs in /etc/cdi and /var/run/cdi (cdi-gen's own among them); a test must pass
whatever they hold, and must never change them. Property tests have no time limit per example
(hypothesis's deadline and its too-slow health check): on a busy machine any example is slow now
and then.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from cdi_plugin.store.files import SPEC_DIRS_ENV

settings.register_profile("busy", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("busy")


@pytest.fixture(autouse=True)
def private_spec_dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """``$CDI_SPEC_DIRS`` names two directories of a fresh temporary directory, for every test.

    Both tools, and every process a test starts, take it as the spec directories runtimes read.
    The directories do not exist (a test that needs them creates them); their parent is in /tmp
    and world-readable, so that tools run as an unprivileged user see them as missing, not
    unreadable.
    """
    base = Path(tempfile.mkdtemp(prefix="cdi-spec-dirs-", dir="/tmp"))
    try:
        base.chmod(0o755)
        dirs = (base / "etc-cdi", base / "run-cdi")
        monkeypatch.setenv(SPEC_DIRS_ENV, ":".join(map(str, dirs)))
        yield dirs
    finally:
        shutil.rmtree(base, ignore_errors=True)
