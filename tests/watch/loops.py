"""Real hot-plug on the test machine: loop devices created and destroyed through /dev/loop-control.

``LOOP_CTL_ADD`` makes the kernel create ``/sys/devices/virtual/block/loopN`` and ``/dev/loopN``
and emit an ``add`` uevent; ``LOOP_CTL_REMOVE`` removes both and emits ``remove``. Numbers start
at 200 so that the host's loop0-7 are never touched, and every device added is removed again
when the :class:`Loops` context ends, even after a failure; a device another process created is
never touched (adding its number raises ``FileExistsError``). Needs root (CI runs as root).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

LOOP_CONTROL = "/dev/loop-control"
LOOP_CTL_ADD = 0x4C80
LOOP_CTL_REMOVE = 0x4C81
FIRST = 200
IS_ROOT = os.geteuid() == 0
AVAILABLE = IS_ROOT and os.path.exists(LOOP_CONTROL)


def sys_path(n: int) -> Path:
    return Path(f"/sys/devices/virtual/block/loop{n}")


def free_numbers(count: int, start: int | None = None) -> list[int]:
    """``count`` loop numbers that no loop device uses now, from ``start`` on (by default from a
    number derived from the process id, so that two test runs at once rarely pick the same)."""
    out: list[int] = []
    n = start if start is not None else FIRST + (os.getpid() % 500) * 8
    while len(out) < count:
        if not sys_path(n).exists():
            out.append(n)
        n += 1
    return out


class Loops:
    """``with Loops() as loops: loops.add(n); loops.remove(n)``; leftovers are removed on exit."""

    def __init__(self) -> None:
        self._fd = -1
        self.added: set[int] = set()

    def __enter__(self) -> Loops:
        self._fd = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            for n in sorted(self.added):
                self._remove(n)
        finally:
            os.close(self._fd)

    def add(self, n: int) -> None:
        """Create loop device ``n``; raises ``FileExistsError`` if it exists (another process's)."""
        fcntl.ioctl(self._fd, LOOP_CTL_ADD, n)
        self.added.add(n)

    def remove(self, n: int) -> None:
        self._remove(n)
        self.added.discard(n)

    def _remove(self, n: int) -> None:
        deadline = time.monotonic() + 60  # busy while something (udevd's blkid) has it open
        while True:
            try:
                fcntl.ioctl(self._fd, LOOP_CTL_REMOVE, n)
                return
            except OSError as exc:
                if exc.errno in (errno.ENODEV, errno.ENXIO):
                    return
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)


def loop_class(*numbers: int, vendor: str = "cdi-plugin.io", class_: str = "loop") -> str:
    """A configuration whose one class matches exactly these loop devices, named by kernel name."""
    kernels = ", ".join(f"loop{n}" for n in numbers)
    return (
        f"classes:\n  - vendor: {vendor}\n    class: {class_}\n"
        f"    match: {{subsystem: block, kernel: [{kernels}]}}\n    naming: [kernel]\n"
    )


def storm(n: int, count: int) -> None:
    """``count`` real ``change`` uevents for loop device ``n``, as fast as the kernel takes them."""
    with open(sys_path(n) / "uevent", "w", encoding="ascii") as fh:
        for _ in range(count):
            fh.write("change")
            fh.flush()
