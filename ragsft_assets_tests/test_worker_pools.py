"""worker_pools: a finished pool is closed and joined, a failed one terminated, and its workers die on
SIGTERM even when the process that started them ignores it (the cause of a hung CI run)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragsft_assets.worker_pools import closing_pool, run_apart, start_pool


def _square(x: int) -> int:
    return x * x


@pytest.fixture
def pool() -> Iterator[multiprocessing.pool.Pool]:
    pool = start_pool(multiprocessing.get_context("spawn"), 2)
    workers = list(pool._pool)  # the worker processes: never left behind, whatever the test did
    yield pool
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join()


def test_a_finished_pool_is_joined_not_terminated(
    pool: multiprocessing.pool.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = list(pool._pool)
    terminated = []
    monkeypatch.setattr(pool, "terminate", lambda: terminated.append(True))
    with closing_pool(pool) as p:
        assert p.map(_square, range(5)) == [0, 1, 4, 9, 16]
    assert terminated == []
    # Closed and joined: each worker left its loop and exited 0 (terminate() would give -SIGTERM).
    assert [w.exitcode for w in workers] == [0, 0]


def test_a_failed_block_terminates_the_pool_and_raises(
    pool: multiprocessing.pool.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = list(pool._pool)
    terminate = pool.terminate
    terminated = []
    monkeypatch.setattr(pool, "terminate", lambda: (terminated.append(True), terminate()))
    # Workers up first: one still starting has not yet restored SIGTERM (see the last test) if the suite
    # runs in a process that ignores it.
    assert pool.map(_square, range(2)) == [0, 1]
    with pytest.raises(KeyError, match="boom"), closing_pool(pool):
        raise KeyError("boom")
    assert terminated == [True]
    assert all(not w.is_alive() for w in workers)


def _sigterm_action(_: int) -> int:
    return int(signal.getsignal(signal.SIGTERM))


def test_workers_die_on_sigterm_even_when_their_starter_ignores_it() -> None:
    # Ignored signals survive exec: without the reset, workers started now ignore terminate()'s SIGTERM,
    # and terminate() waits forever for a worker blocked on the task queue's lock (it held by terminate).
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        pool = start_pool(multiprocessing.get_context("spawn"), 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    with closing_pool(pool):
        assert pool.map(_sigterm_action, range(4), 1) == [int(signal.SIG_DFL)] * 4


def _ignore_sigterm_and_sleep(marker: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(marker).touch()
    time.sleep(600)


def test_a_failed_block_never_hangs_on_a_worker_that_ignores_sigterm(
    pool: multiprocessing.pool.Pool, tmp_path: Path
) -> None:
    # Stands in for a worker terminated before it restored SIGTERM: Pool.terminate() alone joins it
    # forever (here: for the 600 s of its task), the bounded terminate kills it after the grace period.
    markers = [tmp_path / "a", tmp_path / "b"]
    pool.map_async(_ignore_sigterm_and_sleep, [str(m) for m in markers], 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(m.exists() for m in markers):
        time.sleep(0.05)
    assert all(m.exists() for m in markers), "the workers never started their tasks"
    workers = list(pool._pool)
    raised: list[BaseException] = []

    def fail_inside_the_pool() -> None:
        try:
            with closing_pool(pool, terminate_grace_s=0.5):
                raise KeyError("boom")
        except KeyError as e:
            raised.append(e)

    block = threading.Thread(target=fail_inside_the_pool, daemon=True)
    block.start()
    block.join(120)
    assert not block.is_alive(), "closing_pool hung on workers that ignore SIGTERM"
    assert len(raised) == 1
    assert [w.exitcode for w in workers] == [-signal.SIGKILL, -signal.SIGKILL]


def test_the_fork_server_preloads_what_every_stage_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.forkserver as fs

    from ragsft_assets import worker_pools
    from ragsft_assets.corpus import build
    from ragsft_assets.multihop import retrieval

    monkeypatch.setattr(worker_pools, "_PRELOAD", [])
    monkeypatch.setattr(fs._forkserver, "_preload_modules", list(fs._forkserver._preload_modules))
    build.worker_context()
    ctx = retrieval.worker_context()
    assert ctx.get_start_method() == "forkserver"  # never fork
    # The union, each once, in the order asked: a second stage does not replace the first one's list.
    assert fs._forkserver._preload_modules == [*build.WORKER_PRELOAD, "ragsft_assets.multihop.retrieval"]


def _rss_kept_after_a_100mb_array(_: int) -> int:
    """MB of resident memory a freed 100 MB array leaves behind in this worker."""
    import numpy as np

    def rss_mb() -> int:
        status = Path("/proc/self/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) // 1024

    before = rss_mb()
    block = np.ones(100 << 17)  # 100 MiB of float64, every page touched
    del block
    return rss_mb() - before


def test_a_pool_can_start_its_workers_with_a_raised_mmap_threshold() -> None:
    # Below the threshold a freed block stays in malloc's heap for the next batch; above it (the
    # default, in a fresh worker) each block is a new mmap, unmapped on free and faulted in again.
    import platform

    if not Path("/proc/self/status").exists() or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc on Linux only: mallopt and /proc/self/status")
    kept = {}
    for threshold in (None, 256 << 20):
        with closing_pool(start_pool(multiprocessing.get_context("spawn"), 1, mmap_threshold=threshold)) as p:
            kept[threshold] = p.map(_rss_kept_after_a_100mb_array, [0])[0]
    assert kept[None] < 20 and kept[256 << 20] > 80, kept


def _where_and_how_nice(tag: str) -> tuple[str, int, int]:
    return tag, os.getpid(), os.nice(0)


def _fails() -> None:
    raise ValueError("the search found nothing to search")


def test_run_apart_runs_the_function_in_another_process_niced_and_returns_its_result() -> None:
    # the distractor search beside a stream: another process (its own GIL), yielding its core first
    tag, pid, niceness = run_apart(_where_and_how_nice, "searched", nice=5)
    assert tag == "searched"
    assert pid != os.getpid()
    assert niceness == os.nice(0) + 5


def test_run_apart_raises_what_the_function_raised() -> None:
    with pytest.raises(ValueError, match="nothing to search"):
        run_apart(_fails)
