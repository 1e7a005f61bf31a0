"""``cdi-gen``: generate, validate and list CDI specs.

This module imports only click; each command imports what it needs when it runs, so that
``cdi-gen --help`` starts fast and never loads gRPC, YAML or the schema validator.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from cdi_plugin import __version__

F = TypeVar("F", bound=Callable[..., Any])

_VERSIONS = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a one-line error to stderr and exit."""
    click.echo(f"cdi-gen: error: {message}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """Turns every error into one line on stderr and exit 1; ``--debug`` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from cdi_plugin.errors import CdiPluginError

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            debug = bool(ctx.meta.get("cdi_gen.debug"))
            if debug:
                raise
            if isinstance(exc, CdiPluginError):
                fail(str(exc))
            fail(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON report.")(f)


def version_max_option(f: F) -> F:
    return click.option(
        "--cdi-version-max",
        type=click.Choice(_VERSIONS),
        default=None,
        metavar="VERSION",
        help="Treat a spec that declares a higher cdiVersion as invalid "
        "(0.5.0 for podman 4.3 and containerd 1.7.0-1.7.2, 0.6.0 for iSulad).",
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
    """
    ctx.meta["cdi_gen.debug"] = debug


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))
@json_option
@version_max_option
def validate(paths: tuple[Path, ...], as_json: bool, cdi_version_max: str | None) -> None:
    """Check CDI spec files the way runtimes load them, and more strictly.

    PATHS are spec files and/or directories (default: /etc/cdi and /var/run/cdi). Directories
    are read as runtimes read them: only .json and .yaml files, and the same device defined
    twice at the same priority is a conflict that makes both definitions unusable.

    Exit status: 0 when everything is valid, 1 when anything is invalid, 2 on usage errors.
    """
    from cdi_plugin.cli import render
    from cdi_plugin.cli.checks import validate_paths

    report = validate_paths(list(paths), cdi_version_max)
    if as_json:
        render.print_json(report.to_json())
    else:
        render.print_validation(report)
    sys.exit(0 if report.valid else 1)


@main.command("list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A spec directory, lowest priority first (repeatable; default: /etc/cdi /var/run/cdi).",
)
@json_option
def list_(spec_dirs: tuple[Path, ...], as_json: bool) -> None:
    """List every device name a runtime can resolve, and every conflict or broken file.

    A device defined in several directories resolves from the last one; a device defined twice
    at the same priority does not resolve at all.
    """
    from cdi_plugin.cli import render
    from cdi_plugin.store.files import DEFAULT_SPEC_DIRS
    from cdi_plugin.store.registry import load_registry

    snapshot = load_registry(list(spec_dirs) or list(DEFAULT_SPEC_DIRS))
    if as_json:
        render.print_json(render.listing_json(snapshot))
    else:
        render.print_listing(snapshot)
