"""Registering one resource with the kubelet (``/v1beta1.Registration/Register`` on kubelet.sock)."""

from __future__ import annotations

from pathlib import Path

import grpc

from cdi_plugin.deviceplugin import api
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import clipped

#: The kubelet dials the plugin back (10 s timeout) and calls GetDevicePluginOptions before it
#: answers Register, so the deadline must be longer than that.
REGISTER_TIMEOUT = 20.0
#: How much of the kubelet's reason for a refusal a message quotes.
MAX_DETAILS = 400


class RegistrationError(CdiPluginError):
    """Registration failed; ``refused`` is True when the kubelet answered with an error."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


async def register(
    kubelet_socket: Path,
    endpoint: str,
    resource: str,
    options: api.DevicePluginOptions,
    timeout: float = REGISTER_TIMEOUT,
) -> None:
    """Ask the kubelet to serve ``resource`` from ``<plugin dir>/<endpoint>``.

    Raises :class:`RegistrationError` with the kubelet's reason when it refuses.
    """
    request = api.RegisterRequest(
        version=api.VERSION, endpoint=endpoint, resource_name=resource, options=options
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            await api.register(channel, request, timeout)
        except ValueError as exc:
            raise RegistrationError(
                f"the kubelet at {kubelet_socket} answered the registration with a {exc}", refused=True
            ) from None
        except grpc.aio.AioRpcError as exc:
            # the kubelet's words, on one line of a bounded length
            details = clipped(exc.details() or exc.code().name, MAX_DETAILS)
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise RegistrationError(
                    f"cannot reach the kubelet at {kubelet_socket}: {details}", refused=False
                ) from None
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RegistrationError(
                    f"no answer from the kubelet at {kubelet_socket} within {timeout:g}s", refused=False
                ) from None
            raise RegistrationError(
                f"the kubelet refused the registration: {details}", refused=True
            ) from None
