"""The Containerfile, checked statically: a small multi-stage build from a pinned public base that a
build argument can replace, nothing fetched with ADD, the build done by a plain user, and a final
stage that runs cdi-plugin with the labels and the context it needs. test_image.py builds it."""

from __future__ import annotations

import fnmatch
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from cdi_plugin import __version__

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
LOCK = "deploy/requirements.lock"
BUILD_LOCK = "deploy/build-requirements.lock"
#: image@sha256 digest, with a full version tag (no "latest", no floating "3" or "3.11")
_PINNED = re.compile(r"^[a-z0-9.-]+(/[a-z0-9._-]+)+:[0-9]+\.[0-9]+\.[0-9]+[a-z0-9.-]*@sha256:[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def parser() -> DockerfileParser:
    return DockerfileParser(fileobj=io.BytesIO(CONTAINERFILE.read_bytes()))


def _stages(parser: DockerfileParser) -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages and instruction["instruction"] != "COMMENT":
            stages[-1].append(instruction)
    return stages


def test_multi_stage_from_a_pinned_base(parser: DockerfileParser) -> None:
    assert parser.is_multistage
    stages = _stages(parser)
    assert len(stages) == 2
    for image in parser.parent_images:
        assert _PINNED.match(image), image
    assert len(set(parser.parent_images)) == 1, "build and run from the same base"


def test_the_base_is_a_build_argument(parser: DockerfileParser) -> None:
    """Users get the pinned public base; a build without a registry names its own, for both stages."""
    (base,) = [
        i["value"] for i in parser.structure if i["instruction"] == "ARG" and i["value"].startswith("BASE=")
    ]
    assert _PINNED.match(base.removeprefix("BASE="))
    assert [i["value"].split()[0] for i in parser.structure if i["instruction"] == "FROM"] == ["${BASE}"] * 2
    local = DockerfileParser(
        fileobj=io.BytesIO(CONTAINERFILE.read_bytes()), build_args={"BASE": "localhost/b:1"}
    )
    assert local.parent_images == ["localhost/b:1"] * 2


def _install_steps(build: list[dict[str, Any]]) -> list[str]:
    """The commands of the one RUN that installs, in order."""
    (install,) = [i["value"] for i in build if i["instruction"] == "RUN" and "pip install" in i["value"]]
    return [" ".join(step.split()) for step in install.split("&&")]


def _pip_steps(parser: DockerfileParser) -> list[list[str]]:
    """Every pip command of every RUN, as its words from the subcommand on."""
    steps = []
    for instruction in parser.structure:
        if instruction["instruction"] != "RUN":
            continue
        lexer = shlex.shlex(instruction["value"], posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word not in ("&&", "||", ";", "|", "&"):
                words.append(word)
                continue
            if words and (words[0] == "pip" or words[0].endswith("/pip")):
                steps.append(words[1:])
            elif words[1:3] == ["-m", "pip"] and "python" in words[0]:
                steps.append(words[3:])
            words = []
    return steps


def test_pip_options_are_a_build_argument_with_no_default(parser: DockerfileParser) -> None:
    """PIP_OPTIONS goes to the two installs from the locks, the only steps that fetch."""
    build, _ = _stages(parser)
    assert [i["value"] for i in build if i["instruction"] == "ARG"] == ["PIP_OPTIONS="]
    with_options = [s for s in _install_steps(build) if "$PIP_OPTIONS" in s]
    assert len(with_options) == 2
    assert all("pip install --no-compile $PIP_OPTIONS --require-hashes " in s for s in with_options)


def test_nothing_is_installed_unpinned(parser: DockerfileParser) -> None:
    """Every pip command that installs, builds or downloads takes each file from a lock, checked
    against its hashes, or reaches no index and brings no dependency and no build backend of its
    own: every file the build installs or runs is pinned by a hash (or is the base's)."""
    locks = {LOCK, BUILD_LOCK}
    checked = 0
    for words in _pip_steps(parser):
        command, options = words[0], words[1:]
        if command not in ("install", "wheel", "download"):
            continue
        checked += 1
        assert "--no-deps" in options, words
        if "--require-hashes" in options:
            assert options.count("-r") == 1, words
            assert options[options.index("-r") + 1] in locks, words
            continue
        assert "--no-index" in options, f"{words}: neither from a lock nor without an index"
        assert not {"-r", "--requirement", "--find-links", "-f", "$PIP_OPTIONS"} & set(options), words
        if command != "install" or not options[-1].endswith(".whl"):  # builds from source
            assert "--no-build-isolation" in options, f"{words}: fetches its build backend"
    assert checked == 4


def test_the_build_backend_and_the_dependencies_are_installed_from_their_locks_alone(
    parser: DockerfileParser,
) -> None:
    """The build backend from its lock in a virtual environment of its own, which builds
    cdi-plugin's wheel; the dependencies from their lock, then that wheel without dependencies;
    pip check fails the build if a lock lacked one. The backend stays out of /opt/cdi-plugin,
    the one directory the final stage copies."""
    build, _ = _stages(parser)
    copies = [i["value"].split()[1:] for i in build if i["instruction"] == "COPY"]
    assert [LOCK, BUILD_LOCK, "./deploy/"] in copies
    (workdir,) = [i["value"] for i in build if i["instruction"] == "WORKDIR"]
    assert workdir == "/src"
    pip = "pip install --no-compile"
    assert [s for s in _install_steps(build) if "/bin/pip " in s] == [
        f"/tmp/backend/bin/{pip} $PIP_OPTIONS --require-hashes --no-deps -r {BUILD_LOCK}",
        "/tmp/backend/bin/pip check",
        "/tmp/backend/bin/pip wheel --no-index --no-build-isolation --no-deps --wheel-dir /tmp/dist .",
        f"/opt/cdi-plugin/bin/{pip} $PIP_OPTIONS --require-hashes --no-deps -r {LOCK}",
        f"/opt/cdi-plugin/bin/{pip} --no-index --no-deps /tmp/dist/*.whl",
        "/opt/cdi-plugin/bin/pip check",
        "/opt/cdi-plugin/bin/pip uninstall --yes pip",
    ]


def test_nothing_is_fetched_with_add(parser: DockerfileParser) -> None:
    assert not [i for i in parser.structure if i["instruction"] == "ADD"]


def test_the_build_runs_as_a_plain_user(parser: DockerfileParser) -> None:
    build, _ = _stages(parser)
    user = None
    root_runs = []
    for instruction in build:
        if instruction["instruction"] == "USER":
            user = instruction["value"]
        elif instruction["instruction"] == "RUN" and user in (None, "0", "0:0", "root"):
            root_runs.append(instruction["value"])
    # only the one step that creates the build user and its directories runs as root
    assert len(root_runs) == 1
    assert root_runs[0].startswith("useradd ")
    installs = [i["value"] for i in build if i["instruction"] == "RUN" and "pip install" in i["value"]]
    assert len(installs) == 1
    assert user is not None
    assert user.split(":")[0] not in ("0", "root")


def test_the_final_stage_runs_cdi_plugin(parser: DockerfileParser) -> None:
    _, final = _stages(parser)
    entrypoint = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoint] == [["/opt/cdi-plugin/bin/cdi-plugin"]]
    assert json.loads(parser.cmd) == ["serve", "--scan", "--config", "/etc/cdi-plugin/config.yaml"]
    copies = [i["value"] for i in final if i["instruction"] == "COPY"]
    assert copies == ["--from=build /opt/cdi-plugin /opt/cdi-plugin"], "the final stage gets only the venv"
    runs = [i["value"] for i in final if i["instruction"] == "RUN"]
    assert all("pip" not in r for r in runs)
    assert all("rm -rf /var/lib/apt/lists/*" in r for r in runs if "apt-get" in r)


def test_labels(parser: DockerfileParser) -> None:
    labels = parser.labels
    assert labels["org.opencontainers.image.title"] == "cdi-plugin"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.description"]
    assert parser.parent_images[-1].startswith(labels["org.opencontainers.image.base.name"] + "@")


def _ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: the last matching pattern wins."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern.removeprefix("!")
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatch(p, glob) for p in prefixes) or (
            glob.startswith("**/") and any(fnmatch.fnmatch(part, glob[3:]) for part in parts)
        )
        if hit:
            ignored = not negate
    return ignored


def test_the_build_context_holds_what_the_build_copies(parser: DockerfileParser) -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    build, _ = _stages(parser)
    sources = []
    for instruction in build:
        if instruction["instruction"] == "COPY":
            words = [w for w in instruction["value"].split() if not w.startswith("--")]
            sources += words[:-1]
    assert sources == ["pyproject.toml", "README.md", LOCK, BUILD_LOCK, "schemas", "cdi_plugin"]
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not _ignored(source, patterns), source
    # the package's schemas are a symlink into schemas/, which must come along
    assert (ROOT / "cdi_plugin" / "schemas").resolve() == ROOT / "schemas"
    assert not _ignored("cdi_plugin/deviceplugin/_proto/api_pb2.py", patterns)
    for heavy in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "cdi_plugin/__pycache__/x.pyc",
        "deploy/base/daemonset.yaml",
    ):
        assert _ignored(heavy, patterns), heavy
