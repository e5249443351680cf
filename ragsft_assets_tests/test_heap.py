"""Giving the C heap's free pages back (``ragsft_assets.heap``), and the streams that do it."""

from __future__ import annotations

import logging
import platform
import threading
import time

import pytest

from ragsft_assets import heap
from ragsft_assets.defs import streaming


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def test_free_blocks_kept_by_malloc_go_back_to_the_system() -> None:
    # 300 MB of 96-KiB blocks (under glibc's mmap threshold: they come from the heap), one in ten
    # kept so the heap cannot shrink from its top: free() alone leaves the rest resident.
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    heap.release_free_memory()
    blocks = [bytearray(96 * 1024) for _ in range(3200)]  # bytearray writes its pages: resident
    kept = blocks[::10]
    del blocks
    before = _rss_mb()
    assert heap.release_free_memory()
    after = _rss_mb()
    assert before - after > 150, (before, after)
    assert len(kept) == 320


def test_a_running_stream_trims_the_heap_and_once_more_as_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(streaming, "POLL_S", 0.01)
    monkeypatch.setattr(streaming, "TRIM_EVERY_S", 0.05)
    monkeypatch.setattr(
        heap, "release_free_memory", lambda: calls.append(threading.current_thread().name) or True
    )
    stream = streaming.BackgroundStream(
        streaming.StreamCounts(), lines=("a",), log=logging.getLogger("t"), limit=4
    )
    stream.watch()  # no run to watch (finished=None): it still trims
    deadline = time.monotonic() + 5
    while stream.trims < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.trims >= 2 and set(calls) == {"ragsft-stream-watch"}
    stream.join()
    assert calls[-1] == threading.current_thread().name  # the last, as the stream ends
