"""The configuration's schema check in a child process: the verdicts and messages of the check in
the process, documents that cross the pipe exactly, and a child that fails makes a one-line error."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.errors import ConfigError, SpecLoadError
from cdi_plugin.process import check_config_in_child
from cdi_plugin.scan.configfollow import ConfigFollower
from cdi_plugin.store import configcheck
from cdi_plugin.store.configfile import parse_config

GOOD = """\
classes:
  - vendor: cdi-plugin.io
    class: fuse
    match: {subsystem: misc, kernel: fuse}
plugin:
  replicas: 2
  gracePeriod: 1m
"""

#: Valid and invalid documents, among them the values JSON must carry exactly.
DOCUMENTS = [
    GOOD,
    "plugin: {replicas: 0}\n",
    "plugin: {replicas: .nan}\n",
    "plugin: {replicas: .inf}\n",
    "plugin: {replicas: -.inf}\n",
    "plugin: {replicas: -0.0}\n",
    "plugin: {replicas: 2.5e-308}\n",
    f"plugin: {{replicas: {'9' * 64}}}\n",
    f"plugin: {{replicas: -{'9' * 63}}}\n",
    "plugin: {replicas: 0x10, gracePeriod: 1.5e+2}\n",
    "plugin: {replicas: true}\n",
    "plugin: {replicas: ~}\n",
    "plugin: {replicas: '3'}\n",
    "plugin: {gracePeriod: 2024-01-01}\n",
    "plugin: {specDirs: ['/etc/cdi', \"/\\u00e9t\\u00e9/\\U0001F600\", 'x\\ty']}\n",
    "plugin: {bogus: 1, other: [1, 2], ünïcödé: {}}\n",
    "classes: [{vendor: cdi-plugin.io, class: x, match: {subsystem: misc}, extra: 1, more: 2}]\n",
    "classes:\n  - {vendor: 'Bad Vendor', class: '', match: {}}\n  - 7\n",
    "classes: {}\nplugin: []\n",
    "unknown: 1\n",
]


@pytest.fixture
def in_child(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The check in a child process, as ``cdi-plugin serve`` runs it; nothing remembered."""
    monkeypatch.setattr(configcheck, "_last", {})
    check_config_in_child()
    yield
    check_config_in_child(False)


def _verdict(text: str) -> tuple[str, list[Any]] | dict[str, Any]:
    try:
        return parse_config(text.encode(), "c.yaml")
    except ConfigError as exc:
        return str(exc), list(exc.problems)


