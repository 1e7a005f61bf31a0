"""Unix sockets: is a process listening on this one, or is it a stale file left behind?"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

PROBE_TIMEOUT = 0.5


def someone_listens(path: Path) -> bool:
    """True when a connection to the unix socket ``path`` is accepted; False when it is refused or
    there is no such file (a stale socket, safe to replace). Other errors are raised."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(str(path))
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise
        return True
