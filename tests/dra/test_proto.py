"""The generated DRA and registration code speaks the kubelet's wire format (names, numbers, paths)."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from cdi_plugin.dra._proto.dra_v1 import api_pb2 as v1
from cdi_plugin.dra._proto.dra_v1beta1 import api_pb2 as v1beta1
from cdi_plugin.dra._proto.health_v1 import api_pb2 as health_v1
from cdi_plugin.dra._proto.health_v1alpha1 import api_pb2 as health_v1alpha1
from cdi_plugin.dra._proto.registration_v1 import api_pb2 as reg

T = FieldDescriptor
DRA_FIELDS = [
    ("Claim", "namespace", 1, T.TYPE_STRING, False),
    ("Claim", "uid", 2, T.TYPE_STRING, False),
    ("Claim", "name", 3, T.TYPE_STRING, False),
    ("NodePrepareResourcesRequest", "claims", 1, T.TYPE_MESSAGE, True),
    ("NodePrepareResourcesResponse", "claims", 1, T.TYPE_MESSAGE, True),
    ("NodePrepareResourceResponse", "devices", 1, T.TYPE_MESSAGE, True),
    ("NodePrepareResourceResponse", "error", 2, T.TYPE_STRING, False),
    ("Device", "request_names", 1, T.TYPE_STRING, True),
    ("Device", "pool_name", 2, T.TYPE_STRING, False),
    ("Device", "device_name", 3, T.TYPE_STRING, False),
    ("Device", "cdi_device_ids", 4, T.TYPE_STRING, True),
    ("NodeUnprepareResourcesRequest", "claims", 1, T.TYPE_MESSAGE, True),
    ("NodeUnprepareResourcesResponse", "claims", 1, T.TYPE_MESSAGE, True),
    ("NodeUnprepareResourceResponse", "error", 1, T.TYPE_STRING, False),
]
HEALTH_FIELDS = [
    ("DeviceIdentifier", "pool_name", 1, T.TYPE_STRING, False),
    ("DeviceIdentifier", "device_name", 2, T.TYPE_STRING, False),
    ("DeviceHealth", "device", 1, T.TYPE_MESSAGE, False),
    ("DeviceHealth", "health", 2, T.TYPE_ENUM, False),
    ("DeviceHealth", "last_updated_time", 3, T.TYPE_INT64, False),
    ("DeviceHealth", "health_check_timeout_seconds", 4, T.TYPE_INT64, False),
    ("DeviceHealth", "message", 5, T.TYPE_STRING, False),
    ("NodeWatchResourcesResponse", "devices", 1, T.TYPE_MESSAGE, True),
]
REG_FIELDS = [
    ("PluginInfo", "type", 1, T.TYPE_STRING, False),
    ("PluginInfo", "name", 2, T.TYPE_STRING, False),
    ("PluginInfo", "endpoint", 3, T.TYPE_STRING, False),
    ("PluginInfo", "supported_versions", 4, T.TYPE_STRING, True),
    ("RegistrationStatus", "plugin_registered", 1, T.TYPE_BOOL, False),
    ("RegistrationStatus", "error", 2, T.TYPE_STRING, False),
]


def _field(module: object, message: str, name: str) -> FieldDescriptor:
    return module.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("module", [v1, v1beta1], ids=["v1", "v1beta1"])
@pytest.mark.parametrize("row", DRA_FIELDS, ids=lambda r: f"{r[0]}.{r[1]}")
def test_dra_fields(module: object, row: tuple[str, str, int, int, bool]) -> None:
    message, name, number, type_, repeated = row
    field = _field(module, message, name)
    assert (field.number, field.type, field.is_repeated) == (number, type_, repeated)


@pytest.mark.parametrize(("message", "name", "number", "type_", "repeated"), REG_FIELDS)
def test_registration_fields(message: str, name: str, number: int, type_: int, repeated: bool) -> None:
    field = _field(reg, message, name)
    assert (field.number, field.type, field.is_repeated) == (number, type_, repeated)


def test_share_id_only_in_v1() -> None:
    share = _field(v1, "Device", "share_id")
    assert (share.number, share.type, share.has_presence) == (5, T.TYPE_STRING, True)
    assert "share_id" not in v1beta1.DESCRIPTOR.message_types_by_name["Device"].fields_by_name


def test_responses_are_maps_keyed_by_claim_uid() -> None:
    for module in (v1, v1beta1):
        for message in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
            entry = _field(module, message, "claims").message_type
            assert entry.GetOptions().map_entry
            assert entry.fields_by_name["key"].type == T.TYPE_STRING


def test_method_paths() -> None:
    assert [m.full_name for m in reg.DESCRIPTOR.services_by_name["Registration"].methods] == [
        "pluginregistration.Registration.GetInfo",
        "pluginregistration.Registration.NotifyRegistrationStatus",
    ]
    for module, version in ((v1, "v1"), (v1beta1, "v1beta1")):
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert service.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
        assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]


@pytest.mark.parametrize("module", [health_v1, health_v1alpha1], ids=["v1", "v1alpha1"])
@pytest.mark.parametrize("row", HEALTH_FIELDS, ids=lambda r: f"{r[0]}.{r[1]}")
def test_health_fields(module: object, row: tuple[str, str, int, int, bool]) -> None:
    message, name, number, type_, repeated = row
    field = _field(module, message, name)
    assert (field.number, field.type, field.is_repeated) == (number, type_, repeated)


def test_health_service_paths_and_statuses() -> None:
    for module, package in ((health_v1, "v1"), (health_v1alpha1, "v1alpha1")):
        [method] = module.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods
        assert method.full_name == f"{package}.DRAResourceHealth.NodeWatchResources"
        assert (method.server_streaming, method.client_streaming) == (True, False)
        assert method.input_type.fields == []
        status = module.DESCRIPTOR.enum_types_by_name["HealthStatus"]
        assert [(v.name, v.number) for v in status.values] == [
            ("UNKNOWN", 0),
            ("HEALTHY", 1),
            ("UNHEALTHY", 2),
        ]
