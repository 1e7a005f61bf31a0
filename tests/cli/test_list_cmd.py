"""``cdi-gen list``: what resolves, from which file and priority, and what conflicts or is broken."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.store.files import LINKED_DIR
from tests.cli.conftest import CDI_GEN, Invoke, report, run_cdi_gen, run_on_terminal
from tests.store.specfiles import shared_node_dir, write_spec
from tests.store.unprivileged import run_as_nobody, world_dir


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    etc, run = tmp_path / "etc", tmp_path / "run"
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0", "card1")
    write_spec(etc, "fuse-a.json", "cdi-plugin.io/fuse", "fuse")
    write_spec(etc, "fuse-b.yaml", "cdi-plugin.io/fuse", "fuse")
    write_spec(run, "gpu.json", "acme.example/gpu", "card1")
    (run / "broken.json").write_text('{"cdiVersion": "0.3.0"}')
    return etc, run


def test_list_json(cli: Invoke, dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    result = cli("list", "--json", "--spec-dir", etc, "--spec-dir", run)
    assert result.exit_code == 1, "a conflict and a broken file"
    assert report(result) == {
        "dirs": [str(etc), str(run)],
        "skippedDirs": [],
        "devices": [
            {"kind": "acme.example/gpu", "name": "card0", "qualifiedName": "acme.example/gpu=card0",
             "path": str(etc / "gpu.json"), "priority": 0},
            {"kind": "acme.example/gpu", "name": "card1", "qualifiedName": "acme.example/gpu=card1",
             "path": str(run / "gpu.json"), "priority": 1},
        ],
        "conflicts": [
            {"qualifiedName": "cdi-plugin.io/fuse=fuse", "priority": 0,
             "paths": [str(etc / "fuse-a.json"), str(etc / "fuse-b.yaml")]},
        ],
        "broken": [
            {"path": str(run / "broken.json"), "priority": 1,
             "problems": [{"pointer": "/", "rule": "required", "severity": "error",
                           "message": "missing required field 'kind'", "hint": ""}]},
        ],
        "warnings": [],
        "sharedNodes": [],
    }  # fmt: skip


def test_a_host_node_given_by_two_vendors_kinds_is_reported(cli: Invoke, tmp_path: Path) -> None:
    spec_dir = shared_node_dir(tmp_path)
    result = cli("list", "--json", "--spec-dir", spec_dir)
    assert result.exit_code == 0, "a warning"
    assert report(result)["sharedNodes"] == [
        {"hostPath": "/dev/foo", "qualifiedNames": ["example.com/gpu=foo", "mycorp.com/gpu=bar"]}
    ]
    plain = run_cdi_gen("list", "--spec-dir", spec_dir)
    assert plain.returncode == 0
    assert plain.stderr.splitlines() == [
        "shared /dev/foo: given by example.com/gpu=foo and mycorp.com/gpu=bar, of different vendors: "
        "it is handed out under each name (remove the specs of the vendor no longer used)"
    ]


def test_a_host_node_many_devices_give_names_a_few_of_them(cli: Invoke, tmp_path: Path) -> None:
    names = [f"d{i}" for i in range(8)]
    spec = {"cdiVersion": "0.3.0", "kind": "example.com/gpu", "devices": [
        {"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/foo"}]}} for n in names
    ]}  # fmt: skip
    (tmp_path / "example.json").write_text(json.dumps(spec))
    write_spec(tmp_path, "mycorp.json", "mycorp.com/gpu", "foo")
    everyone = [f"example.com/gpu={n}" for n in names] + ["mycorp.com/gpu=foo"]
    assert report(cli("list", "--json", "--spec-dir", tmp_path))["sharedNodes"] == [
        {"hostPath": "/dev/foo", "qualifiedNames": everyone}
    ]
    plain = run_cdi_gen("list", "--spec-dir", tmp_path)
    assert plain.stderr.splitlines() == [
        f"shared /dev/foo: given by {', '.join(everyone[:5])} and 4 more, of different vendors: "
        "it is handed out under each name (remove the specs of the vendor no longer used)"
    ]


def test_list_not_on_a_terminal_prints_plain_rows(cli: Invoke, dirs: tuple[Path, Path]) -> None:
    """No header, tab-separated: qualified name, file, priority, kind, name; the rest on stderr."""
    etc, run = dirs
    result = cli("list", "--spec-dir", etc, "--spec-dir", run)
    assert result.exit_code == 1
    assert result.stdout == (
        f"acme.example/gpu=card0\t{etc / 'gpu.json'}\t0\tacme.example/gpu\tcard0\n"
        f"acme.example/gpu=card1\t{run / 'gpu.json'}\t1\tacme.example/gpu\tcard1\n"
    )
    assert result.stderr.splitlines() == [
        f"conflict cdi-plugin.io/fuse=fuse: defined in both {etc / 'fuse-a.json'} and "
        f"{etc / 'fuse-b.yaml'} (priority 0); it does not resolve",
        f"broken {run / 'broken.json'}: /: missing required field 'kind'",
    ]


def test_list_with_nothing_to_show(cli: Invoke, tmp_path: Path) -> None:
    result = cli("list", "--spec-dir", tmp_path)
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == f"no resolvable devices in {tmp_path}\n"
    assert report(cli("list", "--json", "--spec-dir", tmp_path)) == {
        "dirs": [str(tmp_path)],
        "skippedDirs": [],
        "devices": [],
        "conflicts": [],
        "broken": [],
        "warnings": [],
        "sharedNodes": [],
    }


def test_a_file_with_only_warnings_resolves_and_is_not_broken(cli: Invoke, tmp_path: Path) -> None:
    """A 'v' prefix on cdiVersion: the CDI Go library accepts it, so the devices resolve."""
    path = write_spec(tmp_path, "gpu.json", "acme.example/gpu", "card0")
    path.write_text(path.read_text().replace('"cdiVersion": "0.3.0"', '"cdiVersion": "v0.3.0"'))
    result = cli("list", "--json", "--spec-dir", tmp_path)
    assert result.exit_code == 0
    out = report(result)
    assert [d["qualifiedName"] for d in out["devices"]] == ["acme.example/gpu=card0"]
    assert out["broken"] == []
    [warned] = out["warnings"]
    assert (warned["path"], warned["priority"]) == (str(path), 0)
    assert [(p["rule"], p["severity"]) for p in warned["problems"]] == [("version-prefix", "warning")]
    result = cli("list", "--spec-dir", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == f"acme.example/gpu=card0\t{path}\t0\tacme.example/gpu\tcard0\n"
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning {path}: /cdiVersion: ")


@pytest.mark.parametrize("trouble", ["conflict", "broken"])
def test_a_conflict_or_a_broken_file_exits_1_with_or_without_json(
    cli: Invoke, tmp_path: Path, trouble: str
) -> None:
    write_spec(tmp_path, "gpu.json", "acme.example/gpu", "card0")
    assert [cli("list", *json, "--spec-dir", tmp_path).exit_code for json in ([], ["--json"])] == [0, 0]
    if trouble == "conflict":
        write_spec(tmp_path, "gpu-again.yaml", "acme.example/gpu", "card0")
    else:
        (tmp_path / "zz.json").write_text("{")
    for flag in ([], ["--json"]):
        result = cli("list", *flag, "--spec-dir", tmp_path)
        assert result.exit_code == 1, result.output
    out = report(result)
    assert (len(out["conflicts"]), len(out["broken"])) == ((1, 0) if trouble == "conflict" else (0, 1))


def test_a_missing_spec_dir_named_on_the_command_line_is_an_error(cli: Invoke, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    message = f"--spec-dir {missing}: no such directory"
    for args, stdout in (
        (["--spec-dir", missing], ""),
        (["--json", "--spec-dir", tmp_path, "--spec-dir", missing], '{"error": "' + message + '"}\n'),
    ):
        result = cli("list", *args)
        assert (result.exit_code, result.stdout) == (1, stdout)
        assert result.stderr == f"cdi-gen: error: {message}\n"


def test_missing_default_spec_dirs_hold_no_devices(cli: Invoke, private_spec_dirs: tuple[Path, Path]) -> None:
    result = cli("list")
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == f"no resolvable devices in {private_spec_dirs[0]}, {private_spec_dirs[1]}\n"


def test_a_spec_dir_that_is_a_symbolic_link_overrides_nothing(tmp_path: Path) -> None:
    """The CDI library reads nothing from a spec directory that is a link: a name it would
    override still resolves from the directory of lower priority."""
    etc, run = tmp_path / "etc", tmp_path / "run"
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0", "card1")
    write_spec(tmp_path / "real-run", "gpu.json", "acme.example/gpu", "card1")
    run.symlink_to("real-run")
    result = run_cdi_gen("list", "--json", "--spec-dir", etc, "--spec-dir", run)
    assert result.returncode == 0
    assert [(d["qualifiedName"], d["path"]) for d in report(result)["devices"]] == [
        ("acme.example/gpu=card0", str(etc / "gpu.json")),
        ("acme.example/gpu=card1", str(etc / "gpu.json")),
    ]
    assert result.stderr == f"cdi-gen: warning: skipping spec directory {run}: {LINKED_DIR}\n"
    assert report(result)["skippedDirs"] == [
        {"path": str(run), "priority": 1,
         "problems": [{"pointer": "", "rule": "not-a-directory", "severity": "warning", "message": LINKED_DIR,
                       "hint": ""}]},
    ]  # fmt: skip


def test_each_spec_dir_is_listed_once(cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A report made of two listings of a directory could tell of two states of it (a file
    added in between, a directory replaced by a link): each is opened for listing once."""
    etc, run, plain = tmp_path / "etc", tmp_path / "run", tmp_path / "plain"
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0")
    write_spec(tmp_path / "real-run", "nic.json", "acme.example/nic", "nic0")
    run.symlink_to("real-run")
    plain.write_text("")
    listed: Counter[str] = Counter()
    real_open = os.open

    def counting_open(path: str | Path, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_DIRECTORY:
            listed[str(path)] += 1
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setenv("CDI_SPEC_DIRS", f"{etc}:{run}:{plain}")  # --spec-dir refuses a file
    monkeypatch.setattr(os, "open", counting_open)
    result = cli("list", "--json")
    assert result.exit_code == 0, result.output
    assert [d["qualifiedName"] for d in report(result)["devices"]] == ["acme.example/gpu=card0"]
    assert listed == {str(etc): 1, str(run): 1, str(plain): 1}


def test_a_spec_dir_that_is_a_file_is_skipped(cli: Invoke, private_spec_dirs: tuple[Path, Path]) -> None:
    etc, run = private_spec_dirs
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0")
    run.write_text("")
    result = cli("list", "--json")
    assert result.exit_code == 0
    listed = report(result)
    assert [d["qualifiedName"] for d in listed["devices"]] == ["acme.example/gpu=card0"]
    assert [
        (d["path"], d["priority"], [(p["severity"], p["message"]) for p in d["problems"]])
        for d in listed["skippedDirs"]
    ] == [(str(run), 1, [("warning", "is a regular file, not a directory")])]


@pytest.mark.root
def test_an_unreadable_spec_dir_is_broken_and_exits_1() -> None:
    """A runtime (root) may resolve names from a directory this user cannot read: the listing
    lacks them, so it does not pass for complete."""
    with world_dir() as d:
        readable, private = d / "etc", d / "run"
        write_spec(readable, "gpu.json", "acme.example/gpu", "card0")
        write_spec(private, "gpu.json", "acme.example/gpu", "card1")
        private.chmod(0o700)
        plain = run_as_nobody([str(CDI_GEN), "list", "--spec-dir", str(readable), "--spec-dir", str(private)])
        done = run_as_nobody(
            [str(CDI_GEN), "list", "--json", "--spec-dir", str(readable), "--spec-dir", str(private)]
        )
    assert (plain.returncode, plain.stdout) == (
        1,
        f"acme.example/gpu=card0\t{readable}/gpu.json\t0\tacme.example/gpu\tcard0\n",
    )
    assert f"broken {private}: permission denied\n" in plain.stderr
    assert done.returncode == 1, done.stderr
    listed = report(done)
    assert [d["qualifiedName"] for d in listed["devices"]] == ["acme.example/gpu=card0"]
    [broken] = listed["broken"]
    assert (broken["path"], broken["priority"]) == (str(private), 1)
    assert [(p["rule"], p["severity"], p["message"]) for p in broken["problems"]] == [
        ("unreadable", "error", "permission denied")
    ]


def test_a_directory_named_twice_in_cdi_spec_dirs_has_the_priority_of_its_last_place(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CDI library gives each entry of its directory list the priority of its index: with
    a:b:a, a name both define resolves from a."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_spec(a, "gpu.json", "acme.example/gpu", "card0")
    write_spec(b, "gpu.json", "acme.example/gpu", "card0")
    monkeypatch.setenv("CDI_SPEC_DIRS", f"{a}:{b}:{a}")
    result = cli("list", "--json")
    assert result.exit_code == 0
    assert [d["path"] for d in report(result)["devices"]] == [str(a / "gpu.json")]


def test_list_as_a_real_program(dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    done = run_cdi_gen("list", "--json", "--spec-dir", etc, "--spec-dir", run)
    assert done.returncode == 1, done.stderr
    assert [d["qualifiedName"] for d in report(done)["devices"]] == [
        "acme.example/gpu=card0",
        "acme.example/gpu=card1",
    ]


#: 59 characters, as long as a USB serial adapter's name gets.
SERIAL = "cdi-plugin.io/serial=usb-FTDI_FT232R_USB_UART_A50285BI-if00"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A spec directory whose path has a fixed length (28 characters with the longest file name),
    so that the columns' widths are known; pytest's tmp_path varies in length."""
    directory = Path(tempfile.mkdtemp(prefix="cdi", dir="/tmp"))
    try:
        assert len(str(directory)) == 16
        write_spec(directory, "serial.json", "cdi-plugin.io/serial", SERIAL.partition("=")[2])
        write_spec(directory, "gpu.json", "acme.example/gpu", "card0")
        yield directory
    finally:
        shutil.rmtree(directory)


def test_list_on_a_200_column_terminal_shows_every_column(short_dir: Path) -> None:
    status, lines, stderr = run_on_terminal("list", "--spec-dir", short_dir, columns=200)
    assert (status, stderr) == (0, "")
    assert [line.split() for line in lines] == [
        ["qualified", "name", "file", "priority", "kind", "name"],
        ["acme.example/gpu=card0", str(short_dir / "gpu.json"), "0", "acme.example/gpu", "card0"],
        [SERIAL, str(short_dir / "serial.json"), "0", "cdi-plugin.io/serial", SERIAL.partition("=")[2]],
    ]
    assert lines[2].startswith(SERIAL + "  ")
    assert max(map(len, lines)) <= 200


def test_list_on_an_80_column_terminal_folds_the_file_column_not_the_names(short_dir: Path) -> None:
    """The qualified names, 59 wide, and the files, 30, do not fit 80 side by side: the name and
    kind columns (which the qualified name holds) and the priority go, the file folds."""
    status, lines, stderr = run_on_terminal("list", "--spec-dir", short_dir, columns=80)
    assert (status, stderr) == (0, "")
    assert max(map(len, lines)) <= 80
    names = [line[:59].rstrip() for line in lines]
    files = [line[61:].rstrip() for line in lines]
    assert names == ["qualified name", "acme.example/gpu=card0", "", SERIAL, ""]
    assert files[0] == "file"
    assert "".join(files[1:3]) == str(short_dir / "gpu.json")
    assert "".join(files[3:5]) == str(short_dir / "serial.json")
    assert "priority" not in lines[0]


def test_list_on_a_60_column_terminal_shows_whole_names_only(short_dir: Path) -> None:
    status, lines, stderr = run_on_terminal("list", "--spec-dir", short_dir, columns=60)
    assert (status, stderr) == (0, "")
    assert lines == ["acme.example/gpu=card0", SERIAL]


def test_a_name_wider_than_the_terminal_is_printed_whole(short_dir: Path) -> None:
    long_name = "acme.example/gpu=" + "x" * 70
    write_spec(short_dir, "gpu.json", "acme.example/gpu", long_name.partition("=")[2])
    status, lines, _ = run_on_terminal("list", "--spec-dir", short_dir, columns=60)
    assert status == 0
    assert lines == [long_name, SERIAL], "one line each: only the terminal wraps it"


def test_list_on_a_terminal_shows_conflicts_and_broken_files_and_exits_1(short_dir: Path) -> None:
    write_spec(short_dir, "gpu-again.json", "acme.example/gpu", "card0")
    (short_dir / "zz.json").write_text("{")
    status, lines, stderr = run_on_terminal("list", "--spec-dir", short_dir, columns=200)
    assert (status, stderr) == (1, "")
    assert [line.split()[0] for line in lines[:2]] == ["qualified", SERIAL]
    conflict = (
        f"conflict acme.example/gpu=card0: defined in both {short_dir / 'gpu-again.json'} and "
        f"{short_dir / 'gpu.json'} (priority 0); it does not resolve"
    )
    assert conflict in lines
    assert f"broken {short_dir / 'zz.json'}" in lines


def test_list_piped_prints_tab_separated_rows(short_dir: Path) -> None:
    (short_dir / "zz.json").write_text("{")
    done = run_cdi_gen("list", "--spec-dir", short_dir)
    assert done.returncode == 1
    assert [line.split("\t") for line in done.stdout.splitlines()] == [
        ["acme.example/gpu=card0", str(short_dir / "gpu.json"), "0", "acme.example/gpu", "card0"],
        [SERIAL, str(short_dir / "serial.json"), "0", "cdi-plugin.io/serial", SERIAL.partition("=")[2]],
    ]
    [broken] = done.stderr.splitlines()
    assert broken.startswith(f"broken {short_dir / 'zz.json'}: ")


def test_a_file_name_with_a_tab_or_newline_stays_one_field_of_one_row(cli: Invoke, tmp_path: Path) -> None:
    path = write_spec(tmp_path, "odd\tname\n\\.json", "acme.example/gpu", "card0")
    result = cli("list", "--spec-dir", tmp_path)
    assert result.exit_code == 0
    escaped = str(path.parent) + "/odd\\tname\\n\\\\.json"
    assert result.stdout.splitlines() == [f"acme.example/gpu=card0\t{escaped}\t0\tacme.example/gpu\tcard0"]
