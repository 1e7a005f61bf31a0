"""What both programs do when their reader goes away (``| head -c1``, before or in the middle of
a write), their stdout is full (``--help`` too) or they are interrupted: no traceback, the status
of an error (1), no error about a pipe closed by its reader, and with ``--json`` still one JSON
document on stdout for an interruption: the whole report, or the error object alone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cdi_plugin.store.dirlock import LOCK_NAME
from tests.cdi.helpers import doc
from tests.cli.conftest import CDI_GEN
from tests.store.specfiles import write_spec
from tests.store.unprivileged import VENV_BIN

CDI_PLUGIN = VENV_BIN / "cdi-plugin"


def run_into_closed_pipe(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run a program whose stdout is a pipe nobody reads any more: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            list(map(str, args)), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, check=False
        )
    finally:
        os.close(write_end)


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    write_spec(tmp_path, "gpu.json", "acme.example/gpu", *(f"card{i}" for i in range(50)))
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        [CDI_GEN, "list", "--spec-dir", "{dir}"],
        [CDI_GEN, "list", "--json", "--spec-dir", "{dir}"],
        [CDI_GEN, "validate", "{dir}"],
        [CDI_GEN, "inspect", "--spec-dir", "{dir}", "acme.example/gpu=card0"],
        [CDI_GEN, "scan", "--print-default-config"],
        [CDI_PLUGIN, "dra-objects", "--only", "rbac"],
    ],
    ids=lambda args: " ".join(map(str, args[1:3])),
)
def test_a_reader_gone_ends_the_command_quietly(spec_dir: Path, args: list[str | Path]) -> None:
    done = run_into_closed_pipe(*(str(a).format(dir=spec_dir) for a in args))
    assert (done.returncode, done.stderr) == (1, "")


@pytest.fixture(scope="module")
def many_kinds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spec directory whose listings, reports and objects are larger than a small pipe's buffer."""
    directory = tmp_path_factory.mktemp("many")
    for i in range(100):
        write_spec(directory, f"gpu{i}.json", f"acme.example/gpu{i}", "null")  # /dev/null
    return directory


#: The names of every device of :func:`many_kinds`, and the options of dra-objects for all its kinds.
MANY_NAMES = [f"acme.example/gpu{i}=null" for i in range(100)]
MANY_OBJECTS = ["--spec-dir", "{dir}", "--kind", "acme.example/*", "--examples"]


