"""A path given on the command line that is not of the kind the option needs (a FIFO as
--kubeconfig, a file as --spec-dir) is refused naming what it is, in the words the file readers
use, before anything runs."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cdi_plugin.cli import gen, plugin


def fifo(d: Path) -> Path:
    os.mkfifo(d / "fifo")
    return d / "fifo"


def directory(d: Path) -> Path:
    (d / "dir").mkdir()
    return d / "dir"


def regular(d: Path) -> Path:
    (d / "file").write_text("")
    return d / "file"


def unix_socket(d: Path) -> Path:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(d / "sock"))
    return d / "sock"


def device(d: Path) -> Path:
    return Path("/dev/null")


Case = tuple[click.Group, list[str], str, Callable[[Path], Path], str]
CASES: list[Case] = [
    (plugin.main, ["serve"], "--kubeconfig", fifo, "is a FIFO, not a regular file"),
    (plugin.main, ["serve"], "--kubeconfig", directory, "is a directory, not a regular file"),
    (plugin.main, ["serve"], "--config", device, "is a character device, not a regular file"),
    (plugin.main, ["serve"], "--spec-dir", regular, "is a regular file, not a directory"),
    (plugin.main, ["serve"], "--plugin-dir", unix_socket, "is a socket, not a directory"),
    (plugin.main, ["serve"], "--kubelet-socket", regular, "is a regular file, not a socket"),
    (plugin.main, ["serve"], "--kubelet-plugins-dir", fifo, "is a FIFO, not a directory"),
    (plugin.main, ["dra-objects"], "--config", directory, "is a directory, not a regular file"),
    (gen.main, ["scan"], "--config", fifo, "is a FIFO, not a regular file"),
    (gen.main, ["scan"], "--output-dir", regular, "is a regular file, not a directory"),
    (gen.main, ["watch"], "--spec-dir", fifo, "is a FIFO, not a directory"),
    (gen.main, ["list"], "--spec-dir", fifo, "is a FIFO, not a directory"),
    (
        gen.main,
        ["inspect", "cdi-plugin.io/fuse=fuse"],
        "--spec-dir",
        regular,
        "is a regular file, not a directory",
    ),
    (
        gen.main,
        ["inspect", "cdi-plugin.io/fuse=fuse"],
        "--oci",
        directory,
        "is a directory, not a regular file",
    ),
    (plugin.main, ["prepared-claims"], "--file", directory, "is a directory, not a regular file"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1][0]}{c[2]}-{c[4].split(',')[0]}" for c in CASES])
def test_a_path_of_the_wrong_kind_is_named_for_what_it_is(tmp_path: Path, case: Case) -> None:
    program, command, option, make, what = case
    path = make(tmp_path)
    result = CliRunner().invoke(program, [*command, option, str(path)])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}': {path}: {what}" in result.output.replace("\n", " ")
