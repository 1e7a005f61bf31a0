"""``cdi-gen inspect NAME...``: what a runtime gives a container for CDI device names.

The names resolve as ``cdi-gen list`` resolves them (:mod:`cdi_plugin.store.registry`); the edits
are merged and applied by :mod:`cdi_plugin.cdi.inject`; this module reads the host device nodes
(``lstat``, as the CDI library does) and prints. Imports only click until the command runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cdi_plugin.cli.scanopts import HelpCommand, PathOf, fail, require_dirs, writing_stdout

if TYPE_CHECKING:
    from cdi_plugin.cdi.inject import HostNode, HostNodes, Origin, Requested
    from cdi_plugin.cdi.model import ContainerEdits
    from cdi_plugin.store.registry import Snapshot

PROGRAM = "cdi-gen"


@click.command(cls=HelpCommand, short_help="Show what a runtime gives a container for CDI device names.")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=PathOf("directory"),
    help="A spec directory, lowest priority first (repeatable) [default: $CDI_SPEC_DIRS, else "
    "/etc/cdi /var/run/cdi].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a machine-readable JSON report (on an error: {"error": MESSAGE}).',
)
@click.option(
    "--oci",
    "oci_path",
    type=PathOf("file"),
    help="Also write the edits into this OCI runtime spec (a bundle's config.json), in place and "
    "atomically, as a runtime does before it creates the container (like 'cdi inject'). Nothing is "
    "written when a name does not resolve, a node cannot be created or the file is not an OCI "
    "runtime spec CDI can edit.",
)
def inspect(
    names: tuple[str, ...], spec_dirs: tuple[Path, ...], as_json: bool, oci_path: Path | None
) -> None:
    """Show what a runtime gives a container for fully-qualified CDI device names
    (vendor/class=name), as containerd, CRI-O, podman and Docker resolve and inject them.

    Names resolve as 'cdi-gen list' shows: from the directory of highest priority
    (/var/run/cdi overrides /etc/cdi), and not at all when two files of one directory define
    them. Each name's spec file and cdiVersion are shown, then the container's edits: the
    top-level containerEdits of each spec (once, before its first device's), then each device's,
    merged in that order (a variable, device node or mount set again replaces the earlier one).
    Device nodes show their type and major:minor (read from the host node now where the spec
    leaves them out, as runtimes do), mode, owner, group, cgroup access, whether a container user
    other than root can open them, and the host node as it is.

    A name given twice counts once, as the kubelet and runtimes pass it.

    Exit status: 0 when a runtime would create the container, 1 when a name does not resolve
    (unknown, or defined twice at one priority) or a device node could not be created (its host
    node is missing or of another type), 2 on usage errors (a name that is not
    vendor/class=name).
    """
    from cdi_plugin.cdi.inject import Container, edits_in_order, inject
    from cdi_plugin.cdi.names import parse_qualified_name
    from cdi_plugin.cli import render_inspect
    from cdi_plugin.errors import InvalidNameError
    from cdi_plugin.store.files import spec_dirs as default_spec_dirs
    from cdi_plugin.store.registry import load_registry

    for name in names:
        try:
            parse_qualified_name(name)
        except InvalidNameError as exc:
            fail(PROGRAM, str(exc) if repr(name) in str(exc) else f"{name}: {exc}", 2)
    require_dirs(PROGRAM, spec_dirs)
    snapshot = load_registry(list(spec_dirs or default_spec_dirs()))
    requested = _resolve(snapshot, list(dict.fromkeys(names)))
    edits = edits_in_order(requested)
    paths = (n.host_path or n.path for _, e in edits for n in e.device_nodes or ())
    hosts = read_host_nodes(dict.fromkeys(paths))
    container = Container()
    errors = inject(container, edits, hosts)
    if oci_path is not None:
        write_into_oci(oci_path, edits, hosts)
    report = render_inspect.Report(snapshot, requested, container, hosts, errors, oci_path)
    with writing_stdout(PROGRAM):
        if as_json:
            render_inspect.print_json(report)
        else:
            render_inspect.print_report(report)
    if errors:
        message = f"a runtime would not create the container: failed to inject devices: {errors[0]}"
        fail(PROGRAM, message, json_error=False)


def _resolve(snapshot: Snapshot, names: Sequence[str]) -> list[Requested]:
    """Each name as the spec directories resolve it; a name that does not is a one-line error."""
    from cdi_plugin.cdi.inject import Requested

    found: list[Requested] = []
    problems: list[str] = []
    for name in names:
        resolved = snapshot.resolve(name)
        if resolved is None:
            problems.append(unresolved(snapshot, name))
        else:
            found.append(Requested(name, resolved.spec, resolved.device, str(resolved.path)))
    for line in problems[:-1]:
        click.echo(f"{PROGRAM}: error: {line}", err=True)
    if problems:
        fail(PROGRAM, problems[-1])
    return found


def unresolved(snapshot: Snapshot, name: str) -> str:
    """Why ``name`` does not resolve, naming the files involved."""
    from cdi_plugin.cdi.names import natural_key
    from cdi_plugin.wording import defined_in, joined, some

    conflicts = [c for c in snapshot.conflicts if c.qualified_name == name]
    if conflicts:
        paths = [str(p) for c in conflicts for p in c.paths]
        return f"{name} is ambiguous: {defined_in(paths)} at the same priority; runtimes resolve neither"
    kind = name.partition("=")[0]
    files = [f for f in snapshot.files if f.kind is not None and str(f.kind) == kind]
    if files:
        where = some([str(f.path) for f in files])
        known = some(sorted((n.partition("=")[2] for n in snapshot.kinds.get(kind, ())), key=natural_key))
        why = f"unknown device {name}: {kind} is defined in {where}, whose devices are {known}"
    else:
        dirs = joined([str(d) for d in snapshot.dirs])
        why = f"unknown device {name}: no spec file in {dirs} defines {kind}"
    if snapshot.broken:
        why += f"; broken files, which runtimes skip: {some([str(f.path) for f in snapshot.broken])}"
    return why


#: An OCI runtime spec this large is not one (runc's default is 3 KiB).
MAX_OCI_BYTES = 4 * 1024 * 1024


def write_into_oci(path: Path, edits: Sequence[tuple[Origin, ContainerEdits]], hosts: HostNodes) -> None:
    """Apply ``edits`` to the OCI runtime spec at ``path`` and replace it atomically."""
    import json
    import os

    from cdi_plugin.cdi import textparse
    from cdi_plugin.cdi.inject import inject
    from cdi_plugin.cdi.oci import OciSpecError, container_of, has_user_namespace, with_container
    from cdi_plugin.store.atomic import write_atomic
    from cdi_plugin.store.files import read_file

    data = read_file(path, MAX_OCI_BYTES, "an OCI runtime spec", follow_links=False)
    doc, fmt = textparse.parse(data, str(path), "json", document="OCI runtime spec")
    try:
        if fmt != "json":
            raise OciSpecError("not JSON")
        container = container_of(doc)
        if has_user_namespace(doc) and any(e.mounts for _, e in edits):
            raise OciSpecError(
                "it has a user namespace, where the CDI library gives the mounts it adds ID mappings, "
                "which cdi-gen does not write"
            )
    except OciSpecError as exc:
        raise OciSpecError(f"{path}: {exc}") from None
    errors = inject(container, edits, hosts)
    if errors:
        raise OciSpecError(f"failed to inject devices: {errors[0]}; {path} is not changed")
    text = json.dumps(with_container(doc, container), indent=2, ensure_ascii=False) + "\n"
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError as exc:
        raise OciSpecError(f"{path}: {exc.strerror or exc}; not written") from None
    write_atomic(path, text.encode(), mode)


def read_host_nodes(paths: Iterable[str]) -> dict[str, HostNode | str]:
    """``lstat`` of each host path, as the CDI library reads a device node (a symbolic link is
    not followed); a path that cannot be read maps to the reason."""
    import os
    import stat

    from cdi_plugin.cdi.inject import HostNode
    from cdi_plugin.wording import file_type

    out: dict[str, HostNode | str] = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            out[path] = reason[:1].lower() + reason[1:]  # as the CDI library (Go) words it
            continue
        letter = stat.filemode(st.st_mode)[0]  # as ls shows it: c, b, p, d, -, l, s
        kind = letter if letter in ("c", "b", "p") else None
        major, minor = (os.major(st.st_rdev), os.minor(st.st_rdev)) if kind in ("c", "b") else (0, 0)
        out[path] = HostNode(kind, major, minor, st.st_mode, st.st_uid, st.st_gid, file_type(st.st_mode))
    return out
