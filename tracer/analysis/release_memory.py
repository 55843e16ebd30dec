"""Freed heap memory handed back to the system.

A long NumPy pass allocates and frees thousands of temporaries a few hundred KB each. glibc
keeps what is freed in its arenas (one per thread: `diff` runs two passes at once) rather
than returning it, so a process's RSS carries it long after the arrays are gone: about
150 MB per pass on a 200k-step trace. `malloc_trim(0)` returns the free pages of every
arena. Elsewhere (another libc, or none found) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn  # type: ignore[no-any-return]


_TRIM = _malloc_trim()


def trim() -> None:
    """Return the heap's free pages to the system (glibc), else nothing."""
    if _TRIM is not None:
        _TRIM(0)
