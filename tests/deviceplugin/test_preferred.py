"""GetPreferredAllocation's policy (pure)."""

from __future__ import annotations

import random

import pytest

from cdi_plugin.deviceplugin.preferred import Candidate, preferred


def _devices(*specs: tuple[str, int, tuple[int, ...]], healthy: bool = True) -> dict[str, Candidate]:
    """(physical name, replicas, numa) -> candidates ``name#i`` (or ``name`` for one replica)."""
    out = {}
    for name, replicas, numa in specs:
        for i in range(replicas):
            device_id = name if replicas == 1 else f"{name}#{i}"
            out[device_id] = Candidate(device_id, f"v.io/c={name}", i, numa, healthy)
    return out


def test_must_include_comes_first_in_the_kubelets_order() -> None:
    devices = _devices(("d0", 1, ()), ("d1", 1, ()), ("d2", 1, ()))
    assert preferred(["d0", "d1", "d2"], ["d2", "d1"], 3, devices) == ["d2", "d1", "d0"]


def test_size_not_above_must_include_returns_must_include() -> None:
    devices = _devices(("d0", 1, ()), ("d1", 1, ()))
    assert preferred(["d0", "d1"], ["d1", "d1"], 1, devices) == ["d1"]


def test_one_numa_node_first_following_must_include() -> None:
    devices = _devices(("a", 1, (0,)), ("b", 1, (1,)), ("c", 1, (1,)), ("d", 1, (0,)))
    assert preferred(list(devices), ["b"], 2, devices) == ["b", "c"]
    assert preferred(list(devices), ["a"], 2, devices) == ["a", "d"]


def test_without_must_include_the_node_with_most_devices_wins() -> None:
    devices = _devices(("a", 1, (0,)), ("b", 1, (1,)), ("c", 1, (1,)), ("d", 1, (1,)))
    assert preferred(list(devices), [], 2, devices) == ["b", "c"]


def test_devices_without_numa_fit_any_node_before_other_nodes() -> None:
    devices = _devices(("a", 1, (0,)), ("b", 1, (1,)), ("z", 1, ()))
    assert preferred(list(devices), ["a"], 2, devices) == ["a", "z"]


def test_distinct_physical_devices_before_second_replicas() -> None:
    devices = _devices(("gpu0", 3, ()), ("gpu1", 3, ()), ("gpu2", 3, ()))
    assert preferred(list(devices), [], 4, devices) == ["gpu0#0", "gpu1#0", "gpu2#0", "gpu0#1"]
    # a physical device already given by must-include counts as used
    assert preferred(list(devices), ["gpu0#2"], 3, devices) == ["gpu0#2", "gpu1#0", "gpu2#0"]


def test_numa_beats_spreading() -> None:
    devices = _devices(("near", 2, (0,)), ("far", 2, (1,)))
    assert preferred(list(devices), ["near#0"], 2, devices) == ["near#0", "near#1"]


def test_unhealthy_and_unknown_ids_come_last() -> None:
    devices = {**_devices(("ok", 1, ())), **_devices(("sick", 1, ()), healthy=False)}
    assert preferred(["mystery", "sick", "ok"], [], 3, devices) == ["ok", "sick", "mystery"]


@pytest.mark.parametrize("seed", range(5))
def test_order_of_available_ids_does_not_matter(seed: int) -> None:
    devices = _devices(("dev10", 2, (1,)), ("dev2", 2, (0,)), ("dev1", 2, (1,)), ("dev3", 1, ()))
    available = list(devices)
    expected = preferred(sorted(available), [], 5, devices)
    random.Random(seed).shuffle(available)
    assert (
        preferred(available, [], 5, devices) == expected == ["dev1#0", "dev3", "dev10#0", "dev1#1", "dev10#1"]
    )
