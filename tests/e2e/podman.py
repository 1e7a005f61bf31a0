"""podman with CDI specs, inside a private mount namespace: a reusable test environment.

podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi, with no option to change that.
:meth:`PodmanEnv.in_namespace` runs a shell script in a private mount namespace (``unshare -m``)
with a tmpfs over both directories, so the host's specs are neither read nor touched; the spec
files of a given directory are copied into the private /etc/cdi first. If the host has no
/etc/cdi (or /var/run/cdi), it is created inside the namespace in an overlay over its parent, so
the host's file systems never change, not even for the length of the session.

Image storage, run state and ``containers.conf`` live in a per-session temporary directory
(``podman --root/--runroot/--tmpdir``), so nothing is left in /var/lib/containers. The image
``localhost/busybox:test`` is built once per session from busybox-static.

Use it from a test module or conftest: ``from tests.e2e.podman import podman_env  # noqa: F401``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

IMAGE = "localhost/busybox:test"
BUSYBOX = Path("/bin/busybox")
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
APPLETS = ("sh", "ls", "stat", "cat", "env", "id", "head", "dd", "echo", "test", "printf", "grep", "wc")

CONTAINERS_CONF = """\
[containers]
netns = "none"
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclass(frozen=True)
class PodmanEnv:
    base: Path  # the session's directory: storage, state, containers.conf

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.base / "containers.conf")}

    def podman_args(self) -> list[str]:
        b = self.base
        return [
            "podman", "--root", str(b / "root"), "--runroot", str(b / "run"), "--tmpdir", str(b / "tmp"),
            "--storage-driver", "overlay",
        ]  # fmt: skip

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run podman on the host's mount namespace (image management; no CDI involved)."""
        return subprocess.run(
            [*self.podman_args(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def in_namespace(
        self, script: str, spec_dir: Path | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run ``script`` (sh -eu) in a private mount namespace with private, empty CDI directories.

        The spec files of ``spec_dir`` are copied into the private /etc/cdi first. ``$PODMAN``
        in the script is the podman command of this environment.
        """
        copy = ""
        if spec_dir is not None:
            copy = f"for f in {shlex.quote(str(spec_dir))}/*.json {shlex.quote(str(spec_dir))}/*.yaml; do\n"
            copy += '  if [ -f "$f" ]; then cp "$f" /etc/cdi/; fi\ndone\n'
        prologue = _PRIVATE_DIR + "".join(f"private_dir {d}\n" for d in CDI_DIRS)
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-euc", prologue + copy + script],
            env={
                **self.env,
                "PODMAN": shlex.join(self.podman_args()),
                "OVERLAYS": str(self.base / "overlays"),
            },
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_container(
        self,
        devices: Sequence[str],
        command: str,
        *,
        spec_dir: Path | None = None,
        user: str | None = None,
        setup: str = "",
    ) -> subprocess.CompletedProcess[str]:
        """``podman run --rm --device NAME... IMAGE sh -c COMMAND`` with the specs of ``spec_dir``.

        ``setup`` is shell run in the namespace before podman (e.g. creating device nodes).
        """
        args = ["run", "--rm", *(a for d in devices for a in ("--device", d))]
        if user is not None:
            args += ["--user", user]
        args += [IMAGE, "sh", "-c", command]
        return self.in_namespace(f"{setup}\n$PODMAN {shlex.join(args)}\n", spec_dir)


#: A shell function: an empty tmpfs at $1; if $1 does not exist, it is made in an overlay over its
#: parent first (the overlay lives only in this mount namespace; its upper layer in $OVERLAYS).
_PRIVATE_DIR = """\
private_dir() {
  if [ ! -d "$1" ]; then
    parent=$(dirname "$1"); layer="$OVERLAYS/$(echo "$parent" | tr / _)"
    mkdir -p "$layer/upper" "$layer/work"
    mount -t overlay overlay -o "lowerdir=$parent,upperdir=$layer/upper,workdir=$layer/work" "$parent"
    mkdir -p "$1"
  fi
  mount -t tmpfs -o mode=755 tmpfs "$1"
}
"""


def _busybox_rootfs(directory: Path) -> Path:
    rootfs = directory / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    for d in ("dev", "proc", "sys", "tmp", "etc"):
        (rootfs / d).mkdir()
    return rootfs


@pytest.fixture(scope="session")
def podman_env() -> Iterator[PodmanEnv]:
    """A podman environment with the busybox image, for the whole test session."""
    base = Path(tempfile.mkdtemp(prefix="cdi-podman-"))
    try:
        (base / "containers.conf").write_text(CONTAINERS_CONF)
        for d in ("root", "run", "tmp"):
            (base / d).mkdir()
        env = PodmanEnv(base)
        rootfs = _busybox_rootfs(base)
        tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True)
        imported = subprocess.run(
            [*env.podman_args(), "import", "--change", "ENV PATH=/bin", "-", IMAGE],
            input=tar.stdout, env=env.env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert imported.returncode == 0, imported.stderr.decode()
        yield env
    finally:
        subprocess.run(["umount", "-R", str(base / "root" / "overlay")], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
