"""Command-line options shared by ``cdi-gen scan``, ``cdi-gen watch`` and ``cdi-plugin serve``, and
the one-line error exit of both programs (with ``--json``, also an ``{"error": MESSAGE}`` object).

Imports only click, the pure CDI core and the device-source names, so that ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

import click

from cdi_plugin.cdi.runtimes import NAMES as RUNTIME_NAMES
from cdi_plugin.cdi.version import SUPPORTED_VERSIONS
from cdi_plugin.cli.logs import configure_command
from cdi_plugin.cli.output import buffer_stdout, document_written, drop_stdout
from cdi_plugin.wording import escape_controls, file_type

F = TypeVar("F", bound=Callable[..., Any])


#: Set in the click context's ``meta`` when the command's ``--json`` was given: its errors are
#: then also printed to stdout as one JSON object, ``{"error": MESSAGE}``.
JSON_ERRORS = "cdi_plugin.json_errors"


def print_json_error(message: str) -> None:
    """Print ``{"error": message}`` to stdout if the running command was given ``--json``."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(JSON_ERRORS):
        try:
            click.echo(json.dumps({"error": message}))
        except OSError:  # a reader gone, a full disk: the line on stderr and the exit status still tell
            drop_stdout()


class HelpCommand(click.Command):
    """A command whose ``--help`` (and ``--version``) into a stdout that cannot be written (a
    full disk) is one error line naming it, status 1, as every output of the programs is: the
    options that print and exit (eager, with no value for the command) print through
    :func:`writing_stdout`, and nothing else that parsing does is taken for a write."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            callback = param.callback
            if param.is_eager and not param.expose_value and callback and not isinstance(callback, _Printing):
                param.callback = _Printing(callback)
        return params


class _Printing:
    """The callback of an option that prints and exits, its output written through :func:`writing_stdout`."""

    def __init__(self, callback: Callable[..., Any]) -> None:
        self.callback = callback

    def __call__(self, ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        buffer_stdout()  # the group's own options print while it parses, before it is invoked
        try:
            with writing_stdout(ctx.find_root().info_name or "cdi-plugin"):
                return self.callback(ctx, param, value)
        except BrokenPipeError:
            drop_stdout()
            raise SystemExit(1) from None


class JsonErrorsGroup(HelpCommand, click.Group):
    """A group whose commands, given ``--json``, also print each error as ``{"error": MESSAGE}``
    on stdout: their own (:func:`fail`), usage errors, which click prints to stderr, and an
    interruption (SIGINT). A reader of stdout that goes away (``| head``) ends the command
    quietly with status 1. Its commands are each a :class:`HelpCommand`."""

    command_class = HelpCommand

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and any(p.name == "as_json" for p in cmd.params) and _asks_json(cmd, rest):
            ctx.meta[JSON_ERRORS] = True
        return name, cmd, rest

    def invoke(self, ctx: click.Context) -> Any:
        with contextlib.suppress(AttributeError):  # text a locale cannot encode is escaped, not fatal
            sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        buffer_stdout()
        configure_command(ctx.find_root().info_name or "cdi-plugin")
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # here, where a closed pipe can still be told from other errors
        except click.ClickException as exc:  # a usage error: click prints it, exit 2
            print_json_error(exc.format_message())
            raise
        except BrokenPipeError:
            drop_stdout()
            raise SystemExit(1) from None
        except KeyboardInterrupt:  # after a whole document, no error document follows it
            fail(
                ctx.find_root().info_name or "cdi-plugin", "interrupted", json_error=not document_written(ctx)
            )


def _asks_json(cmd: click.Command, args: list[str]) -> bool:
    """Whether ``--json`` is among the command's options in ``args`` (before ``--``), not the
    value of another option (``--namespace --json``)."""
    options = [p for p in cmd.params if isinstance(p, click.Option) and not (p.is_flag or p.count)]
    takes_value = {opt for p in options for opt in p.opts}
    value_next = False
    for arg in args:
        if arg == "--" and not value_next:
            return False
        if arg == "--json" and not value_next:
            return True
        value_next = not value_next and arg in takes_value
    return False


def fail(program: str, message: str, code: int = 1, *, json_error: bool = True) -> NoReturn:
    """Print ``<program>: error: <message>`` to stderr (and, with ``--json``, the message as JSON
    to stdout unless not ``json_error``: a JSON report already says it) and exit with ``code``."""
    if json_error:
        print_json_error(message)
    click.echo(f"{program}: error: {escape_controls(message)}", err=True)
    raise SystemExit(code)


@contextlib.contextmanager
def writing_stdout(program: str) -> Iterator[None]:
    """Around a command's output: stdout that cannot be written (a full disk) is one error line
    naming it. A reader that went away (EPIPE) is left to :class:`JsonErrorsGroup`."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        drop_stdout()
        fail(program, f"cannot write to standard output: {exc.strerror or exc}", json_error=False)


