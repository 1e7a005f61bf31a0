"""``cdi-plugin dra-objects``: the Kubernetes objects DRA needs, printed as YAML or JSON.

The kinds are chosen from the spec directories as ``cdi-plugin serve`` chooses those it serves
through DRA (its settings and the inventory's kind selection); the objects are built by
:mod:`cdi_plugin.dra.objects`. Imports only click (and the driver's default name) at start, so
that ``cdi-plugin --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cdi_plugin.cli.output import write_document
from cdi_plugin.cli.scanopts import HelpCommand, PathOf, absolute, fail, require_dirs, writing_stdout
from cdi_plugin.dra.names import DEFAULT_DRIVER

PROGRAM = "cdi-plugin"
PARTS = ("rbac", "policy", "classes", "examples")


def _kinds(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...] | None:
    from cdi_plugin.cli.plugin import _kinds as serve_kinds  # the same check as serve's --kind

    return serve_kinds(ctx, param, value)


def _dirs(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> tuple[Path, ...] | None:
    return tuple(absolute(p) for p in value) or None


def _served_kinds(
    spec_dirs: tuple[Path, ...] | None,
    kinds: tuple[str, ...] | None,
    config_file: Path | None,
    api: str | None = None,
) -> tuple[list[str], dict[str, list[str]]]:
    """The kinds ``serve --api`` (dra or both) would serve through DRA with these settings, and
    their devices' container paths."""
    import dataclasses

    from cdi_plugin.deviceplugin import settings
    from cdi_plugin.globs import glob_match
    from cdi_plugin.inventory.selection import KindSelection
    from cdi_plugin.inventory.source import SpecSource
    from cdi_plugin.store.configfile import load_config
    from cdi_plugin.wording import joined, shown

    require_dirs(PROGRAM, spec_dirs or ())
    section = None if config_file is None else load_config(config_file).get("plugin")
    config = settings.build(section, str(config_file), spec_dirs=spec_dirs, kinds=kinds, api=api)
    if config.api == "device-plugin":
        config = dataclasses.replace(config, api="dra")
    source = SpecSource(config.spec_dirs)
    source.current()
    dirs = ", ".join(str(d) for d in config.spec_dirs)
    if source.reading is None:
        fail(PROGRAM, f"{dirs}: the spec files kept changing while they were read; try again")
    devices = source.reading.snapshot.devices.values()
    present = sorted({str(d.kind) for d in devices})
    for glob in kinds or ():
        if not any(glob_match(glob, kind) for kind in present):
            found = f"kinds there: {joined([shown(k) for k in present])}" if present else "no spec there"
            fail(PROGRAM, f"--kind {shown(glob)}: no kind in {dirs} matches it ({found})")
    served = sorted(KindSelection(config.matching_glob).select(set(present), source.reading))
    if not served and present:
        listed = joined([shown(k) for k in present])
        fail(PROGRAM, f"no kind to serve in {dirs}: cdi-gen wrote none of {listed} (name them with --kind)")
    if not served:
        fail(
            PROGRAM, f"no kind found in {dirs}: run cdi-gen scan first, or name the directory with --spec-dir"
        )
    for kind in present:
        if kind not in served:
            why = (
                "was changed since cdi-gen wrote it"
                if kind in source.reading.recorded
                else "is not cdi-gen's"
            )
            click.echo(
                f"{PROGRAM}: note: left out kind {shown(kind)}: its spec {why} (name it with --kind {kind})",
                err=True,
            )
    for kind in served:
        elsewhere = config.left_out("dra", kind)
        if elsewhere is not None:
            click.echo(f"{PROGRAM}: note: left out kind {shown(kind)}: {elsewhere}", err=True)
    through_dra = [kind for kind in served if config.serves("dra", kind)]
    if not through_dra:
        fail(
            PROGRAM,
            f"no kind of {dirs} is served through DRA with --api {config.api}: "
            f"name some with plugin.resources.<kind>.api: dra in the configuration",
        )
    served = through_dra
    paths: dict[str, list[str]] = {kind: [] for kind in served}
    for d in devices:
        if str(d.kind) in paths:
            edits = [d.device.container_edits, d.spec.container_edits]
            paths[str(d.kind)] += [n.path for e in edits if e is not None for n in e.device_nodes or ()]
    return served, paths


