"""Serving a gRPC service from its proto descriptor, with request parsing that never raises.

A request whose bytes are not a valid message is answered INVALID_ARGUMENT, naming the message
type and the parser's reason, before any handler runs (instead of gRPC's generic UNKNOWN); a
client parses an answer with :func:`parser` the same way. A handler may answer with a message or
with a message's bytes it serialized itself. This module imports no generated code: the one
module per API that may do so passes its own in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any

import grpc
from google.protobuf.message import DecodeError

#: The largest message the kubelet takes (gRPC's default receive limit, which it keeps): an answer
#: over it fails on the kubelet's side as a whole.
KUBELET_MAX_MESSAGE = 4 * 1024 * 1024


class Malformed:
    """A request whose bytes are not a valid message of the expected type."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.message = f"malformed {type_name}: {reason}"


def parser(cls: Any) -> Callable[[bytes], Any]:
    """A deserializer of ``cls`` that answers :class:`Malformed` instead of raising (gRPC would log
    the exception with its traceback and hand on None)."""

    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Malformed(cls.DESCRIPTOR.full_name, str(exc))

    return parse


def _serializer(cls: Any) -> Callable[[Any], bytes]:
    serialize = cls.SerializeToString

    def serialized(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialized


Behavior = Callable[[Any, Any], Any]


def _unary(behavior: Behavior) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await behavior(request, context)

    return handle


def _stream(behavior: Behavior) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        async for response in behavior(request, context):
            yield response

    return handle


def add_service(pb: ModuleType, service_name: str, servicer: object, server: grpc.aio.Server) -> None:
    """Serve the service ``service_name`` of the generated module ``pb`` from ``servicer`` (one
    async method per RPC, named as in the proto) on ``server``."""
    service = pb.DESCRIPTOR.services_by_name[service_name]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request = parser(getattr(pb, method.input_type.name))
        response = _serializer(getattr(pb, method.output_type.name))
        behavior = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _stream(behavior), request_deserializer=request, response_serializer=response
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(behavior), request_deserializer=request, response_serializer=response
            )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
