"""Size and build time of the image, built as CI builds it: the figures of docs/deploy.md.

Prints, in one run, with the load average before and after:

* the time ``mmdebstrap`` takes to make the base root file system (Debian 12 minbase with
  ``python3`` and ``python3-venv``, as ``tests/deploy/image.py`` makes it), made afresh each time
  into a temporary file (the tests' cache is neither used nor touched), and the base's size once
  imported into podman;
* the time ``podman build`` takes (``--no-cache``, wheels at hand, no network), each repeat;
* the image's size as podman reports it, its size gzip-compressed as ``podman save`` writes it,
  and the size of the virtual environment ``/opt/cdi-plugin`` inside it.

Sizes are in MB (10^6 bytes), as podman prints them. Run as root, with podman and mmdebstrap:

    .venv/bin/python bench/bench_image.py [--repeat 3] [--base-repeat 1]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import load  # noqa: E402

from tests.deploy.image import DEBIAN_MIRROR, DEBIAN_SOURCES, _mmdebstrap_args, wheelhouse  # noqa: E402
from tests.e2e.podman import CONTAINERS_CONF, PodmanEnv  # noqa: E402

BASE = "localhost/cdi-plugin-bench-base:latest"
IMAGE = "localhost/cdi-plugin-bench:latest"


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB"


def make_base(target: Path) -> float:
    """mmdebstrap into ``target``; seconds taken."""
    mirror = str(DEBIAN_SOURCES) if DEBIAN_SOURCES.is_file() else DEBIAN_MIRROR
    started = time.monotonic()
    made = subprocess.run(
        [*_mmdebstrap_args(), str(target), mirror],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        sys.exit(f"mmdebstrap failed:\n{made.stderr}")
    return time.monotonic() - started


def image_size(env: PodmanEnv, name: str) -> int:
    found = env.podman("image", "inspect", "--format", "{{.Size}}", name)
    if found.returncode != 0:
        sys.exit(found.stderr)
    return int(found.stdout.strip())


def saved_gzip_size(env: PodmanEnv, name: str, work: Path) -> int:
    archive = work / "saved.tar"
    saved = env.podman("save", "--quiet", "--output", str(archive), name, timeout=600)
    if saved.returncode != 0:
        sys.exit(saved.stderr)
    size = 0
    with archive.open("rb") as raw, tempfile.TemporaryFile() as out:
        with gzip.GzipFile(fileobj=out, mode="wb") as packed:
            shutil.copyfileobj(raw, packed)
        size = out.tell()
    archive.unlink()
    return size


def venv_size(env: PodmanEnv, name: str) -> int:
    ran = env.podman("run", "--rm", "--network", "none", "--entrypoint", "du", name, "-sb", "/opt/cdi-plugin")
    if ran.returncode != 0:
        sys.exit(ran.stderr)
    return int(ran.stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3, help="image builds (median printed)")
    parser.add_argument("--base-repeat", type=int, default=1, help="base builds (median printed)")
    args = parser.parse_args()
    print(f"load average before: {load()} ({os.cpu_count()} CPUs)")
    work = Path(tempfile.mkdtemp(prefix="cdi-bench-image-"))
    env = PodmanEnv(work / "podman")
    try:
        (work / "podman").mkdir()
        (work / "podman" / "containers.conf").write_text(CONTAINERS_CONF)
        for d in ("root", "run", "tmp"):
            (work / "podman" / d).mkdir()
        base_times = []
        tarball = work / "base.tar"
        for _ in range(args.base_repeat):
            tarball.unlink(missing_ok=True)
            base_times.append(make_base(tarball))
        imported = env.podman("import", "--quiet", str(tarball), BASE, timeout=300)
        if imported.returncode != 0:
            sys.exit(imported.stderr)
        wheels = wheelhouse(work / "wheels")
        build_times = []
        for _ in range(args.repeat):
            started = time.monotonic()
            built = env.podman(
                "build", "--quiet", "--no-cache", "--network", "none", "--file", str(ROOT / "Containerfile"),
                "--volume", f"{wheels}:/wheels:ro",
                "--build-arg", f"BASE={BASE}", "--build-arg", "PIP_OPTIONS=--no-index --find-links /wheels",
                "--tag", IMAGE, str(ROOT), timeout=1200,
            )  # fmt: skip
            if built.returncode != 0:
                sys.exit(built.stderr)
            build_times.append(time.monotonic() - started)
        base, image = image_size(env, BASE), image_size(env, IMAGE)
        print(f"base (mmdebstrap):   {statistics.median(base_times):.0f} s median of {len(base_times)} "
              f"({', '.join(f'{t:.0f}' for t in base_times)}); {_mb(base)} in podman")  # fmt: skip
        print(f"podman build:        {statistics.median(build_times):.0f} s median of {len(build_times)} "
              f"({', '.join(f'{t:.0f}' for t in build_times)})")  # fmt: skip
        print(
            f"image:               {_mb(image)}; gzip-compressed (podman save | gzip): "
            f"{_mb(saved_gzip_size(env, IMAGE, work))}; /opt/cdi-plugin: {_mb(venv_size(env, IMAGE))}"
        )
    finally:
        overlay = work / "podman" / "root" / "overlay"
        subprocess.run(["umount", "-R", str(overlay)], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
        print(f"load average after:  {load()}")


if __name__ == "__main__":
    main()
