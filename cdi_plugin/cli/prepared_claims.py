"""``cdi-plugin prepared-claims``: the claims the DRA driver records as prepared on this node,
printed as the JSON document of its state file's newest record (:mod:`cdi_plugin.dra.prepared`).
Imports only click (and the driver's defaults) at start, so that ``cdi-plugin --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from cdi_plugin.cli.output import write_document
from cdi_plugin.cli.scanopts import HelpCommand, PathOf, fail, writing_stdout
from cdi_plugin.dra.names import DEFAULT_DRIVER, DEFAULT_PLUGINS_DIR

PROGRAM = "cdi-plugin"


@click.command(
    "prepared-claims",
    cls=HelpCommand,
    short_help="Print the claims the DRA driver records as prepared, as JSON.",
)
@click.option(
    "--driver-name",
    default=DEFAULT_DRIVER,
    show_default=True,
    metavar="NAME",
    help="The DRA driver's name, as given to serve.",
)
@click.option(
    "--kubelet-plugins-dir",
    type=PathOf("directory"),
    default=DEFAULT_PLUGINS_DIR,
    show_default=True,
    metavar="DIR",
    help="The kubelet's plugins directory, as given to serve: the file is DIR/NAME/prepared.json.",
)
@click.option(
    "--file",
    "state_file",
    type=PathOf("file"),
    default=None,
    metavar="PATH",
    help="Read this file instead (a copy, say).",
)
def prepared_claims(*, driver_name: str, kubelet_plugins_dir: Path, state_file: Path | None) -> None:
    """Print the claims the DRA driver records as prepared on this node, as JSON.

    The driver keeps them in DIR/NAME/prepared.json, two slots written in turn (docs/dra.md);
    this prints the newest whole record: the document a release before slots kept as plain JSON.
    To go back to such a release, with the driver stopped, in DIR/NAME:

    \b
        cdi-plugin prepared-claims > prepared.json.new
        mv prepared.json.new prepared.json

    Exit status: 0 when the record is printed (a damaged slot passed over gets a note on
    stderr), 1 when the file cannot be read or holds no whole record (nothing is printed), 2
    on usage errors.
    """
    from cdi_plugin.dra.names import check_driver_name
    from cdi_plugin.dra.prepared import MAX_STATE_BYTES, WHAT
    from cdi_plugin.dra.preparedstate import decode, encode
    from cdi_plugin.errors import CdiPluginError
    from cdi_plugin.store import slotfile

    try:
        path = state_file or kubelet_plugins_dir / check_driver_name(driver_name) / "prepared.json"
        reading = slotfile.read(path, MAX_STATE_BYTES, WHAT)
        state = decode(reading.record, str(path))
    except CdiPluginError as exc:
        fail(PROGRAM, str(exc))
    if reading.damaged is not None:
        click.echo(f"{PROGRAM}: note: {path}: {reading.damaged}", err=True)
    with writing_stdout(PROGRAM):
        write_document(encode(state, indent=1))
