"""closing_pool: a finished pool is closed and joined (workers exit on their own), a failed one terminated."""

from __future__ import annotations

import multiprocessing

import pytest

from ragsft_assets.worker_pools import closing_pool


def _square(x: int) -> int:
    return x * x


def _pool() -> multiprocessing.pool.Pool:
    return multiprocessing.get_context("spawn").Pool(2)


def test_a_finished_pool_is_joined_not_terminated(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _pool()
    workers = list(pool._pool)  # the worker processes, to read their exit codes afterwards
    terminated = []
    monkeypatch.setattr(pool, "terminate", lambda: terminated.append(True))
    with closing_pool(pool) as p:
        assert p.map(_square, range(5)) == [0, 1, 4, 9, 16]
    assert terminated == []
    # Closed and joined: each worker left its loop and exited 0 (terminate() would give -SIGTERM).
    assert [w.exitcode for w in workers] == [0, 0]


def test_a_failed_block_terminates_the_pool_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _pool()
    workers = list(pool._pool)
    terminate = pool.terminate
    terminated = []
    monkeypatch.setattr(pool, "terminate", lambda: (terminated.append(True), terminate()))
    with pytest.raises(KeyError, match="boom"), closing_pool(pool):
        raise KeyError("boom")
    assert terminated == [True]
    assert all(not w.is_alive() for w in workers)