@pytest.mark.parametrize("text", DOCUMENTS)
def test_the_child_gives_the_verdicts_and_messages_of_the_check_in_the_process(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = _verdict(text)
    monkeypatch.setattr(configcheck, "_last", {})
    check_config_in_child()
    try:
        there = _verdict(text)
    finally:
        check_config_in_child(False)
    assert repr(there) == repr(here)


def test_two_of_the_documents_above_are_valid() -> None:
    valid = [text for text in DOCUMENTS if isinstance(_verdict(text), dict)]
    assert valid == [GOOD, "plugin: {replicas: 0x10, gracePeriod: 1.5e+2}\n"]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_a_parsed_document_crosses_the_pipe_exactly(text: str) -> None:
    document, _ = codec.parse(text.encode(), "c.yaml", "yaml")
    crossed = configcheck.decode(configcheck.encode(document))
    assert repr(crossed) == repr(document)  # nan, -0.0, big integers, bools apart from 1, key order
    assert configcheck.encode(document).isascii()


def test_lone_surrogates_cross_the_pipe_though_the_parser_refuses_every_surrogate() -> None:
    document = {"plugin": {"specDirs": ["\ud800", "a\udfffb"], "\udc80": "\ude00\ud83d"}}
    assert repr(configcheck.decode(configcheck.encode(document))) == repr(document)
    paired = "\ud83d\ude00"  # a high then a low surrogate: JSON brings back one character
    assert configcheck.decode(configcheck.encode(paired)) == "\U0001f600"
    for escape in ("\\ud800", "\\U0000DFFF", "\\uD83D\\uDE00"):
        with pytest.raises(SpecLoadError, match="invalid Unicode character escape"):
            codec.parse(f'plugin: {{specDirs: ["{escape}"]}}\n'.encode(), "c.yaml", "yaml")


def _count_runs(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Run the real child, noting each start in ``log``."""
    run = (
        f"open({str(log)!r}, 'a').write('run\\n'); import runpy; "
        f"runpy.run_module({configcheck.__name__!r}, run_name='__main__')"
    )
    monkeypatch.setattr(configcheck, "COMMAND", (sys.executable, "-P", "-c", run))


@pytest.mark.usefixtures("in_child")
def test_a_document_checked_again_starts_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "runs"
    _count_runs(monkeypatch, log)
    assert parse_config(GOOD.encode(), "a.yaml") == parse_config(GOOD.encode(), "b.yaml")
    assert log.read_text() == "run\n"
    with pytest.raises(ConfigError, match=r"^a\.yaml: plugin\.replicas: 0 is less than the minimum of 1"):
        parse_config(b"plugin: {replicas: 0}\n", "a.yaml")
    with pytest.raises(ConfigError, match=r"^b\.yaml: plugin\.replicas: 0 is less than the minimum of 1"):
        parse_config(b"plugin: {replicas: 0}\n", "b.yaml")
    parse_config(GOOD.encode(), "a.yaml")
    assert log.read_text() == "run\n" * 2, "the last two documents are kept"
    parse_config(b"plugin: {replicas: 3}\n", "a.yaml")
    with pytest.raises(ConfigError):
        parse_config(b"plugin: {replicas: 0}\n", "a.yaml")
    assert log.read_text() == "run\n" * 4, "the oldest is dropped"


FAILING = {
    "cannot start": (
        ("/nonexistent/python", "-m", "x"),
        "cannot start /nonexistent/python: No such file or directory",
    ),
    "killed": (
        (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        "the checking process was killed by SIGKILL",
    ),
    "fails": (
        (sys.executable, "-c", "raise SystemExit('out of luck\\nfor good')"),
        "the checking process exited with status 1: for good",
    ),
    "garbage": (
        (sys.executable, "-c", "print('[{\"pointer\": 1}]')"),
        "the checking process answered with something else than a list of problems",
    ),
    "not json": (
        (sys.executable, "-c", "print('Traceback')"),
        "the checking process answered with something else than a list of problems",
    ),
    "unknown severity": (
        (sys.executable, "-c", "print('[{\"pointer\": \"\", \"rule\": \"r\", \"severity\": \"fatal\", "
                               "\"message\": \"m\", \"hint\": \"\"}]')"),
        "the checking process answered with something else than a list of problems",
    ),
    "hangs": (
        (sys.executable, "-c", "import time; time.sleep(60)"),
        "the checking process did not answer within 0.5 s",
    ),
}  # fmt: skip


@pytest.mark.usefixtures("in_child")
@pytest.mark.parametrize("case", FAILING)
def test_a_child_that_gives_no_answer_makes_a_one_line_error_naming_the_file(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, reason = FAILING[case]
    monkeypatch.setattr(configcheck, "COMMAND", command)
    monkeypatch.setattr(configcheck, "TIMEOUT", 0.5)
    with pytest.raises(ConfigError) as raised:
        parse_config(GOOD.encode(), "/etc/cdi-plugin/config.yaml")
    assert str(raised.value) == (
        f"/etc/cdi-plugin/config.yaml: the configuration could not be checked against its schema: {reason}"
    )


@pytest.mark.usefixtures("in_child")
def test_a_reload_whose_check_fails_keeps_the_configuration_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    follower = ConfigFollower(path)
    follower.load()
    assert [c.kind for c in follower.classes] == ["cdi-plugin.io/fuse"]
    path.write_text(GOOD.replace("fuse", "tun"))
    monkeypatch.setattr(configcheck, "COMMAND", FAILING["killed"][0])
    with caplog.at_level(logging.ERROR):
        assert follower.reload() is False
    assert [c.kind for c in follower.classes] == ["cdi-plugin.io/fuse"]
    assert caplog.messages == [
        f"{path}: the configuration could not be checked against its schema: the checking process was "
        "killed by SIGKILL; keeping the last good configuration"
    ]
    monkeypatch.undo()  # the child answers again: the same file is read and applied
    check_config_in_child()
    assert follower.reload() is True
    assert [c.kind for c in follower.classes] == ["cdi-plugin.io/tun"]