@click.command(
    "dra-objects",
    cls=HelpCommand,
    short_help="Print DeviceClasses, RBAC, admission policy and example claims for DRA.",
)
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=PathOf("directory"),
    callback=_dirs,
    metavar="DIR",
    help="CDI spec directory to read the kinds from, as serve's --spec-dir [default: the 'plugin' "
    "section's specDirs, else $CDI_SPEC_DIRS, else /etc/cdi then /var/run/cdi].",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    callback=_kinds,
    metavar="GLOB",
    help="Also include the kinds matching GLOB, as serve's --kind (by default only the kinds cdi-gen "
    "wrote); repeatable. A GLOB matching no kind in the spec directories is an error.",
)
@click.option(
    "--config",
    "config_file",
    type=PathOf("file"),
    default=None,
    metavar="FILE",
    help="Configuration file whose 'plugin' section sets specDirs and kinds, as for serve.",
)
@click.option(
    "--api",
    type=click.Choice(("dra", "both")),
    default=None,
    help="The --api serve runs with: the kinds are those it serves through DRA, with both only "
    "those the configuration names (plugin.resources.<kind>.api) [default: the 'plugin' "
    "section's api if it is both, else dra].",
)
@click.option(
    "--driver-name",
    default=DEFAULT_DRIVER,
    show_default=True,
    metavar="NAME",
    help="The DRA driver's name, as given to serve (a DNS subdomain of at most 63 characters).",
)
@click.option(
    "--extended-resource",
    is_flag=True,
    help="Set each DeviceClass's extendedResourceName to the kind (the device plugin's resource "
    "name; Kubernetes >= 1.36, DRAExtendedResource): a pod asking for <kind>: 1 in its limits is then "
    "served through DRA where the device plugin does not serve the kind.",
)
@click.option(
    "--namespace",
    default="kube-system",
    show_default=True,
    metavar="NAME",
    help="Namespace of the driver's ServiceAccount (rbac, policy).",
)
@click.option(
    "--service-account",
    default="cdi-plugin",
    show_default=True,
    metavar="NAME",
    help="The driver's ServiceAccount (the DaemonSet's serviceAccountName; rbac, policy).",
)
@click.option(
    "--examples",
    is_flag=True,
    help="Also print, per kind, a ResourceClaimTemplate asking for one device and a pod using it.",
)
@click.option(
    "--only",
    "parts",
    multiple=True,
    type=click.Choice(PARTS),
    help="Print only these parts; repeatable [default: rbac, policy and classes, with examples if "
    "--examples].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON List instead of YAML documents (on an error: {"error": MESSAGE}).',
)
def dra_objects(
    *,
    spec_dirs: tuple[Path, ...] | None,
    kinds: tuple[str, ...] | None,
    config_file: Path | None,
    api: str | None,
    driver_name: str,
    extended_resource: bool,
    namespace: str,
    service_account: str,
    examples: bool,
    parts: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print the Kubernetes objects the DRA driver needs (resource.k8s.io/v1, Kubernetes >= 1.34).

    rbac: the driver's ServiceAccount, ClusterRole and ClusterRoleBinding: ResourceSlices
    read-write (the driver writes only its own node's), ResourceClaims and Nodes get.

    policy: a ValidatingAdmissionPolicy and its binding (Kubernetes >= 1.30) that let the
    ServiceAccount write only ResourceSlices of this driver on the node named in its token.

    classes: a DeviceClass per kind served, named <class>.<vendor> (lower case, '_' turned into
    '-'; where that is no DNS subdomain, as with '..' or '-.' in the kind, each run of '.' and '-'
    around a dot becomes one dot and the name ends in a hash of the kind), whose CEL selector picks
    this driver's devices of that kind.

    examples (--examples): per kind a ResourceClaimTemplate for one device and a pod using it.

    The kinds are those `cdi-plugin serve` would serve through DRA from the spec directories: the
    kinds cdi-gen wrote, and those named with --kind, unless the configuration gives them to the
    device plugin (with --api both: unless it gives them to DRA). Apply the output with kubectl, e.g.

    \b
        cdi-plugin dra-objects | kubectl apply -f -

    A kind that can have no objects is left out with a warning on stderr, and the objects of the
    others are printed: its vendor or class is longer than a ResourceSlice attribute value (64
    characters, so no selector can match its devices), its DeviceClass name would be longer than 253
    characters, another kind's objects would have the same names, or with --extended-resource it is
    not an extended resource name.

    Exit status: 0 when no kind is left out with a warning (a kind the configuration leaves out
    gets a note), 1 when one is (the objects of the others are still printed, --json too) or on an
    error (no object is printed), 2 on usage errors. See docs/dra.md.
    """
    import json

    from cdi_plugin.dra import objects
    from cdi_plugin.dra.names import check_driver_name
    from cdi_plugin.errors import CdiPluginError
    from cdi_plugin.wording import escape_controls, shown

    chosen = set(parts) if parts else {"rbac", "policy", "classes"}
    if examples:
        chosen.add("examples")
    out: list[dict[str, Any]] = []
    left_out: dict[str, str] = {}
    try:
        check_driver_name(driver_name)
        if "rbac" in chosen:
            out += objects.rbac(driver_name, namespace, service_account)
        if "policy" in chosen:
            out += objects.admission_policy(driver_name, namespace, service_account)
        if chosen & {"classes", "examples"}:
            served, paths = _served_kinds(spec_dirs, kinds, config_file, api)
            kind_objects, left_out = _kind_objects(
                served, paths, driver_name, chosen, extended_resource=extended_resource
            )
            out += kind_objects
    except CdiPluginError as exc:
        fail(PROGRAM, str(exc))
    for kind, problem in left_out.items():
        click.echo(f"{PROGRAM}: warning: left out kind {shown(kind)}: {escape_controls(problem)}", err=True)
    if as_json:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2) + "\n"
    else:
        import yaml

        text = yaml.safe_dump_all(out, sort_keys=False, explicit_start=True, width=4096)
    with writing_stdout(PROGRAM):
        write_document(text)
    if left_out:
        raise SystemExit(1)


def _kind_objects(
    served: list[str], paths: dict[str, list[str]], driver: str, chosen: set[str], *, extended_resource: bool
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The objects of the kinds that can have them, and why each other kind cannot."""
    from cdi_plugin.deviceplugin.resources import resource_name_problem
    from cdi_plugin.dra import objects

    problems: dict[str, str] = {}
    for kind in served:
        problem = objects.kind_problem(kind)
        if problem is None and extended_resource:
            problem = resource_name_problem(kind)
            if problem is not None:
                problem = f"not an extended resource name, so no extendedResourceName: {problem}"
        if problem is not None:
            problems[kind] = problem
    kinds = [kind for kind in served if kind not in problems]
    problems |= _shared({kind: objects.device_class_name(kind) for kind in kinds}, "DeviceClass")
    kinds = [kind for kind in kinds if kind not in problems]
    pod_names = objects.example_pod_names(kinds) if "examples" in chosen else {}
    problems |= _shared(pod_names, "example pod")
    kinds = [kind for kind in kinds if kind not in problems]
    out = []
    if "classes" in chosen:
        out += [objects.device_class(driver, k, extended_resource=extended_resource) for k in kinds]
    if "examples" in chosen:
        for kind in kinds:
            out += [
                objects.claim_template(kind),
                objects.example_pod(kind, paths[kind], name=pod_names[kind]),
            ]
    return out, {kind: problems[kind] for kind in served if kind in problems}


def _shared(names: dict[str, str], what: str) -> dict[str, str]:
    """Why each kind whose name (of ``what``) another kind has too gets no objects."""
    from cdi_plugin.wording import joined, shown

    holders: dict[str, list[str]] = {}
    for kind, name in names.items():
        holders.setdefault(name, []).append(kind)
    return {
        kind: f"{'kind' if len(kinds) == 2 else 'kinds'} {joined([shown(k) for k in kinds if k != kind])} "
        f"would have the same {what} name, {name}"
        for name, kinds in holders.items()
        if len(kinds) > 1
        for kind in kinds
    }
