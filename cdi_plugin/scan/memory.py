"""Giving memory back to the system after a large transient job (a full scan).

CPython frees the objects of such a job, but the C allocator keeps the freed pages for reuse,
most of them in the arena of the worker thread that did the job; glibc's ``malloc_trim`` returns
them. Where the C library has no ``malloc_trim`` (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_memory(*, collect: bool = True) -> bool:
    """Return the allocator's free pages (``collect``: after collecting cyclic garbage, which
    takes a few milliseconds per 100,000 objects); False when it cannot."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))