@pytest.mark.parametrize("unbuffered", [True, False], ids=["PYTHONUNBUFFERED", "buffered"])
@pytest.mark.parametrize(
    "args",
    [
        [CDI_GEN, "list", "--spec-dir", "{dir}"],
        [CDI_GEN, "list", "--json", "--spec-dir", "{dir}"],
        [CDI_GEN, "validate", "{dir}"],
        [CDI_GEN, "validate", "--json", "{dir}"],
        [CDI_GEN, "inspect", "--json", "--spec-dir", "{dir}", *MANY_NAMES],
        [CDI_GEN, "scan", "--dry-run", "--source", "simulated", "--output-dir", "{dir}/out"],
        [CDI_GEN, "scan", "--json", "--dry-run", "--source", "simulated", "--output-dir", "{dir}/out"],
        [CDI_PLUGIN, "dra-objects", *MANY_OBJECTS],
        [CDI_PLUGIN, "dra-objects", "--json", *MANY_OBJECTS],
    ],
    ids=lambda args: " ".join(map(str, args[1:3])),
)
def test_a_reader_gone_in_the_middle_ends_the_command_quietly(
    many_kinds: Path, args: list[str | Path], unbuffered: bool
) -> None:
    """The reader takes one byte and goes away while the command still writes: the rest of the
    output cannot be written, which is an error (status 1), not a success with output cut."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # the output does not fit: the command must wait
    with os.fdopen(read_end, "rb", buffering=0) as reader:
        proc = subprocess.Popen(
            [str(a).format(dir=many_kinds) for a in args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        os.close(write_end)
        assert reader.read(1)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    program = Path(args[0]).name
    assert [line for line in stderr.splitlines() if not line.startswith(f"{program}: warning: ")] == []


@pytest.mark.parametrize(
    "args",
    [
        [CDI_GEN, "list", "--spec-dir", "{dir}"],
        [CDI_GEN, "validate", "--json", "{dir}"],
        [CDI_GEN, "inspect", "--json", "--spec-dir", "{dir}", "acme.example/gpu=card0"],
        [CDI_GEN, "scan", "--print-default-config"],
        [CDI_PLUGIN, "dra-objects", "--json", "--only", "rbac"],
        [CDI_GEN, "--help"],
        [CDI_PLUGIN, "--version"],
    ],
    ids=lambda args: " ".join(map(str, args[1:3])),
)
def test_a_full_stdout_is_one_error_line(spec_dir: Path, args: list[str | Path]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [str(a).format(dir=spec_dir) for a in args],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    program = Path(args[0]).name
    assert (done.returncode, done.stderr) == (
        1,
        f"{program}: error: cannot write to standard output: No space left on device\n",
    )


def _subcommands() -> list[tuple[Path, str]]:
    from cdi_plugin.cli import gen, plugin

    return [(CDI_GEN, name) for name in gen.main.commands] + [
        (CDI_PLUGIN, name) for name in plugin.main.commands
    ]


@pytest.mark.parametrize(("program", "command"), _subcommands(), ids=lambda v: getattr(v, "name", v))
def test_a_subcommands_help_into_a_full_stdout_is_one_error_line(program: Path, command: str) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [program, command, "--help"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (
        1,
        f"{program.name}: error: cannot write to standard output: No space left on device\n",
    )


#: Runs its arguments with files limited to 10 bytes. A fresh interpreter sets the limit and
#: execs: a ``preexec_fn`` would run in a fork of this process, where gRPC's threads (from other
#: tests) come back in the child and may print their own errors into its stderr before the exec.
_WITH_FILES_OF_10_BYTES = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10)); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.parametrize(
    "args",
    [
        [CDI_GEN, "--help"],
        [CDI_GEN, "--version"],
        [CDI_GEN, "list", "--help"],
        [CDI_PLUGIN, "--help"],
        [CDI_PLUGIN, "--version"],
    ],
    ids=lambda args: " ".join([Path(args[0]).name, *map(str, args[1:])]),
)
def test_help_cut_short_by_a_file_too_small_is_one_error_line(tmp_path: Path, args: list[str | Path]) -> None:
    """A file that takes only the first bytes of the help (the room left on a disk; here, the
    file size limit), without a buffer in the program (PYTHONUNBUFFERED): the rest is written
    again and fails, which is one error line, not a success with the text cut."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "out", "w") as out:
        done = subprocess.run(
            [sys.executable, "-c", _WITH_FILES_OF_10_BYTES, *map(str, args)],
            stdout=out, stderr=subprocess.PIPE, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    program = Path(args[0]).name
    assert (done.returncode, done.stderr) == (
        1,
        f"{program}: error: cannot write to standard output: File too large\n",
    )


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--spec-dir", "rel"],
        ["serve", "--api", "dra", "--kubelet-plugins-dir", "rel"],
        ["dra-objects", "--spec-dir", "rel"],
    ],
    ids=lambda a: a[-2],
)
def test_a_relative_path_in_a_removed_current_directory_is_a_usage_error(
    tmp_path: Path, args: list[str]
) -> None:
    """Not taken for a failed write (its --help prints through the same parsing), nor a traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        ["sh", "-c", 'cd "$0" && rmdir "$0" && exec "$@"', gone, CDI_PLUGIN, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(
        f"Error: Invalid value for '{args[-2]}': rel: relative, and the current directory cannot be "
        "read: No such file or directory\n"
    )
    assert "Traceback" not in done.stderr
    assert not done.stdout


def test_a_usage_error_is_told_on_stderr_when_stdout_is_gone() -> None:
    done = run_into_closed_pipe(CDI_GEN, "list", "--json", "--no-such-option")
    assert done.returncode == 2
    assert done.stderr.endswith("Error: No such option '--no-such-option'.\n")


def _has_open(pid: int, name: str) -> bool:
    """Whether process ``pid`` holds a file called ``name`` open."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fds):
        with contextlib.suppress(FileNotFoundError):  # closed since it was listed
            if os.readlink(fds / fd).endswith(f"/{name}"):
                return True
    return False


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_an_interrupted_scan_is_one_error(tmp_path: Path, as_json: bool) -> None:
    """SIGINT while the scan waits for the lock another scan holds."""
    out = tmp_path / "out"
    out.mkdir()
    lock = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    json_arg = ["--json"] if as_json else []
    args = [str(CDI_GEN), "scan", *json_arg, "--source", "simulated", "--output-dir", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _has_open(proc.pid, LOCK_NAME):
            assert proc.poll() is None, "the scan ended without waiting for the lock"
            assert time.monotonic() < deadline, "the scan never waited for the lock"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        os.close(lock)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert stderr.endswith("cdi-gen: error: interrupted\n")
    assert "Traceback" not in stderr
    if as_json:
        assert json.loads(stdout) == {"error": "interrupted"}
    else:
        assert stdout == ""
    assert os.listdir(out) == [LOCK_NAME]


def _waits_to_write_into_a_pipe(pid: int) -> bool:
    """Whether process ``pid`` waits in the kernel's pipe_write (anon_pipe_write since Linux 6.14)."""
    return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()


def _interrupted_in_a_full_pipe(
    command: list[str], env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``command`` into a pipe of 4 KiB, too small for its output; once it waits to write
    there, SIGINT it, then read everything: its status, stdout and stderr."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    with os.fdopen(read_end, "r") as reader:
        proc = subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE, text=True, env=env)
        os.close(write_end)
        try:
            _wait_for(lambda: _waits_to_write_into_a_pipe(proc.pid), proc, "it waits to write")
            proc.send_signal(signal.SIGINT)
            stdout = reader.read()
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize(
    "args",
    [
        [CDI_GEN, "list", "--json", "--spec-dir", "{dir}"],
        [CDI_GEN, "validate", "--json", "{dir}"],
        [CDI_GEN, "inspect", "--json", "--spec-dir", "{dir}", *MANY_NAMES],
        [CDI_PLUGIN, "dra-objects", "--json", *MANY_OBJECTS],
    ],
    ids=lambda args: " ".join(map(str, args[1:3])),
)
def test_an_interruption_while_a_report_is_written_leaves_it_whole(
    many_kinds: Path, args: list[str | Path]
) -> None:
    """SIGINT while the report waits to go into a full pipe: the report is written whole, with
    no error object after it, and the command ends as interrupted."""
    command = [str(a).format(dir=many_kinds) for a in args]
    whole = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    returncode, stdout, stderr = _interrupted_in_a_full_pipe(command)
    assert returncode == 1
    assert stderr == f"{Path(args[0]).name}: error: interrupted\n"
    assert stdout == whole


@pytest.mark.parametrize("unbuffered", [True, False], ids=["PYTHONUNBUFFERED", "buffered"])
def test_an_interruption_while_text_is_written_ends_it_at_a_line(tmp_path: Path, unbuffered: bool) -> None:
    """SIGINT while a table larger than the pipe waits to go into it: the table is written whole,
    so that the error starts on a line of its own where both streams meet (a terminal)."""
    (tmp_path / "env.json").write_text(json.dumps(doc(edits={"env": ["=x"] * 150})))
    command = [str(CDI_GEN), "validate", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    whole = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env).stdout
    returncode, stdout, stderr = _interrupted_in_a_full_pipe(command, env)
    assert (returncode, stderr) == (1, "cdi-gen: error: interrupted\n")
    assert len(stdout) > 4096, "interrupted before the table"
    assert whole.startswith(stdout)
    assert stdout.endswith("\n")


def _took_the_signal(pid: int) -> bool:
    """Whether process ``pid`` took the SIGINT sent (none pending) and waits to write again."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return not any(mask & 1 << (signal.SIGINT - 1) for mask in pending) and _waits_to_write_into_a_pipe(pid)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_second_interruption_ends_a_write_its_reader_never_takes(tmp_path: Path, as_json: bool) -> None:
    """SIGINT is held while output is written, but a reader that never reads (stopped, or a pager
    that ignores SIGINT) must not make Ctrl-C useless: a second one ends the command at once,
    what is left of the output dropped."""
    (tmp_path / "env.json").write_text(json.dumps(doc(edits={"env": ["=x"] * 150})))
    command = [str(CDI_GEN), "validate", *(["--json"] if as_json else []), str(tmp_path)]
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # the output does not fit, and is never read
    with os.fdopen(read_end, "r") as reader:
        proc = subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
        os.close(write_end)
        try:
            for _ in range(2):
                deadline = time.monotonic() + 60
                while not _took_the_signal(proc.pid):
                    assert proc.poll() is None, "the command ended after a single SIGINT"
                    assert time.monotonic() < deadline, "no SIGINT taken while waiting to write"
                    time.sleep(0.01)
                proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
            assert len(reader.read()) <= 4096
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert (proc.returncode, stderr) == (1, "cdi-gen: error: interrupted\n")


#: Writes a document, and on the SIGINT held meanwhile more (as an error, a flush at exit would).
_WRITES_TWICE = """
import sys
from cdi_plugin.cli.output import buffer_stdout, write_document
buffer_stdout()
try:
    write_document("a" * 6000)
except KeyboardInterrupt:
    try:
        sys.stdout.write("b" * 100000)
        sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit("interrupted twice")
"""


def test_the_interruption_after_one_held_is_given_at_once() -> None:
    """The first SIGINT, held while a document is written, comes out once it is: what the command
    then writes (an error, what is left to flush at exit) does not hold the second one, which a
    reader that stopped reading would make wait for ever."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    command = [str(VENV_BIN / "python"), "-c", _WRITES_TWICE]
    proc = subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    try:
        _wait_for(lambda: _took_the_signal(proc.pid), proc, "the document waits to be read")
        proc.send_signal(signal.SIGINT)
        document = b""
        while len(document) < 6000 and (chunk := os.read(read_end, 6000 - len(document))):
            document += chunk
        assert document == b"a" * 6000
        _wait_for(
            lambda: _unread(read_end) > 0 and _took_the_signal(proc.pid), proc, "more waits"
        )  # no a left
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, stderr) == (1, "interrupted twice\n")


