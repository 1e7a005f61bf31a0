"""The two programs, on click: ``cdi-gen`` (:mod:`.gen`) and ``cdi-plugin`` (:mod:`.plugin`), each
with a ``main`` entry point. Only the render modules (:mod:`.render`, :mod:`.render_scan`) import
rich.

Public names: the program modules ``gen`` and ``plugin``, imported when asked for, so that
importing the package loads neither click nor the commands.
"""

__all__ = ["gen", "plugin"]
