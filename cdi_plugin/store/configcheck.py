"""The configuration's schema check in a short-lived child process, for a long-running process.

jsonschema-rs puts 7.4 MiB of library pages, and the compiled schemas, into every process that
checks a configuration against ``schemas/config.schema.json``; ``cdi-plugin serve`` checks its
configuration only when it starts and when it reloads the file. Once
:func:`cdi_plugin.process.check_config_in_child` was called, :mod:`.configfile` hands the check
to :func:`problems`, which runs ``python -P -m cdi_plugin.store.configcheck``: the child reads
the parsed document as JSON on stdin, computes its problems with
:func:`cdi_plugin.cdi.schema.problems`, the function the in-process check calls, writes them as
JSON on stdout and exits. So the verdicts and messages are the in-process ones by construction,
and this is no helper that stays: once it has answered, no process holds the memory. Each check
costs one process start (about 0.1 s), paid while the configuration is read.

JSON carries every document the configuration's parser lets through exactly: integers of any
size, floats (``NaN`` and ``Infinity`` too, which jsonschema-rs sees as ``null`` either way) and
strings, escaped to ASCII. The parser refuses UTF-16 surrogates, which would not all cross (a
lone one does, a high one followed by a low one comes back as one character).

The answers for the last two documents checked are kept, so that reading the same file again
starts no process: ``serve --scan`` reads it for the plugin and for the scanner, a file without
``classes`` brings in the embedded default classes (the second document), and an event in the
file's directory may find it unchanged.

A child that cannot start, is killed, answers with something else than problems or does not
answer within :data:`TIMEOUT` seconds makes a :class:`ConfigError` naming the file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.errors import ConfigError

#: Seconds the child may take; a check takes about 0.1 s.
TIMEOUT = 10.0
#: The child: this module, run by this interpreter; ``-P`` keeps the working directory out of its
#: import path, so that it imports the same package as this process.
COMMAND: tuple[str, ...] = (sys.executable, "-P", "-m", __name__)

_FIELDS = frozenset(("pointer", "rule", "severity", "message", "hint"))
#: How many documents :data:`_last` keeps.
KEPT = 2
#: The last documents checked and their problems, oldest first.
_last: dict[bytes, tuple[Problem, ...]] = {}


def encode(document: Any) -> bytes:
    """A parsed document as the child reads it (see the module's docstring)."""
    return json.dumps(document, ensure_ascii=True, allow_nan=True).encode()


def decode(data: bytes) -> Any:
    return json.loads(data)


def problems(document: Any, source: str) -> list[Problem]:
    """The schema problems of a parsed configuration, found by a child process; raises
    :class:`ConfigError` naming ``source`` when the child gives no answer."""
    data = encode(document)
    answer = _last.pop(data) if data in _last else _ask(data, source)
    _last[data] = answer
    while len(_last) > KEPT:
        del _last[next(iter(_last))]
    return list(answer)


def _ask(data: bytes, source: str) -> tuple[Problem, ...]:
    def failed(reason: str) -> ConfigError:
        return ConfigError(f"{source}: the configuration could not be checked against its schema: {reason}")

    try:
        done = subprocess.run(COMMAND, input=data, capture_output=True, timeout=TIMEOUT, check=False)
    except OSError as exc:
        raise failed(f"cannot start {COMMAND[0]}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise failed(f"the checking process did not answer within {TIMEOUT:g} s") from None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        raise failed(f"the checking process was killed by {name}")
    if done.returncode != 0:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise failed(f"the checking process exited with status {done.returncode}: {last[0]}")
    try:
        answer = decode(done.stdout)
        if isinstance(answer, list) and all(_is_problem(item) for item in answer):
            return tuple(
                Problem(p["pointer"], p["rule"], p["message"], p["hint"], Severity(p["severity"]))
                for p in answer
            )
    except ValueError:
        pass
    raise failed("the checking process answered with something else than a list of problems")


def _is_problem(item: Any) -> bool:
    return (
        isinstance(item, dict) and item.keys() == _FIELDS and all(isinstance(v, str) for v in item.values())
    )


def main() -> None:
    """The child: a document as JSON on stdin, its problems as JSON on stdout."""
    from cdi_plugin.cdi import schema

    found = schema.problems(decode(sys.stdin.buffer.read()), schema.CONFIG_SCHEMA)
    sys.stdout.write(json.dumps([p.to_json() for p in found], ensure_ascii=True))


if __name__ == "__main__":
    main()