def _unread(fd: int) -> int:
    """The bytes waiting in the pipe whose read end is ``fd``."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"ended before {what}"
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_locale_without_utf8_gets_escapes_not_an_error(tmp_path: Path) -> None:
    """The C locale of a Python without UTF-8 mode: stdout is ASCII. A name from a spec that
    ASCII lacks is escaped, and the marks of validate are ASCII."""
    write_spec(tmp_path, "gpu.json", "acme.example/gpu", "card0")
    edits = {"deviceNodes": [{"path": "/dev/null"}]}
    bad = {
        "cdiVersion": "0.3.0",
        "kind": "acme.example/nic",
        "devices": [{"name": "cärd0", "containerEdits": edits}],
    }
    (tmp_path / "nic.json").write_text(json.dumps(bad))
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "COLUMNS": "200"}
    env.pop("PYTHONIOENCODING", None)
    runs = {
        command: subprocess.run(
            [str(CDI_GEN), command, *(["--spec-dir"] if command == "list" else []), str(tmp_path)],
            capture_output=True, text=True, encoding="ascii", timeout=60, check=False, env=env,
        )
        for command in ("validate", "list")
    }  # fmt: skip
    validate, listing = runs["validate"].stdout.splitlines(), runs["list"].stderr
    assert runs["validate"].returncode == runs["list"].returncode == 1, runs["validate"].stderr
    assert validate[0].startswith(f"+ {tmp_path}/gpu.json  ")
    assert validate[1] == f"x {tmp_path}/nic.json"
    assert any("invalid device name 'c\\xe4rd0'" in line for line in validate)
    assert "invalid device name 'c\\xe4rd0'" in listing


def test_an_interruption_adds_the_error_object_unless_its_own_command_wrote_a_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process (click's runner), a document written by an earlier command does not keep a
    later command's interruption from being told on stdout."""
    from click.testing import CliRunner

    from cdi_plugin.cli import gen
    from cdi_plugin.store import files

    runner = CliRunner()
    first = runner.invoke(gen.main, ["list", "--json", "--spec-dir", str(tmp_path)])
    assert (first.exit_code, json.loads(first.stdout)["devices"]) == (0, [])

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "scan_spec_dir", interrupted)
    second = runner.invoke(gen.main, ["list", "--json", "--spec-dir", str(tmp_path)])
    assert (second.exit_code, second.stdout) == (1, '{"error": "interrupted"}\n')
