"""Public names of a package imported on first use (PEP 562), so that importing the package
loads none of the libraries its modules need (gRPC, prometheus_client, inotify, the Kubernetes
client) and a process pays only for the modules it uses.

A package lists its names in ``__all__``, imports them under ``if TYPE_CHECKING:`` for type
checkers and sets ``__getattr__ = exports(__name__, {module: names})`` in its ``else:`` branch,
which type checkers do not see (so a misspelt name stays an error for them);
tests/test_packages.py keeps the three in agreement.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def exports(package: str, homes: Mapping[str, Iterable[str]]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each name of ``homes[module]`` is imported from
    ``package.module`` when first asked for, then kept in the package."""
    home = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
