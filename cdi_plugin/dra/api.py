"""The kubelet DRA APIs: the only module that imports the generated code in ``_proto``.

Three services: plugin registration (``pluginregistration``, served by the driver for the
kubelet's plugin watcher), the DRA plugin service in versions v1 and v1beta1 (identical but
for ``Device.share_id``), and the device health service (``DRAResourceHealth``) in versions v1
and v1alpha1 (identical but for the package). The rest of the driver, and the tests' fake
kubelet, use the names and builders here. Requests are parsed so that a malformed one is
answered INVALID_ARGUMENT, naming the message type and the parser's reason, before any handler
runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Protocol

import grpc

from cdi_plugin.dra._proto.dra_v1 import api_pb2 as _v1
from cdi_plugin.dra._proto.dra_v1 import api_pb2_grpc as _v1_grpc
from cdi_plugin.dra._proto.dra_v1beta1 import api_pb2 as _v1beta1
from cdi_plugin.dra._proto.dra_v1beta1 import api_pb2_grpc as _v1beta1_grpc
from cdi_plugin.dra._proto.health_v1 import api_pb2 as _health_v1
from cdi_plugin.dra._proto.health_v1 import api_pb2_grpc as _health_v1_grpc
from cdi_plugin.dra._proto.health_v1alpha1 import api_pb2 as _health_v1alpha1
from cdi_plugin.dra._proto.health_v1alpha1 import api_pb2_grpc as _health_v1alpha1_grpc
from cdi_plugin.dra._proto.registration_v1 import api_pb2 as _reg
from cdi_plugin.dra._proto.registration_v1 import api_pb2_grpc as _reg_grpc
from cdi_plugin.dra.health import HEALTHY, UNHEALTHY, UNKNOWN, DeviceHealth
from cdi_plugin.dra.prepare import Claim, PreparedDevice
from cdi_plugin.grpcutil import add_service

__all__ = [
    "ADVERTISED",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "HEALTH_VERSIONS",
    "PLUGIN_TYPE",
    "V1",
    "V1BETA1",
    "VERSIONS",
    "Claim",
    "DRAServicer",
    "DeviceHealth",
    "HealthServicer",
    "InfoRequest",
    "PluginInfo",
    "PreparedDevice",
    "RegistrationServicer",
    "RegistrationStatus",
    "RegistrationStatusResponse",
    "RegistrationStub",
    "add_dra_servicer",
    "add_health_servicer",
    "add_registration_servicer",
    "claims_of",
    "dra_stub",
    "health_of",
    "health_request",
    "health_response",
    "health_stub",
    "health_version_of",
    "prepare_request",
    "prepare_response",
    "prepared",
    "unprepare_request",
    "unprepare_response",
    "version_of",
]

#: Plugin type a DRA driver registers with.
PLUGIN_TYPE = "DRAPlugin"
#: Advertised API strings, in the driver's order of preference (the kubelet takes the first it knows).
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
VERSIONS = (V1, V1BETA1)
_MODULES: Mapping[str, tuple[ModuleType, ModuleType]] = {
    V1: (_v1, _v1_grpc),
    V1BETA1: (_v1beta1, _v1beta1_grpc),
}
#: The device health service; here the advertised string is the gRPC service's name. A kubelet
#: that knows v1 takes it when advertised; the 1.36 kubelet calls v1alpha1 whatever is advertised.
HEALTH_V1 = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
HEALTH_VERSIONS = (HEALTH_V1, HEALTH_V1ALPHA1)
_HEALTH: Mapping[str, tuple[ModuleType, ModuleType]] = {
    HEALTH_V1: (_health_v1, _health_v1_grpc),
    HEALTH_V1ALPHA1: (_health_v1alpha1, _health_v1alpha1_grpc),
}
#: GetInfo's supported versions: the DRAPlugin versions first (the kubelet takes the first it knows).
ADVERTISED = (*VERSIONS, *HEALTH_VERSIONS)
_STATUS = {HEALTHY: 1, UNHEALTHY: 2}  # HealthStatus numbers; 0 is UNKNOWN

InfoRequest = _reg.InfoRequest
PluginInfo = _reg.PluginInfo
RegistrationStatus = _reg.RegistrationStatus
RegistrationStatusResponse = _reg.RegistrationStatusResponse
RegistrationStub = _reg_grpc.RegistrationStub


class RegistrationServicer(Protocol):
    async def GetInfo(self, request: Any, context: Any) -> Any: ...
    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any: ...


class DRAServicer(Protocol):
    """Answers both API versions: builds responses with :func:`prepare_response` for ``version``."""

    async def NodePrepareResources(self, request: Any, context: Any) -> Any: ...
    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any: ...


class HealthServicer(Protocol):
    """Answers both versions: builds responses with :func:`health_response` for the request's version."""

    def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]: ...


