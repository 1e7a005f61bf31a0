"""Start ``cdi-plugin serve`` processes quickly: fork them from one that imported it already.

A fresh interpreter spends about 0.4 s importing the serving code (gRPC, the API client), too long
to start a few hundred times in one test. This process imports it once, then, for each request,
forks a child that runs ``cdi-plugin serve`` with the given arguments: a real serving process,
started from the same code, that never shares anything with the others. Nothing runs in this
process but the imports (no thread, no event loop, no gRPC object), so a fork is safe.

Requests and answers are JSON lines on stdin and stdout:

* ``{"start": [args...], "log": PATH}`` -> ``{"pid": N}``: the child's stderr is appended to PATH;
* ``{"reap": N}`` -> ``{"status": S}``: waits for child N to end (``os.waitpid``'s status).

A child is reaped only when asked, so its pid stays its own until then (the test signals it
through a pidfd). At the end of stdin the children not reaped yet are killed and reaped.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

PRELOAD = (
    "asyncio", "grpc", "cdi_plugin.cli.plugin", "cdi_plugin.cli.logs", "cdi_plugin.cli.service",
    "cdi_plugin.cli.serve_dra", "cdi_plugin.cli.udev_facts", "cdi_plugin.deviceplugin.daemon",
    "cdi_plugin.deviceplugin.settings", "cdi_plugin.metrics", "cdi_plugin.inventory",
    "cdi_plugin.dra.kube", "cdi_plugin.dra.kubelet", "cdi_plugin.dra.publisher",
)  # fmt: skip


def _child(args: list[str], log: str) -> None:
    from cdi_plugin.cli.plugin import main

    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        main.main(args=args, prog_name="cdi-plugin")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _preload() -> None:
    """Import the serving code, including what the API client imports on first use."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as config, contextlib.suppress(Exception):
        config.write(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }))  # fmt: skip
        config.flush()
        from cdi_plugin.dra.kube import KubeApi

        KubeApi.connect("example.com", "node", Path(config.name))  # no request: a client object only


def serve() -> None:
    _preload()
    children: set[int] = set()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "start" in request:
            pid = os.fork()
            if pid == 0:
                _child(request["start"], request["log"])
            children.add(pid)
            answer = {"pid": pid}
        else:
            pid = request["reap"]
            children.discard(pid)
            answer = {"status": os.waitpid(pid, 0)[1]}
        print(json.dumps(answer), flush=True)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    serve()
