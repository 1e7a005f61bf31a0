"""A kind's advertised IDs kept device by device give what the catalog gives for the same devices."""

from __future__ import annotations

import random

import pytest

from cdi_plugin.deviceplugin.advertised import AdvertisedKind
from cdi_plugin.deviceplugin.resources import build_catalog
from cdi_plugin.inventory.record import ServedDevice

KIND = "cdi-plugin.io/test"
NAMES = [f"dev{i}" for i in range(12)] + ["dev02", "all", "x" * 64, "y" * 60]


@pytest.mark.parametrize("replicas", [1, 3])
def test_changes_applied_one_by_one_match_the_catalog(replicas: int) -> None:
    rng = random.Random(replicas)
    advertised = AdvertisedKind(KIND, replicas)
    devices: dict[str, ServedDevice] = {}
    for _ in range(300):
        touched = {f"{KIND}={n}" for n in rng.sample(NAMES, rng.randint(1, 3))}
        for name in touched:
            roll = rng.random()
            if roll < 0.4:
                devices.pop(name, None)
            else:
                devices[name] = ServedDevice(
                    cdi_name=name, healthy=roll < 0.8, numa_nodes=(rng.randint(0, 1),)
                )
        before, revision = dict(advertised.devices), advertised.revision
        changes, _ = advertised.apply(devices, touched)

        in_order = [devices[n] for n in sorted(devices)]  # as the inventory gives them
        (resource,) = build_catalog(in_order, lambda kind: replicas).resources.values() or (None,)
        expected = [] if resource is None else [(d.id, d.qualified_name, d.replica) for d in resource.devices]
        assert [(s.id, s.qualified_name, s.replica) for s in advertised.devices.values()] == expected
        assert all(s.device == devices[s.qualified_name] for s in advertised.devices.values())
        changed = {s.qualified_name for i, s in advertised.devices.items() if before.get(i) != s}
        changed |= {s.qualified_name for i, s in before.items() if i not in advertised.devices}
        assert set(changes) == changed
        ids = {i for i, s in advertised.devices.items() if before.get(i) is not s}
        ids |= before.keys() - advertised.devices.keys()
        if changes:
            assert (advertised.revision.after, advertised.revision.ids) == (revision.serial, ids)
        else:
            assert advertised.revision is revision
        assert advertised.healthy == sum(s.healthy for s in advertised.devices.values())
        assert sorted(advertised.health()) == sorted(s.healthy for s in advertised.devices.values())
