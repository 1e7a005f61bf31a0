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
