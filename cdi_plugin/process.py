"""Process-wide settings, made before the libraries they concern are loaded.

:func:`check_config_in_child`: a long-running ``cdi-plugin serve`` checks its configuration
against the schema only when it starts and when it reloads the file, yet jsonschema-rs would stay
in its memory for good (7.4 MiB of library pages, and the compiled schemas). After this call the
check runs in a short-lived child process (:mod:`cdi_plugin.store.configcheck`), which answers
and exits. The default, for ``cdi-gen``, tests and library use, is the check in the process.

:func:`forgo_openssl`: a ``cdi-plugin serve`` that speaks only gRPC over unix sockets never uses
TLS, yet OpenSSL would take 4.5 MiB of its memory: asyncio imports :mod:`ssl` whenever it can
(libssl and libcrypto), and :mod:`hashlib` maps libcrypto again for SHA-256. Both are written for
OpenSSL being absent: asyncio then offers no TLS, and hashlib computes SHA-256 (the same digests)
with CPython's own implementation. Marking the two modules as missing in :data:`sys.modules`
(the import system's documented way to make an import fail) keeps OpenSSL out of the process.
"""

from __future__ import annotations

import sys

#: The modules that load OpenSSL: the TLS module and hashlib's OpenSSL back end.
OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")


class _Settings:
    config_check_in_child = False


def check_config_in_child(enabled: bool = True) -> None:
    """Check configuration files against their schema in a child process from now on (or, with
    ``enabled`` false, in this process again). Call it before the first configuration is read."""
    _Settings.config_check_in_child = enabled


def config_checked_in_child() -> bool:
    return _Settings.config_check_in_child


def forgo_openssl() -> bool:
    """Keep OpenSSL out of this process, which will then have no TLS; True if it was done, False
    if a module of :data:`OPENSSL_MODULES` is already loaded (there is nothing left to save).

    Call it only in a process that runs no TLS client or server (a Kubernetes API client, an
    HTTPS endpoint), before asyncio and hashlib are imported.
    """
    if any(name in sys.modules for name in OPENSSL_MODULES):
        return False
    for name in OPENSSL_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ModuleNotFoundError
    return True
