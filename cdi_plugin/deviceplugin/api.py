"""The kubelet device plugin API v1beta1: the only module that imports the generated code in ``_proto``.

Everything else (the plugin and the tests' fake kubelet) uses the names re-exported here, plus a
few builders that turn plain values into messages. The generated stubs and servicer base classes
(``_pb2_grpc``, about 0.6 MiB) are loaded only when one is asked for: the plugin serves from the
descriptor and registers through :func:`register`, so it never loads them.

Services are added to a server from the proto's descriptor by :func:`cdi_plugin.grpcutil.add_service`:
a request that is not a valid message is answered INVALID_ARGUMENT before any handler runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from cdi_plugin.deviceplugin._proto import api_pb2 as _pb
from cdi_plugin.grpcutil import Malformed, add_service, parser

if TYPE_CHECKING:
    from cdi_plugin.deviceplugin._proto.api_pb2_grpc import (
        DevicePluginServicer,
        DevicePluginStub,
        RegistrationServicer,
        RegistrationStub,
    )

__all__ = [
    "HEALTHY",
    "UNHEALTHY",
    "VERSION",
    "AllocateRequest",
    "AllocateResponse",
    "CDIDevice",
    "ContainerAllocateRequest",
    "ContainerAllocateResponse",
    "ContainerPreferredAllocationRequest",
    "ContainerPreferredAllocationResponse",
    "Device",
    "DevicePluginOptions",
    "DevicePluginServicer",
    "DevicePluginStub",
    "Empty",
    "ListAndWatchResponse",
    "Malformed",
    "NUMANode",
    "PreStartContainerRequest",
    "PreStartContainerResponse",
    "PreferredAllocationRequest",
    "PreferredAllocationResponse",
    "RegisterRequest",
    "RegistrationServicer",
    "RegistrationStub",
    "TopologyInfo",
    "add_device_plugin_servicer",
    "add_registration_servicer",
    "allocate_response",
    "device",
    "preferred_response",
    "register",
]

#: The API version this plugin speaks and registers with.
VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

Empty = _pb.Empty
DevicePluginOptions = _pb.DevicePluginOptions
RegisterRequest = _pb.RegisterRequest
ListAndWatchResponse = _pb.ListAndWatchResponse
Device = _pb.Device
TopologyInfo = _pb.TopologyInfo
NUMANode = _pb.NUMANode
PreStartContainerRequest = _pb.PreStartContainerRequest
PreStartContainerResponse = _pb.PreStartContainerResponse
PreferredAllocationRequest = _pb.PreferredAllocationRequest
PreferredAllocationResponse = _pb.PreferredAllocationResponse
ContainerPreferredAllocationRequest = _pb.ContainerPreferredAllocationRequest
ContainerPreferredAllocationResponse = _pb.ContainerPreferredAllocationResponse
AllocateRequest = _pb.AllocateRequest
AllocateResponse = _pb.AllocateResponse
ContainerAllocateRequest = _pb.ContainerAllocateRequest
ContainerAllocateResponse = _pb.ContainerAllocateResponse
CDIDevice = _pb.CDIDevice

_GENERATED = ("DevicePluginServicer", "DevicePluginStub", "RegistrationServicer", "RegistrationStub")


def __getattr__(name: str) -> Any:
    if name in _GENERATED:
        from cdi_plugin.deviceplugin._proto import api_pb2_grpc

        return getattr(api_pb2_grpc, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def add_device_plugin_servicer(servicer: object, server: grpc.aio.Server) -> None:
    """Serve ``/v1beta1.DevicePlugin/*`` from ``servicer`` (one async method per RPC) on ``server``."""
    add_service(_pb, "DevicePlugin", servicer, server)


async def register(channel: grpc.aio.Channel, request: _pb.RegisterRequest, timeout: float) -> None:
    """``/v1beta1.Registration/Register`` on the kubelet's ``channel``; ValueError if the answer's
    bytes are not a valid message."""
    call = channel.unary_unary(
        "/v1beta1.Registration/Register",
        request_serializer=_pb.RegisterRequest.SerializeToString,
        response_deserializer=parser(_pb.Empty),
    )
    answer = await call(request, timeout=timeout)
    if isinstance(answer, Malformed):
        raise ValueError(answer.message)


def add_registration_servicer(servicer: RegistrationServicer, server: grpc.aio.Server) -> None:
    """Serve ``/v1beta1.Registration/Register`` from ``servicer`` on ``server`` (the kubelet's side)."""
    add_service(_pb, "Registration", servicer, server)


def device(device_id: str, healthy: bool, numa_nodes: Sequence[int] = ()) -> _pb.Device:
    """One ListAndWatch entry; no topology when the NUMA node is unknown."""
    msg = _pb.Device(ID=device_id, health=HEALTHY if healthy else UNHEALTHY)
    if numa_nodes:
        msg.topology.nodes.extend(_pb.NUMANode(ID=n) for n in numa_nodes)
    return msg


def allocate_response(
    containers: Iterable[tuple[Sequence[str], Mapping[str, str]]],
) -> _pb.AllocateResponse:
    """An AllocateResponse holding, per container, only CDI names and annotations."""
    return _pb.AllocateResponse(
        container_responses=[
            _pb.ContainerAllocateResponse(
                cdi_devices=[_pb.CDIDevice(name=n) for n in names], annotations=dict(annotations)
            )
            for names, annotations in containers
        ]
    )


def preferred_response(containers: Iterable[Sequence[str]]) -> _pb.PreferredAllocationResponse:
    return _pb.PreferredAllocationResponse(
        container_responses=[
            _pb.ContainerPreferredAllocationResponse(deviceIDs=list(ids)) for ids in containers
        ]
    )
