"""Real network interfaces on the test machine: tap devices made through /dev/net/tun and renamed.

``TUNSETIFF`` makes the kernel create ``/sys/devices/virtual/net/NAME`` and emit ``add``; renaming
the interface (``SIOCSIFNAME``, as udev's and systemd's naming do) emits ``move`` with the new name
only; closing the descriptor of a tap that was not made persistent removes it and emits
``remove``. So an interface never outlives its :class:`Tap`, even when the test process dies.
Needs root (CI runs as root).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from types import TracebackType

TUN = "/dev/net/tun"
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
SIOCSIFNAME = 0x8923
IFNAMSIZ = 16
AVAILABLE = os.geteuid() == 0 and os.path.exists(TUN)


def free_name(prefix: str) -> str:
    """An interface name starting with ``prefix`` that no interface has now."""
    n = os.getpid() % 10000
    while os.path.exists(f"/sys/class/net/{prefix}{n}"):
        n += 1
    return f"{prefix}{n}"


class Tap:
    """``with Tap(name) as tap: tap.rename(new)``: the interface exists while the context lasts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._fd = -1

    def __enter__(self) -> Tap:
        self._fd = os.open(TUN, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(
                self._fd, TUNSETIFF, struct.pack(f"{IFNAMSIZ}sH", self.name.encode(), IFF_TAP | IFF_NO_PI)
            )
        except OSError:
            os.close(self._fd)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.close(self._fd)  # the kernel removes the interface

    def rename(self, new: str) -> None:
        """Rename the interface (it is down: a new tap is)."""
        request = struct.pack(f"{IFNAMSIZ}s{IFNAMSIZ}s", self.name.encode(), new.encode())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCSIFNAME, request)
        self.name = new
