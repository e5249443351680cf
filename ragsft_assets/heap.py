"""The C heap of this process: giving back to the system what glibc's malloc keeps after a free,
and the mmap threshold of processes that allocate and free large arrays over and over."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def _glibc(name: str, argtypes: tuple[Any, ...], restype: Any) -> Callable[..., int] | None:
    """The C library's function ``name``, typed; None where the C library has none (not glibc)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return None
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def release_free_memory() -> bool:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim(0)``, which
    releases free memory anywhere in a heap, not only at its top); True when some was released,
    False where it released none or the C library is not glibc. The GIL is released meanwhile.

    glibc keeps what a thread frees for later allocations, and raises its mmap threshold as large
    blocks are freed, so large transient blocks (Arrow buffers, JSON) then come from the heap too:
    in ``bench fleet`` at 20,000 pairs, the arenas held 1,304 MB free against 424 MB in use at the
    multihop stream's peak (``mallinfo2``), the process at 2,424 MB resident.
    """
    trim = _glibc("malloc_trim", (ctypes.c_size_t,), ctypes.c_int)
    return bool(trim(0)) if trim is not None else False


# glibc's malloc serves blocks above its mmap threshold (128 KiB in a new process) with a fresh mmap
# each, page-faulted in and unmapped again on free; it raises the threshold (up to 32 MiB) only as such
# blocks are freed. The retrieval workers allocate arrays of 16-150 MB per query batch (a ~4M-term
# bigram vocabulary, the product's output bound), and in fresh workers their sparse product ran
# 2.3-4x slower than the same code in the parent: two workers searched slower than one process.
# A stage whose workers allocate so passes ``mmap_threshold`` to start_pool (measured, 20,000 queries
# over 100,000 documents: 8.85 s in one process; two workers 10.8 s at the default, 9.8 s at 64 MiB,
# 5.3 s at 256 MiB).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def raise_mmap_threshold(threshold: int) -> bool:
    """Set glibc's mmap threshold to ``threshold`` (and the trim threshold to twice it) in this process.

    Returns False where the C library is not glibc (nothing changes there).
    """
    mallopt = _glibc("mallopt", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    if mallopt is None:  # pragma: no cover - not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, 2 * threshold))
