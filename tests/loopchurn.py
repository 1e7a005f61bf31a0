"""Keep creating and removing loop devices, as another process on a busy host would (tests/stress.sh).

``python -m tests.loopchurn DIR [FIRST]``: in each round, a loop device that does not exist yet
(the first free number from FIRST on) is created through /dev/loop-control, a small file in DIR is
attached to it with ``losetup`` and detached again, and the device is removed: each round makes the
kernel announce an add, changes and a removal in the block subsystem. By default the numbers lie
far above those the tests pick (tests/watch/loops.py). Only devices this process created are
touched; on exit (SIGTERM, Ctrl-C, an error) those still there are detached and removed. Needs
root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.watch.loops import Loops, free_numbers

FIRST = 100_000
FILE_BYTES = 1 << 20


class Churn:
    def __init__(self, directory: Path, start: int) -> None:
        self.disk = directory / "disk"
        self.start = start
        self.stopping = False  # set by SIGINT or SIGTERM: the round ends, then everything is removed
        self.rounds = 0

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> None:
        with open(self.disk, "wb") as fh:
            fh.truncate(FILE_BYTES)
        with Loops() as loops:  # removes what is left on exit
            try:
                while not self.stopping:
                    (n,) = free_numbers(1, self.start)
                    try:
                        loops.add(n)
                    except FileExistsError:
                        continue  # another process took the number meanwhile
                    self.losetup(f"/dev/loop{n}", str(self.disk))
                    self.losetup("-d", f"/dev/loop{n}")
                    loops.remove(n)
                    self.rounds += 1
            finally:
                for n in sorted(loops.added):
                    if Path(f"/sys/devices/virtual/block/loop{n}/loop/backing_file").exists():
                        self.losetup("-d", f"/dev/loop{n}")

    def losetup(self, *args: str) -> None:
        done = subprocess.run(["losetup", *args], check=False)
        if done.returncode != 0 and not self.stopping:  # Ctrl-C reaches losetup too
            raise subprocess.CalledProcessError(done.returncode, done.args)


def main() -> None:
    start = int(sys.argv[2]) if len(sys.argv) > 2 else FIRST + (os.getpid() % 1000) * 16
    churn = Churn(Path(sys.argv[1]), start)
    signal.signal(signal.SIGINT, churn.stop)
    signal.signal(signal.SIGTERM, churn.stop)
    try:
        churn.run()
    finally:
        print(f"tests/loopchurn: {churn.rounds} loop devices created and removed", file=sys.stderr)


if __name__ == "__main__":
    main()
