"""deploy/requirements.lock, the runtime dependencies the image installs: every distribution of the
closure pinned exactly with the hashes of its files, each pin within pyproject.toml's ranges, and
the closure whole (each pinned distribution's own requirements pinned too, read from the metadata
of the test environment, which tests/setup.sh installs from the lock).

deploy/build-requirements.lock, the build backend that builds cdi-plugin's wheel in the image:
pinned and hashed alike, within pyproject.toml's [build-system] requires. Its closure is checked
where it is installed, by `pip check` in the image's build (tests/deploy/test_image.py)."""

from __future__ import annotations

import re
import shlex
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.deploy.image import BUILD_LOCK, LOCK, ROOT

_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _entries(text: str) -> dict[NormalizedName, tuple[Requirement, list[str]]]:
    """The lock's requirements by name, each with its hash options."""
    entries: dict[NormalizedName, tuple[Requirement, list[str]]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        words = line.partition("#")[0].split()
        if not words:
            continue
        requirement, *options = words
        req = Requirement(requirement)
        name = canonicalize_name(req.name)
        assert name not in entries, f"{name} is pinned twice"
        entries[name] = (req, options)
    return entries


def _pins(lock: Path = LOCK) -> dict[NormalizedName, Version]:
    pins = {}
    for name, (req, _) in _entries(lock.read_text()).items():
        (spec,) = req.specifier
        pins[name] = Version(spec.version)
    return pins


_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _project_requirements() -> list[Requirement]:
    return [Requirement(r) for r in _PYPROJECT["project"]["dependencies"]]


def _required(req: Requirement, extras: set[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""})


@pytest.mark.parametrize("lock", [LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_every_distribution_is_pinned_exactly_with_the_hashes_of_its_files(lock: Path) -> None:
    entries = _entries(lock.read_text())
    assert entries
    for name, (req, options) in entries.items():
        specifiers = [(s.operator, s.version) for s in req.specifier]
        assert len(specifiers) == 1, f"{name}: {req.specifier}"
        ((operator, version),) = specifiers
        assert operator == "==", f"{name}: {req.specifier} is not one version"
        assert "*" not in version, f"{name}: {req.specifier} is not one version"
        assert (req.url, req.extras, req.marker) == (None, set(), None), f"{name}: {req}"
        assert options, f"{name}: no --hash"
        bad = [o for o in options if not _HASH.fullmatch(o)]
        assert not bad, f"{name}: {bad} are not sha256 hashes"


@pytest.mark.parametrize("lock", [LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_the_header_names_the_command_that_writes_the_lock(lock: Path) -> None:
    """pip-compile's header: the command that regenerates this very file, with hashes, from
    pyproject.toml (the build lock from its [build-system] alone)."""
    header = lock.read_text().split("\n#\n")[1]
    (command,) = [line.removeprefix("#    ") for line in header.splitlines() if "pip-compile " in line]
    words = shlex.split(command.rpartition("&&")[2])
    assert words[0].endswith("pip-compile"), command
    assert words[-1] == "pyproject.toml"
    assert "--generate-hashes" in words
    assert words[words.index("--output-file") + 1] == str(lock.relative_to(ROOT))
    builds = {"--build-deps-for", "--only-build-deps"} <= set(words)
    assert builds == (lock == BUILD_LOCK), command


def test_the_build_lock_pins_the_build_backend_within_build_system_requires() -> None:
    build_system = _PYPROJECT["build-system"]
    pins = _pins(BUILD_LOCK)
    for req in map(Requirement, build_system["requires"]):
        name = canonicalize_name(req.name)
        assert name in pins, f"pyproject.toml's build requirement {req} is not in {BUILD_LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{BUILD_LOCK.name} pins {name} {pins[name]}, outside pyproject.toml's {req}"
        )
    backend = build_system["build-backend"].partition(".")[0]
    assert canonicalize_name(backend) in pins, f"{BUILD_LOCK.name} lacks the build backend {backend}"


def test_each_pin_satisfies_pyprojects_ranges() -> None:
    pins = _pins()
    for req in _project_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"pyproject.toml's {req} is not in {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK.name} pins {name} {pins[name]}, outside pyproject.toml's {req}"
        )


def test_the_lock_pins_the_whole_closure_and_nothing_else() -> None:
    """Walks the requirements from pyproject.toml through the installed metadata of each pinned
    version (with the extras asked for): every distribution reached is pinned within what asks
    for it, and every pin is reached."""
    pins = _pins()
    walked: set[tuple[NormalizedName, frozenset[str]]] = set()
    todo = [(req, "pyproject.toml") for req in _project_requirements() if _required(req, set())]
    while todo:
        req, by = todo.pop()
        name = canonicalize_name(req.name)
        assert name in pins, f"{by} requires {req}, which {LOCK.name} does not pin"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{by} requires {req}; {LOCK.name} pins {pins[name]}"
        )
        if (name, frozenset(req.extras)) in walked:
            continue
        walked.add((name, frozenset(req.extras)))
        installed = metadata.distribution(name)
        assert Version(installed.version) == pins[name], (
            f"the test environment has {name} {installed.version}, {LOCK.name} {pins[name]}: "
            "install the lock (tests/setup.sh)"
        )
        requires = map(Requirement, installed.requires or ())
        todo += [(r, f"{name} {pins[name]}") for r in requires if _required(r, req.extras)]
    reached = {name for name, _ in walked}
    assert set(pins) == reached, f"{LOCK.name} pins what nothing requires: {sorted(set(pins) - reached)}"
