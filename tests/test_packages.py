"""Each package curates its public names in ``__init__``: ``__all__`` lists them, the docstring
names each, every name resolves to the object of the module that defines it, and importing a
package alone loads none of the heavy libraries (they come with the modules that need them)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cdi_plugin

#: Libraries a process should load only when it uses them: memory in a DaemonSet, start-up time.
HEAVY = ("grpc", "google.protobuf", "lightkube", "httpx2", "pyudev", "prometheus_client", "asyncinotify")

PACKAGES = sorted(
    m.name
    for m in pkgutil.walk_packages(cdi_plugin.__path__, "cdi_plugin.")
    if m.ispkg and "._proto" not in m.name
)


def _submodules(package: str) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(importlib.import_module(package).__path__)}


def _imported_names(package: str) -> dict[str, str]:
    """Each name the ``__init__`` imports from a module of its own package, at the top level or
    under ``if TYPE_CHECKING``, and that module."""
    tree = ast.parse(Path(importlib.import_module(package).__file__ or "").read_text())
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            body += node.body
    return {
        alias.asname or alias.name: node.module
        for node in body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"{package}.")
        for alias in node.names
    }


def test_the_walk_sees_the_packages() -> None:
    named = [
        "cdi",
        "store",
        "discovery",
        "generate",
        "inventory",
        "aio",
        "metrics",
        "scan",
        "deviceplugin",
        "dra",
        "cli",
    ]
    assert {f"cdi_plugin.{name}" for name in named} <= set(PACKAGES)


@pytest.mark.parametrize("package", ["cdi_plugin", *PACKAGES])
def test_every_name_in_all_resolves_to_the_object_of_its_module(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert exported, f"{package}.__all__ is empty"
    assert len(set(exported)) == len(exported)
    homes = _imported_names(package)
    submodules = _submodules(package) if package != "cdi_plugin" else set()
    for name in exported:
        value = getattr(__import__(package, fromlist=[name]), name)
        if name in homes:
            assert name not in submodules, f"{package}.{name} is also the name of a module"
            assert value is getattr(importlib.import_module(homes[name]), name)
        else:
            assert name in submodules or package == "cdi_plugin", f"{package}.{name} is imported from nowhere"
    assert set(homes) <= set(exported), f"{package} imports names it does not export"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_docstring_names_every_public_name(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if f"``{name}``" not in (module.__doc__ or "")]
    assert not missing, f"{package}'s docstring does not name {missing}"


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    import cdi_plugin.metrics

    with pytest.raises(AttributeError, match=r"module 'cdi_plugin\.metrics' has no attribute 'Nothing'"):
        _ = cdi_plugin.metrics.Nothing  # type: ignore[attr-defined]


def _loaded(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.split()


@pytest.mark.parametrize("package", ["cdi_plugin", *PACKAGES])
def test_importing_a_package_alone_loads_no_heavy_library(package: str) -> None:
    assert _loaded(f"import {package}") == []


@pytest.mark.parametrize(
    ("code", "heavy"),
    [
        ("from cdi_plugin.metrics import Probes, Check", "prometheus_client"),
        ("from cdi_plugin.aio import Pulse, run_until, someone_listens", "asyncinotify"),
        ("from cdi_plugin.deviceplugin import Settings, DeviceState, build_catalog", "grpc"),
        ("from cdi_plugin.dra import Inventory, prepare_claim, build_pool", "lightkube"),
        ("from cdi_plugin.scan import ScanOptions, run_scan", "asyncinotify"),
    ],
)
def test_a_light_name_leaves_its_packages_heavy_library_unloaded(code: str, heavy: str) -> None:
    loaded = _loaded(code)
    assert not [m for m in loaded if m.split(".")[0] == heavy]


def test_a_heavy_name_loads_its_library_when_used() -> None:
    assert "prometheus_client" in _loaded("from cdi_plugin.metrics import PluginMetrics\nPluginMetrics()")
    assert "asyncinotify" in _loaded("from cdi_plugin.aio import DirWatch")


ROOT = Path(__file__).resolve().parents[1]


def _top_level() -> list[str]:
    """Every package and top-level module of ``cdi_plugin`` but ``cdi_plugin/__init__``."""
    return sorted(m.name for m in pkgutil.iter_modules(cdi_plugin.__path__))


def test_the_architecture_has_a_row_for_every_package_and_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Module boundaries") :].split("\n## ", 1)[0]
    rows = [
        line.split("|")[1].strip().strip("`").rstrip("/")
        for line in table.splitlines()
        if line.startswith("| `")
    ]
    assert sorted(rows) == _top_level()


def test_the_architecture_quotes_the_layers_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"]
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c.get("containers") == ["cdi_plugin"]
    ]
    assert sorted(m.strip() for layer in layers for m in layer.split("|")) == _top_level()
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    assert "; ".join(layers) + "." in text
