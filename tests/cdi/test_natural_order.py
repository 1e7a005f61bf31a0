"""Natural order (``dev2`` before ``dev10``) holds for digit runs of any length."""

from __future__ import annotations

from cdi_plugin.cdi.names import natural_key
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.generate.naming import ordered


def test_numbers_compare_as_numbers() -> None:
    names = ["dev10", "dev2", "dev1a", "dev", "dev02", "a10b2", "a10b10", "a9", "x"]
    assert sorted(names, key=natural_key) == [
        "a9",
        "a10b2",
        "a10b10",
        "dev",
        "dev1a",
        "dev2",
        "dev02",
        "dev10",
        "x",
    ]


def test_a_long_run_of_digits_sorts_without_converting_it() -> None:
    long = "9" * 5000
    names = [f"gpu{long}", "gpu1" + "0" * 5000, "gpu7", f"gpu{'0' * 6000}8"]
    assert sorted(names, key=natural_key) == ["gpu7", f"gpu{'0' * 6000}8", f"gpu{long}", "gpu1" + "0" * 5000]


def test_non_ascii_digits_sort_as_text() -> None:
    assert sorted(["d²", "d3", "d٣"], key=natural_key) == ["d3", "d²", "d٣"]


def test_devices_with_long_digit_runs_are_ordered() -> None:
    devices = [
        DiscoveredDevice(subsystem="tty", sys_name=name, devnode=f"/dev/{name}", sys_path=f"/sys/{name}")
        for name in ("tty" + "1" * 5000, "tty2", "tty²")
    ]
    assert [d.sys_name for d in ordered(devices)] == ["tty2", "tty" + "1" * 5000, "tty²"]


def test_ordering_devices_leaves_the_name_cache_alone() -> None:
    """Paths are sorted once per scan: caching their keys would hold one per device for good."""
    devices = [
        DiscoveredDevice(subsystem="misc", sys_name=f"b{i}", devnode=f"/dev/b{i}", sys_path=f"/sys/b{i}")
        for i in (10, 2, 1)
    ]
    before = natural_key.cache_info().currsize
    assert [d.sys_name for d in ordered(devices)] == ["b1", "b2", "b10"]
    assert natural_key.cache_info().currsize == before
