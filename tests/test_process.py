"""cdi_plugin.process: OpenSSL kept out of a process, which still has asyncio and SHA-256; the
configuration checked in a child process."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
from cdi_plugin.process import forgo_openssl
print(forgo_openssl())
import asyncio, hashlib
print(hashlib.sha256(b"abc").hexdigest())
print(asyncio.run(asyncio.sleep(0, "asyncio runs")))
try:
    import ssl
except ModuleNotFoundError:
    print("no ssl")
print("libcrypto" if "/libcrypto" in open("/proc/self/maps").read() else "no libcrypto")
"""


def _probe(*first: str) -> list[str]:
    code = "".join(f"import {m}\n" for m in first) + _PROBE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_a_process_that_forgoes_openssl_runs_asyncio_and_computes_the_same_sha256() -> None:
    assert _probe() == [
        "True",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "asyncio runs",
        "no ssl",
        "no libcrypto",
    ]


def test_nothing_is_changed_once_openssl_is_loaded() -> None:
    assert _probe("hashlib") == [
        "False",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "asyncio runs",
        "libcrypto",
    ]


_CONFIG = """
import sys
from cdi_plugin import process
if sys.argv[1:] == ["child"]:
    process.check_config_in_child()
from cdi_plugin.store.configfile import parse_config
print(parse_config(b"plugin: {replicas: 2}", "c.yaml"), "jsonschema_rs" in sys.modules)
"""


def _config_check(*flags: str) -> str:
    done = subprocess.run([sys.executable, "-c", _CONFIG, *flags], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_configuration_is_checked_in_the_process_unless_a_child_process_is_asked_for() -> None:
    assert _config_check() == "{'plugin': {'replicas': 2}} True"
    assert _config_check("child") == "{'plugin': {'replicas': 2}} False"
