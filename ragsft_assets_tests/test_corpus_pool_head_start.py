"""While the abstracts pool starts, the first chunks run in the calling process: same build as one process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.corpus import build
from ragsft_assets.corpus.abstracts import AbstractsConfig
from ragsft_assets.worker_pools import closing_pool, start_pool
from ragsft_assets_tests.corpus_fixtures import interlinked_records

CFG = AbstractsConfig()


class _SlowStart:
    """A start method whose pools take a while to come up (as a cold fork server does)."""

    def __init__(self, ctx: Any, delay: float) -> None:
        self._ctx, self._delay = ctx, delay

    def Pool(self, workers: int, **kwargs: Any) -> Any:  # noqa: N802 - multiprocessing's name
        time.sleep(self._delay)
        return self._ctx.Pool(workers, **kwargs)


def _slow_initializer(delay: float, initializer: Any, initargs: tuple) -> None:
    time.sleep(delay)
    initializer(*initargs)


class _SlowWorkers(_SlowStart):
    """A start method whose Pool() returns at once, but whose workers take a while to answer (a cold
    fork server still importing its preloads)."""

    def Pool(self, workers: int, initializer: Any = None, initargs: tuple = (), **kwargs: Any) -> Any:  # noqa: N802
        return self._ctx.Pool(
            workers, initializer=_slow_initializer, initargs=(self._delay, initializer, initargs), **kwargs
        )


def test_chunks_run_here_until_a_worker_answers(tmp_path: Path, monkeypatch) -> None:
    """Pool() returning is not the pool being up: this process keeps the chunks until a worker answers."""
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"\n".join(orjson.dumps(r) for r in interlinked_records(40)) + b"\n")
    chunk_bytes = 1500
    n_chunks = len(build._plan_ranges(dump, chunk_bytes))
    real_context = build.worker_context
    # A fork server already up, so that Pool() itself returns at once: only the workers are slow.
    with closing_pool(start_pool(real_context(), 1)) as warm:  # closed and joined, never terminated
        warm.apply(int)
    monkeypatch.setattr(build, "worker_context", lambda: _SlowWorkers(real_context(), 1.0))
    out = tmp_path / "chunks"
    out.mkdir()
    results = list(build._ordered_results(build._tasks([dump], chunk_bytes), CFG, 2, str(out)))
    assert [in_pool for _, _, in_pool in results] == [False] * (n_chunks - 4) + [True] * 4


def test_chunks_run_here_while_the_pool_starts_give_the_same_build(tmp_path: Path, monkeypatch) -> None:
    lines = [orjson.dumps(r) for r in interlinked_records(40)]
    lines[5] = b'{"name": "broken'  # a bad line: its line number depends on the chunk order
    lines[23] = b"[1, 2]"
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"\n".join(lines) + b"\n")
    chunk_bytes = 1500  # about one record a chunk
    alone = build.build_abstracts([dump], CFG, workers=1, chunk_bytes=chunk_bytes)
    n_chunks = len(build._plan_ranges(dump, chunk_bytes))
    assert n_chunks >= 30

    real_context = build.worker_context
    monkeypatch.setattr(build, "worker_context", lambda: _SlowStart(real_context(), 1.0))
    pooled = build.build_abstracts([dump], CFG, workers=2, chunk_bytes=chunk_bytes)

    assert pooled.table.equals(alone.table)
    assert (pooled.funnel, pooled.link_funnel, pooled.rejected) == (
        alone.funnel,
        alone.link_funnel,
        alone.rejected,
    )
    assert pooled.bad_examples == alone.bad_examples and [n for _, n, _, _ in alone.bad_examples] == [6, 24]
    assert pooled.worker_cpu_s > 0

    # Every chunk but the last 2 * workers ran here during the 1 s start, in order; the pool ran those.
    tasks = list(build._tasks([dump], chunk_bytes))
    out = tmp_path / "chunks"
    out.mkdir()
    results = list(build._ordered_results(iter(tasks), CFG, 2, str(out)))
    assert [in_pool for _, _, in_pool in results] == [False] * (n_chunks - 4) + [True] * 4
    for (_, task), (_, res, _) in zip(tasks, results, strict=True):
        assert (res.lines, res.reasons, res.bad) == (lambda r: (r.lines, r.reasons, r.bad))(
            build.run_task(task, CFG)
        )
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(r.path).name for _, r, _ in results if r.path)
