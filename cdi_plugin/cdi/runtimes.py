"""What each container runtime accepts of a CDI spec file: the one table of them.

:data:`RUNTIMES` has one row per runtime release that reads specs differently: the file
suffixes it reads, whether a ``.json`` file may hold YAML, the highest ``cdiVersion`` and whether
a ``v`` prefix is taken, and the fields it rejects (the whole file is then dropped) or ignores.
A row stands for the releases its title names; a newer release reads at least what an older one
of its series reads, so ``containerd-1.7`` and ``containerd-2`` (the first releases) accept only
what every release of the series reads.

Sources (docs/runtimes.md lists them):

* measured: the runtime run with specs of each kind (iSulad 2.1.6, CRI-O 1.36.3, containerd
  2.3.4, Docker 29.7.2; podman 4.3.1 of Debian 12 by ``tests/e2e/test_runtime_targets.py``);
* the CDI Go library each release vendors, from the release's ``go.mod``, and what that library
  accepts (its ``CurrentVersion``, its validation code).

What is not verified is said in the row's ``unverified``. :mod:`.runtime_checks` applies the
table to a spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: The hook names of the CDI Go library (every release this table names).
GO_HOOKS = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
GO_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
BOTH = (".json", ".yaml")


@dataclass(frozen=True, slots=True)
class Runtime:
    name: str  # what --runtime and the configuration's ``runtimes`` take
    title: str  # the release (series) it stands for
    library: str  # the CDI code it reads specs with
    max_version: str  # the highest cdiVersion it reads
    v_prefix: bool  # whether it takes ``v0.6.0`` for ``0.6.0``
    suffixes: tuple[str, ...] = BOTH  # the file names it reads
    yaml_in_json: bool = True  # whether a ``.json`` file may hold YAML
    permissions_none: bool = False  # whether it takes deviceNode ``permissions: none``
    hook_names: frozenset[str] = GO_HOOKS
    node_types: frozenset[str] = GO_NODE_TYPES
    #: Whether it rejects intelRdt ``enableCMT`` and ``enableMBM`` (removed in CDI 1.1.0).
    rejects_cmt_mbm: bool = False
    #: Fields it reads past without applying them.
    ignores: tuple[str, ...] = ()
    #: Whether a device node without ``fileMode`` is created with mode 0666 (the CDI Go library
    #: takes the host node's mode).
    mode_0666: bool = False
    source: str = ""
    unverified: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.title})"


_FROM_GO_MOD = "the CDI library in the release's go.mod, and that library's versions and rules"

RUNTIMES: tuple[Runtime, ...] = (
    Runtime(
        name="containerd-1.7", title="containerd 1.7.0-1.7.12", library="CDI Go library v0.5.4",
        max_version="0.5.0", v_prefix=False,
        source=f"containerd v1.7.0 (CDI v0.5.4): {_FROM_GO_MOD}",
        unverified="the 'v' prefix, taken as rejected (podman 4.3's library of the same series rejects it); "
        "releases 1.7.3 to 1.7.12 were not mapped",
    ),
    Runtime(
        name="containerd-1.7.13", title="containerd 1.7.13-1.7.19", library="CDI Go library v0.6.2",
        max_version="0.6.0", v_prefix=False,
        source=f"containerd v1.7.13 (CDI v0.6.2): {_FROM_GO_MOD}",
        unverified="the 'v' prefix, taken as rejected; releases 1.7.14 to 1.7.19 were not mapped",
    ),
    Runtime(
        name="containerd-1.7.20", title="containerd 1.7.20-1.7.33", library="CDI Go library v0.7.2",
        max_version="0.7.0", v_prefix=True,
        source=f"containerd v1.7.20 (CDI v0.7.2): {_FROM_GO_MOD}; the library strips a leading 'v' "
        "(pkg/cdi/version.go)",
        unverified="releases 1.7.21 to 1.7.33 were not mapped",
    ),
    Runtime(
        name="containerd-1.7.34", title="containerd 1.7.34 and later 1.7", library="CDI Go library v0.8.1",
        max_version="0.8.0", v_prefix=True,
        source=f"containerd v1.7.34 (CDI v0.8.1), the last 1.7 release seen: {_FROM_GO_MOD}",
    ),
    Runtime(
        name="containerd-2", title="containerd 2.0", library="CDI Go library v0.8.0",
        max_version="0.8.0", v_prefix=True,
        source=f"containerd v2.0.0 (CDI v0.8.0): {_FROM_GO_MOD}",
    ),
    Runtime(
        name="containerd-2.1", title="containerd 2.1-2.2", library="CDI Go library v1.0.1",
        max_version="1.0.0", v_prefix=True,
        source=f"containerd v2.1.0 and v2.2.0 (CDI v1.0.1): {_FROM_GO_MOD}",
    ),
    Runtime(
        name="containerd-2.3", title="containerd 2.3", library="CDI Go library v1.1.0",
        max_version="1.1.0", v_prefix=True, rejects_cmt_mbm=True,
        source=f"containerd v2.3.0 (CDI v1.1.0): {_FROM_GO_MOD}; measured with containerd 2.3.4",
    ),
    Runtime(
        name="cri-o", title="CRI-O 1.36", library="CDI Go library v1.1.0",
        max_version="1.1.0", v_prefix=True, rejects_cmt_mbm=True,
        source="measured with CRI-O 1.36.3: cdiVersion 0.3.0 to 1.1.0 read, and v0.6.0 and v1.0.0",
        unverified="CRI-O releases before 1.36 vendor older libraries, not mapped",
    ),
    Runtime(
        name="docker", title="Docker 29", library="CDI Go library v1.1.0",
        max_version="1.1.0", v_prefix=True, rejects_cmt_mbm=True,
        source="measured with Docker 29.7.2",
        unverified="Docker 25 to 28 vendor older libraries, not mapped",
    ),
    Runtime(
        name="podman-4", title="podman 4.3", library="CDI Go library, 0.5 series",
        max_version="0.5.0", v_prefix=False,
        source="measured with podman 4.3.1 of Debian 12 (tests/e2e/test_runtime_targets.py): cdiVersion "
        "0.3.0 to 0.5.0 read, a 'v' prefix rejected; .yaml files and YAML in a .json file read; "
        "permissions 'none' rejected",
        unverified="podman 4.0 to 4.2 and 4.4 to 4.9",
    ),
    Runtime(
        name="isulad", title="iSulad 2.1.6", library="its own C code",
        max_version="0.6.0", v_prefix=False, suffixes=(".json",), yaml_in_json=False,
        hook_names=frozenset({"prestart", "poststart", "poststop"}),
        node_types=frozenset({"", "b", "c", "p"}),
        ignores=("additionalGids", "intelRdt", "netDevices"), mode_0666=True,
        source="measured with iSulad 2.1.6 (CRI v1, enable-cdi): cdiVersion exactly 0.3.0 to 0.6.0 read, "
        "no 'v'; only *.json files; YAML in a .json file a parse error; additionalGids, intelRdt and "
        "netDevices ignored; a node without fileMode created 0666",
        unverified="the hook names, node types and permissions 'none' it rejects: read in iSulad's "
        "cdi_container_edits.c (master), not run",
    ),
)  # fmt: skip

BY_NAME = {r.name: r for r in RUNTIMES}
NAMES = tuple(BY_NAME)


def targets(names: Iterable[str]) -> tuple[Runtime, ...]:
    """The runtimes of ``names`` (known names only: the CLI and the schema check them), each once."""
    return tuple(BY_NAME[n] for n in dict.fromkeys(names))
