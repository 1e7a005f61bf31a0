"""The image of ``Containerfile``, built for real without a registry, and the DaemonSet's pod
translated into ``podman run`` options.

The base is a Debian 12 root file system made by ``mmdebstrap`` from the host's Debian mirror and
imported into podman; the build reaches no network: cdi-plugin's dependencies and its build backend
are wheels fetched on the host beforehand, as the locks pin them, and mounted into the build
(``--build-arg PIP_OPTIONS``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.deploy.kustomize import kustomize_build, one
from tests.e2e.podman import PodmanEnv

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: the runtime dependencies' pins and hashes, which the image installs
LOCK = DEPLOY / "requirements.lock"
#: the build backend's, which builds cdi-plugin's wheel in the image's build stage
BUILD_LOCK = DEPLOY / "build-requirements.lock"

#: on Debian's minimal system (as in debian:bookworm-slim, under python:3.11-slim-bookworm)
BASE_PACKAGES = ("python3", "python3-venv")
#: the machine's own Debian mirror where it has one (deb822), else Debian's
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: a base root file system is kept here between runs, under a name made of what it is made from
CACHE = Path(tempfile.gettempdir()) / "cdi-plugin-image-base"


def _mmdebstrap_args() -> list[str]:
    return [
        "mmdebstrap", "--quiet", "--format=tar", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
        *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale")),
        "bookworm",
    ]  # fmt: skip


def base_rootfs() -> Path:
    """A Debian 12 root file system (tar), made by mmdebstrap or taken from the cache.

    The cache key covers the command and the mirror list; the file appears by rename only once
    complete, and a lock keeps concurrent test runs from making it twice.
    """
    local = DEBIAN_SOURCES.is_file()
    mirror = str(DEBIAN_SOURCES) if local else DEBIAN_MIRROR
    listing = DEBIAN_SOURCES.read_text() if local else DEBIAN_MIRROR
    key = hashlib.sha256(json.dumps([_mmdebstrap_args(), listing]).encode()).hexdigest()[:16]
    CACHE.mkdir(mode=0o700, exist_ok=True)
    tarball = CACHE / f"bookworm-{key}.tar"
    with (CACHE / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.is_file():
            partial = tarball.with_suffix(".partial.tar")
            partial.unlink(missing_ok=True)  # from a run that was killed
            made = subprocess.run(
                [*_mmdebstrap_args(), str(partial), mirror],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            assert made.returncode == 0, f"mmdebstrap failed:\n{made.stderr}"
            partial.rename(tarball)
    return tarball


def wheelhouse(directory: Path) -> Path:
    """Wheels of every dependency of cdi-plugin and of its build backend, as the locks pin them:
    PyPI's own files, which pip checks against the locks' hashes, for this Python (the base's: 3.11 on
    Debian 12), readable by the build's unprivileged user."""
    assert sys.version_info[:2] == (3, 11), "the wheels must match the base image's Python 3.11"
    for lock in (LOCK, BUILD_LOCK):
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--require-hashes", "--only-binary", ":all:",
             "--wheel-dir", str(directory), "--requirement", str(lock)],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
    directory.chmod(0o755)
    for wheel in directory.iterdir():
        wheel.chmod(0o644)
    return directory