def absolute(path: Path) -> Path:
    """``path`` made absolute; a usage error naming it when the current directory is gone."""
    try:
        return path.absolute()
    except OSError as exc:
        raise click.BadParameter(
            f"{escape_controls(str(path))}: relative, and the current directory cannot be read: "
            f"{exc.strerror or exc}"
        ) from None


def require_dirs(program: str, spec_dirs: Iterable[Path]) -> None:
    """Fail with one line naming the first of the ``--spec-dir`` directories given that is none."""
    for d in spec_dirs:
        if not d.is_dir():
            fail(program, f"--spec-dir {d}: no such directory")


_KINDS = {
    "file": (stat.S_ISREG, "a regular file"),
    "directory": (stat.S_ISDIR, "a directory"),
    "socket": (stat.S_ISSOCK, "a socket"),
}


class PathOf(click.Path):
    """A path that must be a regular file, a directory or a socket where it exists; one of another
    kind is refused naming what it is, in the words of the file readers: ``k.fifo: is a FIFO, not
    a regular file``. A path that does not exist is left to the program (created, waited for, or
    refused when it is read)."""

    def __init__(self, kind: Literal["file", "directory", "socket"]) -> None:
        super().__init__(path_type=Path, dir_okay=kind == "directory", readable=False)
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            mode = os.stat(value).st_mode
        except OSError:
            pass  # missing, or not reachable: the program says why when it uses the path
        else:
            right, name = _KINDS[self.kind]
            if not right(mode):
                self.fail(f"{value}: is {file_type(mode)}, not {name}", param, ctx)
        return super().convert(value, param, ctx)


def config_option(f: F) -> F:
    return click.option(
        "--config",
        type=PathOf("file"),
        help="The configuration file whose 'classes' define what to generate (default: the embedded "
        "default).",
    )(f)


def output_dir_option(help_default: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return click.option(
            "--output-dir",
            type=PathOf("directory"),
            default=None,
            help="Where to write the specs (created if missing)" + help_default,
        )(f)

    return decorate


#: How ``--output-dir`` of ``cdi-gen scan`` and ``watch`` defaults, and why a try-out is not refused.
OUTPUT_DIR_HELP = (
    " [default: the first --cdi-spec-dirs directory, /etc/cdi]. A directory no runtime reads (a "
    "try-out, a staging directory) is checked only against itself and --spec-dir: its specs cannot "
    "clash with the runtimes' until one reads them."
)


def _dir_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[Path, ...] | None:
    if value is None:
        return None
    from cdi_plugin.store.files import parse_spec_dirs

    dirs = parse_spec_dirs(value)
    if not dirs:
        raise click.BadParameter(f"{value!r} names no directory")
    return dirs


def cdi_spec_dirs_option(f: F) -> F:
    return click.option(
        "--cdi-spec-dirs",
        "runtime_dirs",
        envvar="CDI_SPEC_DIRS",
        show_envvar=True,
        callback=_dir_list,
        metavar="DIR[:DIR...]",
        help="The spec directories this host's container runtimes read (their cdi_spec_dirs), "
        "lowest priority first [default: /etc/cdi:/var/run/cdi]. When the output directory is one "
        "of them, a kind that a spec cdi-gen does not own defines in any of them is refused.",
    )(f)


def _used(default: str | None, used: str) -> str:
    """``[default: used]`` for the help of an option whose ``default`` is None only so that the
    command can tell it was not given (``serve`` refuses its scanner options without --scan)."""
    return f" [default: {used}]" if default is None else ""


def format_option(default: str | None = "json") -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(["json", "yaml"]),
            default=default,
            show_default=default is not None,
            help="Spec file format (<vendor>-<class>.json or .yaml)." + _used(default, "json"),
        )(f)

    return decorate


