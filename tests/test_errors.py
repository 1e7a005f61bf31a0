"""Every exception class of the package sits under one root, and errors.py's tree names each."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import cdi_plugin
from cdi_plugin import errors
from cdi_plugin.errors import CdiPluginError


def _modules() -> list[str]:
    """Every module of the package but generated code and ``python -m cdi_plugin`` (it runs)."""
    names = [m.name for m in pkgutil.walk_packages(cdi_plugin.__path__, "cdi_plugin.")]
    return [n for n in names if "._proto" not in n and n != "cdi_plugin.__main__"]


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_the_walk_sees_the_modules_that_define_errors() -> None:
    found = _exception_classes()
    assert "cdi_plugin.errors.SpecWriteError" in found
    assert "cdi_plugin.store.plan.ConflictError" in found
    assert "cdi_plugin.deviceplugin.registration.RegistrationError" in found
    assert "cdi_plugin.cdi.codec._Err" in found


def test_every_exception_class_derives_from_the_root() -> None:
    outside = sorted(q for q, cls in _exception_classes().items() if not issubclass(cls, CdiPluginError))
    assert outside == []


def test_the_tree_in_the_docstring_names_every_exception_class() -> None:
    assert errors.__doc__ is not None
    drawn = set(re.findall(r"^[ │]*(?:[├└]── )?(\w+)", errors.__doc__, re.MULTILINE))
    missing = sorted(q for q, cls in _exception_classes().items() if cls.__name__ not in drawn)
    assert missing == []


def test_the_tree_draws_each_class_under_its_real_parent() -> None:
    assert errors.__doc__ is not None
    classes = {cls.__name__: cls for cls in _exception_classes().values()}
    stack: list[tuple[int, str]] = []
    checked = 0
    for line in errors.__doc__.splitlines():
        m = re.match(r"^([ │]*)[├└]── (\w+)", line)
        if m is None:
            if line.strip() == "CdiPluginError":
                stack = [(-1, "CdiPluginError")]
            continue
        depth, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        assert classes[parent] in classes[name].__bases__, f"{name} is drawn under {parent}"
        stack.append((depth, name))
        checked += 1
    assert checked == len(classes) - 1
