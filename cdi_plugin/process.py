"""Process-wide settings, made before the libraries they concern are loaded.

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