def max_version_option(default: str | None = "0.5.0") -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return click.option(
            "--cdi-version-max",
            type=click.Choice(SUPPORTED_VERSIONS),
            default=default,
            show_default=default is not None,
            metavar="VERSION",
            help="Refuse a spec that needs a higher cdiVersion (0.5.0: podman 4.3 and containerd "
            "1.7.0-1.7.2 read it; 0.6.0: iSulad)." + _used(default, "0.5.0"),
        )(f)

    return decorate


#: What ``--runtime`` does for the scanner (``cdi-gen scan``, ``watch``, ``cdi-plugin serve --scan``).
SCAN_RUNTIME_HELP = (
    "Refuse to write a spec runtime NAME would not read; the configuration's runtimes add to these"
)


def runtime_option(what: str = SCAN_RUNTIME_HELP) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return click.option(
            "--runtime",
            "runtimes",
            multiple=True,
            type=click.Choice(RUNTIME_NAMES),
            metavar="NAME",
            help=f"{what} (repeatable): {', '.join(RUNTIME_NAMES)}. See docs/runtimes.md.",
        )(f)

    return decorate


def force_option(f: F) -> F:
    return click.option(
        "--force", is_flag=True, help="Write a kind even if a spec cdi-gen does not own defines it."
    )(f)


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):  # nan would wait for ever: no time is ever past it
        raise click.BadParameter(f"{value} is not a finite number of seconds")
    return value


def lock_timeout_option(f: F) -> F:
    return click.option(
        "--lock-timeout",
        type=click.FloatRange(min=0),
        callback=_finite,
        default=30.0,
        show_default=True,
        metavar="SECONDS",
        help="How long to wait while another scan writes the output directory before failing.",
    )(f)


def spec_dir_option(f: F) -> F:
    return click.option(
        "--spec-dir",
        "spec_dirs",
        multiple=True,
        type=PathOf("directory"),
        help="Another spec directory to check for specs of the same kinds, whatever the output "
        "directory (repeatable).",
    )(f)


def source_option(default: str | None = "udev", watch: bool = False) -> Callable[[F], F]:
    what = (
        "Where devices come from: the host (udev, watched through uevents) or a file recorded with "
        "python -m cdi_plugin.discovery (fixture:PATH, watched for changes)."
        if watch
        else "Where devices come from: the host (udev), the bundled simulated workstation (simulated, "
        "for trying cdi-gen without hardware) or a file recorded with python -m cdi_plugin.discovery."
    )

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return value
        from cdi_plugin.discovery.sources import SIMULATED, source_problem  # only when given

        problem = source_problem(value, simulated=not watch)
        if problem is None:
            return value
        why = " ('simulated' never changes: run cdi-gen scan --source simulated once)"
        raise click.BadParameter(f"{value!r}: {problem}{why * (value == SIMULATED)}")

    def decorate(f: F) -> F:
        return click.option(
            "--source",
            default=default,
            show_default=default is not None,
            callback=check,
            metavar="udev|fixture:PATH" if watch else "udev|simulated|fixture:PATH",
            help=what + _used(default, "udev"),
        )(f)

    return decorate


def uevent_source_option(f: F) -> F:
    return click.option(
        "--uevent-source",
        type=click.Choice(["auto", "udev", "kernel"]),
        default=None,
        help="Which uevents to listen to: udev (sent by udevd once its rules ran) or kernel (the "
        "kernel's own) [default: auto: udev where /run/udev/control exists, else kernel].",
    )(f)


def parsed(parse: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """A click callback that passes a given value through ``parse``, whose ValueError is a usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def _parse_address(text: str) -> tuple[str, int]:
    from cdi_plugin.metrics import parse_address  # prometheus_client: only when the option is given

    return parse_address(text)


def metrics_address_option(f: F) -> F:
    return click.option(
        "--metrics-address",
        callback=parsed(_parse_address),
        metavar="[HOST:]PORT",
        help="Serve Prometheus metrics on http://HOST:PORT/metrics and the probes /healthz and /readyz; "
        "HOST defaults to 127.0.0.1, 0.0.0.0 listens on every address [default: off].",
    )(f)


def log_format_option(f: F) -> F:
    return click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Log lines on stderr as text or as JSON objects.",
    )(f)
