"""The one factory of device sources, from the ``--source`` text every program takes.

``udev`` is the live host, ``simulated`` the bundled simulated workstation and ``fixture:PATH`` a
host recorded with ``python -m cdi_plugin.discovery``. Only what a source needs is imported, so
that pyudev is not loaded for a fixture.
"""

from __future__ import annotations

from pathlib import Path

from cdi_plugin.discovery.model import DeviceSource
from cdi_plugin.discovery.query import DEV
from cdi_plugin.errors import DiscoveryError

UDEV = "udev"
SIMULATED = "simulated"
FIXTURE_PREFIX = "fixture:"


def source_problem(spec: str, *, simulated: bool = True) -> str | None:
    """Why ``spec`` names no device source, or None; without ``simulated``, only sources that can
    change (the host, a fixture file) are accepted."""
    if spec == UDEV or (spec.startswith(FIXTURE_PREFIX) and spec != FIXTURE_PREFIX):
        return None
    if spec == SIMULATED and simulated:
        return None
    return (
        "must be 'udev', 'simulated' or 'fixture:PATH'" if simulated else "must be 'udev' or 'fixture:PATH'"
    )


def make_source(
    spec: str, *, dev_root: str = DEV, simulated: bool = True, initialized_only: bool | None = None
) -> DeviceSource:
    """The device source ``spec`` names (see :func:`source_problem`); ``dev_root`` is where the
    host's /dev is visible to the udev source, ``initialized_only`` whether it leaves out devices
    udevd has not set up yet (see :class:`~cdi_plugin.discovery.udev.UdevSource`). Raises
    :class:`DiscoveryError`."""
    problem = source_problem(spec, simulated=simulated)
    if problem is not None:
        raise DiscoveryError(f"--source {spec!r}: {problem}")
    if spec == UDEV:
        try:
            from cdi_plugin.discovery.udev import UdevSource
        except ImportError as exc:
            raise DiscoveryError(f"udev discovery is not available: {exc}") from None
        return UdevSource(dev_root=dev_root, initialized_only=initialized_only)
    if spec == SIMULATED:
        from cdi_plugin.discovery.fixture import simulated_source

        return simulated_source()
    from cdi_plugin.discovery.fixture import FixtureSource

    return FixtureSource(Path(spec.removeprefix(FIXTURE_PREFIX)))
