"""``--help`` of every command of both programs: wrapped to the terminal, and ``serve``'s options
in groups (device plugin, scanner, DRA, logging and metrics)."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from cdi_plugin.cli import gen, plugin

COMMANDS = [
    (program, [name] if name else [])
    for program in (gen.main, plugin.main)
    for name in ["", *program.commands]
]


def _help(program: click.Group, command: list[str], width: int) -> str:
    result = CliRunner().invoke(program, [*command, "--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("width", [60, 80])
@pytest.mark.parametrize(
    ("program", "command"), COMMANDS, ids=[f"{p.name} {' '.join(c)}" for p, c in COMMANDS]
)
def test_all_help_text_wraps_to_the_terminal(program: click.Group, command: list[str], width: int) -> None:
    long = [line for line in _help(program, command, width).splitlines() if len(line) > width]
    assert long == []


#: The groups of ``serve --help``, in order, and their options.
SERVE_GROUPS = {
    "Devices served (both kubelet APIs)": ["--config", "--spec-dir", "--kind", "--grace-period", "--api",
                                           "--allow-exclusive-kinds-on-both-apis"],
    "Device plugin API": ["--plugin-dir", "--kubelet-socket", "--replicas", "--cdi-strategy"],
    "Scanner (with --scan)": [
        "--scan", "--output-dir", "--format", "--cdi-version-max", "--runtime", "--source", "--uevent-source",
        "--allow-hooks-and-mounts",
    ],
    "DRA driver (with --api dra or both)": [
        "--driver-name", "--node-name", "--kubeconfig", "--kubelet-plugins-dir", "--kubelet-registry-dir",
        "--pod-uid",
    ],
    "Logging and metrics": ["--log-format", "--metrics-address", "--verbose"],
    "Other options": ["--help"],
}  # fmt: skip


def test_serve_help_groups_every_option() -> None:
    text = _help(plugin.main, ["serve"], 100)
    sections = re.split(r"^(\S[^:\n]*):\n", text, flags=re.MULTILINE)[1:]
    found = {
        title: re.findall(r"^ {2}(?:-\w, )?(--[\w-]+)", body, flags=re.MULTILINE)
        for title, body in zip(sections[::2], sections[1::2], strict=True)
    }
    assert found == SERVE_GROUPS
    options = {o for p in plugin.serve.params for o in getattr(p, "opts", ()) if o.startswith("--")}
    assert {o for group in SERVE_GROUPS.values() for o in group} == options - {"--sysfs-root"} | {"--help"}


def _defaults(program: click.Group, command: list[str]) -> dict[str, str]:
    """Each option's ``[default: ...]`` in the help of ``command``."""
    options = re.split(r" (?=--[\w-]+ )", " ".join(_help(program, command, 1000).split()))
    found = (re.match(r"(--[\w-]+) .*?\[default: ([^\]]+)\]", option) for option in options)
    return {m[1]: m[2] for m in found if m}


def test_serve_help_shows_the_scanner_defaults_of_watch() -> None:
    serve, watch = _defaults(plugin.main, ["serve"]), _defaults(gen.main, ["watch"])
    for option in ["--format", "--cdi-version-max", "--source", "--uevent-source"]:
        assert serve.get(option) == watch[option], option


SUBCOMMANDS = {
    f"{name} {command}": (program, command)
    for name, program in (("cdi-gen", gen.main), ("cdi-plugin", plugin.main))
    for command in program.commands
}


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_command_states_its_exit_status(name: str) -> None:
    program, command = SUBCOMMANDS[name]
    assert "exit status" in " ".join(_help(program, [command], 1000).split()).lower()


@pytest.mark.parametrize("program", [gen.main, plugin.main], ids=["cdi-gen", "cdi-plugin"])
def test_the_list_of_commands_cuts_no_summary(program: click.Group) -> None:
    commands = _help(program, [], 80).partition("Commands:\n")[2]
    assert commands.count("\n") >= len(program.commands)
    assert "..." not in commands
