"""``cdi-gen``: generate, validate and list CDI specs.

This module imports only click; each command imports what it needs when it runs, so that
``cdi-gen --help`` starts fast and never loads gRPC, YAML or the schema validator.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cdi_plugin import __version__
from cdi_plugin.cdi.version import SUPPORTED_VERSIONS
from cdi_plugin.cli.inspect import inspect
from cdi_plugin.cli.scanopts import (
    OUTPUT_DIR_HELP,
    JsonErrorsGroup,
    PathOf,
    cdi_spec_dirs_option,
    config_option,
    fail,
    force_option,
    format_option,
    lock_timeout_option,
    log_format_option,
    max_version_option,
    metrics_address_option,
    output_dir_option,
    require_dirs,
    runtime_option,
    source_option,
    spec_dir_option,
    uevent_source_option,
    writing_stdout,
)
from cdi_plugin.wording import fault

if TYPE_CHECKING:
    from cdi_plugin.store.registry import Snapshot, SpecFile, Stat

F = TypeVar("F", bound=Callable[..., Any])


PROGRAM = "cdi-gen"


class _Group(JsonErrorsGroup):
    """Turns every error into one line on stderr and exit 1 (with ``--json``, also one JSON object
    on stdout); ``--debug`` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from cdi_plugin.errors import CdiPluginError

        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            debug = bool(ctx.meta.get("cdi_gen.debug"))
            if debug:
                raise
            if isinstance(exc, CdiPluginError):
                fail(PROGRAM, str(exc))
            fail(PROGRAM, f"{fault(exc)} (run with --debug for the traceback)")


def json_option(f: F) -> F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='Print a machine-readable JSON report (on an error: {"error": MESSAGE}).',
    )(f)


def version_max_option(f: F) -> F:
    return click.option(
        "--cdi-version-max",
        type=click.Choice(SUPPORTED_VERSIONS),
        default=None,
        metavar="VERSION",
        help="Treat a spec that declares a higher cdiVersion as invalid "
        "(0.5.0 for podman 4.3 and containerd 1.7.0-1.7.2, 0.6.0 for iSulad) [default: no maximum].",
    )(f)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cdi-gen")
