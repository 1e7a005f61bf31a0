"""What both gRPC servers (the device plugin's and the DRA driver's) share on their unix sockets.

Requests are parsed with :func:`parser`, which never raises: bytes that are not a valid message
become :class:`Malformed`, which the service answers INVALID_ARGUMENT (naming the message type and
the parser's reason) before any handler runs. :func:`someone_listens` tells a socket another
process serves from a stale one left by a process that died.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

#: How long a probe waits for the other end of a socket to accept.
PROBE_TIMEOUT = 0.5


class Malformed:
    """A request whose bytes are not a valid message of the expected type."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.message = f"malformed {type_name}: {reason}"


def parser(cls: Any) -> Callable[[bytes], Any]:
    """A request deserializer for the message class ``cls`` that returns :class:`Malformed`
    instead of raising."""

    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Malformed(cls.DESCRIPTOR.full_name, str(exc))

    return parse


def someone_listens(path: Path) -> bool:
    """Whether a process accepts connections on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(str(path))
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise
        return True
