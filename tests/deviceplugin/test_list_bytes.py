"""ListAndWatch responses built from each device's serialized entry are the bytes protobuf gives
for the same response, whether the builder follows the views one by one or misses some."""

from __future__ import annotations

import random

import pytest

from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.advertised import AdvertisedKind
from cdi_plugin.deviceplugin.servicer import ListBuilder
from cdi_plugin.deviceplugin.state import ResourceView
from cdi_plugin.inventory.record import ServedDevice

KIND = "cdi-plugin.io/test"
NAMES = [f"dev{i}" for i in range(40)] + ["dev02", "x" * 62]


def _expected(view: ResourceView) -> bytes:
    return api.ListAndWatchResponse(
        devices=[api.device(s.id, s.healthy, s.numa) for s in view.devices.values()]
    ).SerializeToString()


@pytest.mark.parametrize("replicas", [1, 2])
def test_responses_are_the_bytes_protobuf_serializes(replicas: int, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[str] = []
    device = api.device

    def counted(device_id: str, healthy: bool, numa: tuple[int, ...] = ()) -> api.Device:
        encoded.append(device_id)
        return device(device_id, healthy, numa)

    monkeypatch.setattr(api, "device", counted)
    rng = random.Random(replicas)
    advertised = AdvertisedKind(KIND, replicas)
    builder = ListBuilder()
    devices: dict[str, ServedDevice] = {}
    built = followed = 0
    last = -1  # the revision of the view built last
    for step in range(600):
        touched = {f"{KIND}={n}" for n in rng.sample(NAMES, rng.choice([1, 1, 1, 2, 5]))}
        for name in touched:
            roll = rng.random()
            if roll < 0.3:
                devices.pop(name, None)
            else:
                numa = tuple(sorted(rng.sample(range(4), rng.randint(0, 2))))
                devices[name] = ServedDevice(cdi_name=name, healthy=roll < 0.8, numa_nodes=numa)
        advertised.apply(devices, touched)
        view = ResourceView(KIND, advertised.devices, advertised.revision)
        if rng.random() < 0.15:
            continue  # a view no stream asked for: the next one does not follow the one built
        if step % 97 == 0:
            view = ResourceView(KIND, advertised.devices)  # no revision told
        encoded.clear()
        data = builder.response(view)
        if view.revision is not None and view.revision.after == last:  # it follows the view built last
            assert sorted(encoded) == sorted(view.revision.ids & view.devices.keys())
            followed += 1
        last = view.revision.serial if view.revision is not None else -1
        assert data == _expected(view)
        assert builder.response(view) is data  # the same view again: nothing built
        assert [d.ID for d in api.ListAndWatchResponse.FromString(data).devices] == list(view.devices)
        built += 1
    assert built > 400
    assert followed > 300  # most views were built from the one before


def test_an_empty_view_is_an_empty_response() -> None:
    builder = ListBuilder()
    assert builder.response(ResourceView(KIND)) == b""
    assert api.ListAndWatchResponse.FromString(b"") == api.ListAndWatchResponse()


def test_a_list_over_the_limit_keeps_as_many_replicas_of_every_device_as_fit() -> None:
    advertised = AdvertisedKind(KIND, 10)
    devices = {f"{KIND}={n}": ServedDevice(cdi_name=f"{KIND}={n}", healthy=True) for n in NAMES}
    advertised.apply(devices, set(devices))
    view = ResourceView(KIND, advertised.devices, advertised.revision)
    whole = len(_expected(view))
    builder = ListBuilder(limit=whole // 2)
    data = builder.response(view)
    assert len(data) <= whole // 2
    sent = [d.ID for d in api.ListAndWatchResponse.FromString(data).devices]
    replicas = {view.devices[i].replica for i in sent}
    assert replicas == set(range(len(replicas)))  # replicas 0 to R-1
    assert 3 <= len(replicas) < 10
    assert {view.devices[i].qualified_name for i in sent} == set(devices)  # every device
    assert len(sent) == len(replicas) * len(devices)
    assert builder.cut is not None
    assert f"its {len(view.devices)} device IDs take more than" in builder.cut
    assert f"sends {len(sent)} of them ({len(replicas)} replicas of each device)" in builder.cut
    assert ListBuilder(limit=whole).response(view) == _expected(view)  # a list that fits is whole


def test_a_list_of_more_devices_than_fit_sends_the_first_ones_that_do() -> None:
    advertised = AdvertisedKind(KIND, 1)
    devices = {f"{KIND}={n}": ServedDevice(cdi_name=f"{KIND}={n}", healthy=True) for n in NAMES}
    advertised.apply(devices, set(devices))
    view = ResourceView(KIND, advertised.devices, advertised.revision)
    builder = ListBuilder(limit=100)
    sent = [d.ID for d in api.ListAndWatchResponse.FromString(builder.response(view)).devices]
    assert sent == list(view.devices)[: len(sent)]
    assert 0 < len(sent) < len(devices)
    assert len(builder.response(view)) <= 100