@click.option("--debug", is_flag=True, help="Show the full traceback when something fails.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Generate, check and list Container Device Interface (CDI) specs.

    CDI specs are JSON or YAML files in /etc/cdi and /var/run/cdi that tell container runtimes
    (containerd, CRI-O, podman, Docker, iSulad) what a device name such as
    vendor.com/class=name means inside a container.

    Runtimes configured to read other directories: set CDI_SPEC_DIRS (e.g.
    /etc/cdi:/var/run/cdi:/opt/cdi, lowest priority first), which every command then uses.
    """
    ctx.meta["cdi_gen.debug"] = debug


main.add_command(inspect)


@main.command(short_help="Check CDI spec files as runtimes load them, and more strictly.")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))
@json_option
@version_max_option
@click.option("--strict", is_flag=True, help="Treat warnings as errors: exit 1 on any warning.")
@runtime_option("Also check that runtime NAME loads each file: an error where it drops one")
def validate(
    paths: tuple[Path, ...],
    as_json: bool,
    cdi_version_max: str | None,
    strict: bool,
    runtimes: tuple[str, ...],
) -> None:
    """Check CDI spec files the way runtimes load them, and more strictly.

    PATHS are spec files and/or directories (default: $CDI_SPEC_DIRS, else /etc/cdi and
    /var/run/cdi). Directories
    are read as runtimes read them: only .json and .yaml files, and the same device defined
    twice at the same priority is a conflict that makes both definitions unusable.

    An error means runtimes built on the CDI Go library reject the spec, or it breaks the CDI
    specification. A warning means current runtimes load it, but the runtime or library version
    the warning names does not, or it is unwise. See docs/validation.md.

    A file runtimes never read (a suffix other than .json or .yaml; a directory, as named, that is
    a symbolic link, which their CDI library does not follow) gets a warning, as its content is
    not at fault: it is valid, unless --strict, and its devices conflict with no other file's.

    Exit status: 0 when everything is valid, 1 when anything is invalid, 2 on usage errors. A
    file with warnings but no errors is valid, unless --strict.
    """
    from cdi_plugin.cdi.runtimes import targets
    from cdi_plugin.cli import render
    from cdi_plugin.store.validation import validate_paths

    report = validate_paths(list(paths), cdi_version_max, strict, targets(runtimes))
    with writing_stdout(PROGRAM):
        if as_json:
            render.print_json(report.to_json())
        else:
            render.print_validation(report)
    sys.exit(0 if report.valid else 1)


@main.command("list", short_help="List the device names runtimes resolve, conflicts and broken files.")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=PathOf("directory"),
    help="A spec directory, lowest priority first (repeatable) [default: $CDI_SPEC_DIRS, else "
    "/etc/cdi /var/run/cdi].",
)
@json_option
@runtime_option("Also say which device names runtime NAME does not see, and why; exit 1 if any")
def list_(spec_dirs: tuple[Path, ...], as_json: bool, runtimes: tuple[str, ...]) -> None:
    """List every device name a runtime can resolve, and every conflict or broken file.

    A device defined in several directories resolves from the last one; a device defined twice
    at the same priority does not resolve at all. A file with errors is broken and skipped; a
    file with only warnings (e.g. a 'v' prefix on cdiVersion, which iSulad rejects) resolves,
    and its warnings are shown. A --spec-dir that does not exist is an error; a default
    directory that does not exist holds no specs, as for runtimes. A directory that cannot be
    read is shown as broken; one that is a symbolic link is skipped with a warning, as runtimes
    read nothing from it (--json: skippedDirs).

    On a terminal: a table; a qualified name is never broken (a narrow terminal drops the name,
    kind and priority columns, then folds the file column). Otherwise (a pipe, a file): one line per
    device, no header, tab-separated: qualified name, file, priority, kind, name; conflicts,
    broken files and warnings go to stderr.

    Exit status: 0 when every file loads and no name conflicts, 1 when a file or directory is
    broken, a name conflicts or a --runtime does not see a device (the rest is still listed,
    --json too) or a --spec-dir does not exist, 2 on usage errors.
    """
    from cdi_plugin.cli import render
    from cdi_plugin.cli.render_runtimes import print_views, runtime_views
    from cdi_plugin.store.files import spec_dirs as default_spec_dirs

    require_dirs(PROGRAM, spec_dirs)
    snapshot, skipped = _read_dirs(spec_dirs or default_spec_dirs())
    views = runtime_views(snapshot, runtimes)
    with writing_stdout(PROGRAM):
        if as_json:
            render.print_json(
                render.listing_json(snapshot, skipped)
                | ({"runtimes": [v.to_json() for v in views]} if views else {})
            )
        else:
            render.print_listing(snapshot)
            print_views(views)
    sys.exit(1 if snapshot.broken or snapshot.conflicts or any(v.unseen for v in views) else 0)


def _read_dirs(dirs: Sequence[Path]) -> tuple[Snapshot, tuple[SpecFile, ...]]:
    """The snapshot of ``dirs``, each listed once, so that the report tells of one listing; a
    directory that cannot be read is a broken file in it (runtimes may resolve names from it that
    the listing lacks), and one that is no directory (a symbolic link) is returned apart, skipped
    with a warning: runtimes read nothing from it either."""
    import logging
    from dataclasses import replace

    from cdi_plugin.cdi.problems import Severity, from_error
    from cdi_plugin.errors import SpecLoadError
    from cdi_plugin.store.files import scan_spec_dir
    from cdi_plugin.store.registry import SpecFile, SpecRegistry, file_stat

    listings: list[dict[str, Stat | None]] = []
    unreadable: list[SpecFile] = []
    skipped: list[SpecFile] = []
    for priority, directory in enumerate(dirs):
        try:
            found = scan_spec_dir(directory)
        except SpecLoadError as exc:
            found = []
            if exc.rule == "unreadable":
                unreadable.append(SpecFile(directory, priority, None, (from_error(exc),)))
            else:  # the listing is whole: a warning, as for a file runtimes do not read
                logging.getLogger(__name__).warning("skipping spec directory %s", exc)
                problem = replace(from_error(exc), severity=Severity.WARNING)
                skipped.append(SpecFile(directory, priority, None, (problem,)))
        listings.append({path.name: file_stat(path) for path in found})
    snapshot = SpecRegistry(dirs).refresh(listings)
    return replace(snapshot, files=snapshot.files + tuple(unreadable)), tuple(skipped)


@main.command()
@config_option
@output_dir_option(OUTPUT_DIR_HELP)
@click.option("--dry-run", is_flag=True, help="Write nothing; show what would change, with diffs.")
@format_option()
@json_option
@max_version_option()
@force_option
@click.option(
    "--skip-refused",
    is_flag=True,
    help="Leave out devices whose udev data is hostile (a '/', a control character or a leading '-' "
    "where a class uses it) or that no naming strategy tells apart (a serial number copying another "
    "device's name), and write the rest, instead of failing.",
)
@cdi_spec_dirs_option
@spec_dir_option
@lock_timeout_option
@source_option()
@runtime_option()
@click.option(
    "--print-default-config", is_flag=True, help="Print the embedded default configuration and exit."
)
def scan(
    *,
    config: Path | None,
    output_dir: Path | None,
    dry_run: bool,
    fmt: str,
    as_json: bool,
    cdi_version_max: str,
    force: bool,
    skip_refused: bool,
    runtime_dirs: tuple[Path, ...] | None,
    spec_dirs: tuple[Path, ...],
    lock_timeout: float,
    source: str,
    runtimes: tuple[str, ...],
    print_default_config: bool,
) -> None:
    """Turn the host's devices into CDI specs, one file per kind.

    Matches the devices udev reports against device classes (the 'classes' of --config, else the
    embedded default), names each device by its most stable identity, and writes validated specs
    with the lowest cdiVersion they need. Files are replaced atomically and only when their
    content changes. cdi-gen never changes a file it did not write: a kind that another spec
    already defines is refused unless --force, and its own spec of a kind whose last device is
    gone is removed.

    Values a device chooses itself (a USB serial number) are sanitised wherever they land; a
    device whose values try to inject a path, an option or a line is refused, and the scan fails
    unless --skip-refused.

    The report is a table (on a terminal too narrow for it, a line per file and per device);
    --json gives it to scripts.

    Exit status: 0 on success, 1 on any error, 2 on usage errors. Every check, and a full disk
    or a read-only file system, fails before any file changes.
    """
    if print_default_config:
        from cdi_plugin.generate.config import default_config_text

        with writing_stdout(PROGRAM):
            click.echo(default_config_text(), nl=False)
        return
    from cdi_plugin.cli import render_scan
    from cdi_plugin.discovery.sources import make_source
    from cdi_plugin.scan import ScanOptions, run_scan
    from cdi_plugin.store.files import spec_dirs as default_spec_dirs

    runtime_dirs = runtime_dirs or default_spec_dirs()
    options = ScanOptions(
        config=config,
        output_dir=output_dir or runtime_dirs[0],
        dry_run=dry_run,
        fmt="yaml" if fmt == "yaml" else "json",
        max_version=cdi_version_max,
        force=force,
        skip_refused=skip_refused,
        runtime_dirs=runtime_dirs,
        spec_dirs=spec_dirs,
        lock_timeout=lock_timeout,
        runtimes=runtimes,
    )
    with render_scan.progress("scanning devices"):
        report = run_scan(options, make_source(source))
    render_scan.print_warnings(report.warnings)
    with writing_stdout(PROGRAM):
        if as_json:
            render_scan.print_json(report)
        else:
            render_scan.print_scan(report)


@main.command(short_help="Keep the specs in step with the host's devices, as a service.")
@config_option
@output_dir_option(OUTPUT_DIR_HELP)
@format_option()
@max_version_option()
@force_option
@cdi_spec_dirs_option
@spec_dir_option
@lock_timeout_option
@source_option(watch=True)
@uevent_source_option
@runtime_option()
@metrics_address_option
@log_format_option
@click.option("-v", "--verbose", is_flag=True, help="Also log debug messages (every rescan).")
def watch(
    *,
    config: Path | None,
    output_dir: Path | None,
    fmt: str,
    cdi_version_max: str,
    force: bool,
    runtime_dirs: tuple[Path, ...] | None,
    spec_dirs: tuple[Path, ...],
    lock_timeout: float,
    source: str,
    uevent_source: str | None,
    runtimes: tuple[str, ...],
    metrics_address: tuple[str, int] | None,
    log_format: str,
    verbose: bool,
) -> None:
    """Keep the specs in step with the host until SIGTERM, SIGINT or SIGHUP.

    Scans like 'cdi-gen scan', then listens for udev events of the subsystems its classes match
    (and for device nodes appearing under /dev where a class matches by devnode glob) and rescans
    the classes an event touches, a burst of events at once: within 100 ms of the last event, at
    most 250 ms after the first. Only specs whose content changed are rewritten, atomically. An
    edited --config is applied without a restart; an invalid edit is logged and the last good
    configuration stays. Devices with hostile udev data, or without a name of their own, are
    always skipped (and logged).

    Exit status: 0 after SIGTERM, SIGINT or SIGHUP, 1 when it cannot start (a bad configuration,
    no access to udev), 2 on usage errors. See docs/hotplug.md.
    """
    import asyncio
    import logging

    from cdi_plugin.cli.logs import configure
    from cdi_plugin.cli.service import run_until_stopped
    from cdi_plugin.scan import ScanOptions
    from cdi_plugin.scan.watcher import Watcher
    from cdi_plugin.scan.watchoptions import WatchOptions
    from cdi_plugin.store.files import spec_dirs as default_spec_dirs

    configure("json" if log_format == "json" else "text", logging.DEBUG if verbose else logging.INFO)
    runtime_dirs = runtime_dirs or default_spec_dirs()
    options = WatchOptions(
        scan=ScanOptions(
            config=config,
            output_dir=output_dir or runtime_dirs[0],
            fmt="yaml" if fmt == "yaml" else "json",
            max_version=cdi_version_max,
            force=force,
            skip_refused=True,
            runtime_dirs=runtime_dirs,
            spec_dirs=spec_dirs,
            lock_timeout=lock_timeout,
            runtimes=runtimes,
        ),
        source=source,
        uevent_source="udev" if uevent_source == "udev" else "kernel" if uevent_source == "kernel" else None,
    )
    if metrics_address is None:
        asyncio.run(run_until_stopped(Watcher(options).run))
        return
    from cdi_plugin.cli.service import serve_scan_metrics

    serve_scan_metrics(options, metrics_address, PROGRAM)