def add_registration_servicer(servicer: RegistrationServicer, server: grpc.aio.Server) -> None:
    """Serve ``/pluginregistration.Registration/*`` from ``servicer`` on ``server``."""
    add_service(_reg, "Registration", servicer, server)


def add_dra_servicer(version: str, servicer: DRAServicer, server: grpc.aio.Server) -> None:
    """Serve the DRAPlugin service of ``version`` (``v1.DRAPlugin`` or ``v1beta1.DRAPlugin``)."""
    add_service(_MODULES[version][0], "DRAPlugin", servicer, server)


def add_health_servicer(version: str, servicer: HealthServicer, server: grpc.aio.Server) -> None:
    """Serve the DRAResourceHealth service of ``version`` (``v1.DRAResourceHealth`` or ``v1alpha1...``)."""
    add_service(_HEALTH[version][0], "DRAResourceHealth", servicer, server)


def version_of(request: Any) -> str:
    """The advertised API string of a request message."""
    package = request.DESCRIPTOR.file.package
    return V1 if package == _v1.DESCRIPTOR.package else V1BETA1


def claims_of(request: Any) -> list[Claim]:
    """The claims of a prepare or unprepare request of either version."""
    return [Claim(c.namespace, c.name, c.uid) for c in request.claims]


def _claims(pb: ModuleType, claims: Iterable[Claim]) -> list[Any]:
    return [pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def prepare_request(version: str, claims: Iterable[Claim]) -> Any:
    pb = _MODULES[version][0]
    return pb.NodePrepareResourcesRequest(claims=_claims(pb, claims))


def unprepare_request(version: str, claims: Iterable[Claim]) -> Any:
    pb = _MODULES[version][0]
    return pb.NodeUnprepareResourcesRequest(claims=_claims(pb, claims))


def prepare_response(version: str, results: Mapping[str, tuple[PreparedDevice, ...] | str]) -> Any:
    """Per claim UID, its devices or an error text."""
    pb = _MODULES[version][0]
    out = pb.NodePrepareResourcesResponse()
    for uid, result in results.items():
        entry = out.claims[uid]
        if isinstance(result, str):
            entry.error = result
            continue
        entry.devices.extend(
            pb.Device(
                request_names=list(d.request_names),
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=list(d.cdi_device_ids),
            )
            for d in result
        )
    return out


def unprepare_response(version: str, errors: Mapping[str, str]) -> Any:
    """Per claim UID, an error text (empty when released)."""
    pb = _MODULES[version][0]
    out = pb.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        out.claims[uid].error = error
    return out


def prepared(response: Any) -> dict[str, tuple[PreparedDevice, ...] | str]:
    """A prepare response of either version as plain values (the fake kubelet's view)."""
    return {
        uid: entry.error
        or tuple(
            PreparedDevice(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids))
            for d in entry.devices
        )
        for uid, entry in response.claims.items()
    }


class _Stub(Protocol):
    NodePrepareResources: Callable[..., Any]
    NodeUnprepareResources: Callable[..., Any]


def dra_stub(version: str, channel: grpc.aio.Channel) -> _Stub:
    """A client of the DRAPlugin service of ``version`` (the kubelet's side)."""
    stub: _Stub = _MODULES[version][1].DRAPluginStub(channel)
    return stub


def health_version_of(request: Any) -> str:
    """The advertised string of a NodeWatchResources request's version."""
    package = request.DESCRIPTOR.file.package
    return HEALTH_V1 if package == _health_v1.DESCRIPTOR.package else HEALTH_V1ALPHA1


def health_request(version: str) -> Any:
    return _HEALTH[version][0].NodeWatchResourcesRequest()


def health_response(version: str, devices: Iterable[DeviceHealth]) -> Any:
    """A NodeWatchResourcesResponse of ``version`` listing ``devices``."""
    pb = _HEALTH[version][0]
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
                health=_STATUS.get(d.health, 0),
                last_updated_time=d.last_updated,
                health_check_timeout_seconds=d.timeout,
                message=d.message,
            )
            for d in devices
        ]
    )


def health_of(response: Any) -> list[DeviceHealth]:
    """A NodeWatchResourcesResponse of either version as plain values (the fake kubelet's view)."""
    names = {number: name for name, number in _STATUS.items()}
    return [
        DeviceHealth(
            d.device.pool_name,
            d.device.device_name,
            names.get(d.health, UNKNOWN),
            d.message,
            d.last_updated_time,
            d.health_check_timeout_seconds,
        )
        for d in response.devices
    ]


class _HealthStub(Protocol):
    NodeWatchResources: Callable[..., Any]


def health_stub(version: str, channel: grpc.aio.Channel) -> _HealthStub:
    """A client of the DRAResourceHealth service of ``version`` (the kubelet's side)."""
    stub: _HealthStub = _HEALTH[version][1].DRAResourceHealthStub(channel)
    return stub