def build_image(env: PodmanEnv, tag: str, work: Path) -> float:
    """Build ``Containerfile`` as ``tag`` on a base made here; the seconds the build took."""
    base = "localhost/cdi-plugin-base:test"
    imported = env.podman("import", "--quiet", str(base_rootfs()), base, timeout=300)
    assert imported.returncode == 0, imported.stderr
    wheels = wheelhouse(work / "wheels")
    started = time.monotonic()
    built = env.podman(
        "build", "--quiet", "--network", "none", "--file", str(ROOT / "Containerfile"),
        "--volume", f"{wheels}:/wheels:ro",
        "--build-arg", f"BASE={base}", "--build-arg", "PIP_OPTIONS=--no-index --find-links /wheels",
        "--tag", tag, str(ROOT),
        timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return time.monotonic() - started


# -- the DaemonSet's pod as podman run options ----------------------------------------------------

#: settings of the pod and its container that do not change how the container runs on one node
_NODE_NEUTRAL_POD = {
    "containers", "volumes", "hostNetwork", "priorityClassName", "nodeSelector", "tolerations",
    "automountServiceAccountToken", "enableServiceLinks", "serviceAccountName",
}  # fmt: skip
_NODE_NEUTRAL_CONTAINER = {
    "name", "image", "imagePullPolicy", "args", "ports", "startupProbe", "livenessProbe", "readinessProbe",
    "resources", "securityContext", "volumeMounts", "terminationMessagePath", "terminationMessagePolicy",
    "env",
}  # fmt: skip
#: the host's own directories a test may mount, and only read-only
HOST_READ_ONLY = {"/dev", "/sys", "/run/udev"}
_PROPAGATION = {None: [], "None": [], "HostToContainer": ["rslave"], "Bidirectional": ["rshared"]}


def daemonset_pod() -> dict[str, Any]:
    """The DaemonSet's pod with the DRA component, as `kubectl apply -k deploy/with-dra/` sends it."""
    pod: dict[str, Any] = one(kustomize_build(DEPLOY / "with-dra"), "DaemonSet")["spec"]["template"]["spec"]
    return pod


def configmap_data() -> dict[str, str]:
    data: dict[str, str] = one(kustomize_build(DEPLOY / "with-dra"), "ConfigMap")["data"]
    return data


def _mebibytes(quantity: str) -> int:
    found = re.fullmatch(r"(\d+)Mi", quantity)
    assert found, f"unexpected quantity {quantity!r}"
    return int(found.group(1))


def run_options(pod: Mapping[str, Any], sources: Mapping[str, Path]) -> list[str]:
    """``podman run`` options for the pod's one container: its security context, memory limit,
    network and mounts. ``sources`` maps a volume's name to the directory standing in for it;
    every volume needs one, except a read-only mount of a directory in HOST_READ_ONLY.
    A setting this translation does not know fails, rather than being left out silently."""
    (container,) = pod["containers"]
    unknown = (set(pod) - _NODE_NEUTRAL_POD) | (set(container) - _NODE_NEUTRAL_CONTAINER)
    assert not unknown, f"the DaemonSet: no podman translation for {sorted(unknown)}"
    security = container["securityContext"]
    options = ["--user", f"{security['runAsUser']}:{security['runAsGroup']}"]
    if security["privileged"]:
        options.append("--privileged")
    if not security["allowPrivilegeEscalation"]:
        options += ["--security-opt", "no-new-privileges"]
    if security["readOnlyRootFilesystem"]:
        options += ["--read-only", "--read-only-tmpfs=false"]
    capabilities = security.get("capabilities", {})
    options += [f"--cap-drop={c.lower()}" for c in capabilities.get("drop", [])]
    options += [f"--cap-add={c.lower()}" for c in capabilities.get("add", [])]
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}  # podman's default profile
    if "seLinuxOptions" in security:
        options += ["--security-opt", f"label=type:{security['seLinuxOptions']['type']}"]
    if pod.get("hostNetwork"):
        options += ["--network", "host"]
    for env in container.get("env", []):
        # from the downward API: the node's name (the host's, as the container shares its
        # network) and the pod's UID (one of its own)
        values = {"spec.nodeName": socket.gethostname(), "metadata.uid": str(uuid.uuid4())}
        field = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        assert field in values, env
        options += ["--env", f"{env['name']}={values[field]}"]
    limits = container["resources"].get("limits", {})
    assert set(limits) <= {"memory"}, limits
    if "memory" in limits:
        options += ["--memory", f"{_mebibytes(limits['memory'])}m"]

    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume, target = volumes[mount["name"]], mount["mountPath"]
        read_only = bool(mount.get("readOnly"))
        if "emptyDir" in volume:
            assert volume["emptyDir"]["medium"] == "Memory"
            size = _mebibytes(volume["emptyDir"]["sizeLimit"])
            options += ["--tmpfs", f"{target}:rw,size={size}m,mode=0777"]
            continue
        if mount["name"] in sources:
            source = str(sources[mount["name"]])
        else:
            source = volume.get("hostPath", {}).get("path", "")
            needs = f"volume {mount['name']} needs a stand-in directory"
            assert source in HOST_READ_ONLY, needs
            assert read_only, needs
        flags = ["ro" if read_only else "rw", *_PROPAGATION[mount.get("mountPropagation")]]
        options += ["--volume", f"{source}:{target}:{','.join(flags)}"]
    return options


def host_path(pod: Mapping[str, Any], name: str) -> str:
    """The host path of the hostPath volume ``name``."""
    (volume,) = (v for v in pod["volumes"] if v["name"] == name)
    return str(volume["hostPath"]["path"])


def container_of(pod: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = pod["containers"]
    return dict(container)
