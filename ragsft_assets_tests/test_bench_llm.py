"""`ragsft bench llm`'s whole-batch vs 32-slice comparison, on a backend double (the engine is not needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from ragsft_assets.bench import llm as bench_llm
from ragsft_assets.llm.backends.base import Completion, OnResult, Request


class _Engine:
    def __init__(self) -> None:
        self.resets = 0

    def reset_prefix_cache(self) -> None:
        self.resets += 1


class BatchSizeBackend:
    """Answers every request with 4 tokens; records the size of each generate() call."""

    def __init__(self) -> None:
        self.engine = _Engine()
        self.sizes: list[int] = []

    def _engine(self) -> _Engine:
        return self.engine

    def identity(self) -> dict[str, str]:
        return {"backend": "double", "model": "m", "weights_sha256": "0" * 64}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        self.sizes.append(len(requests))
        text = orjson.dumps({"city": "Paris", "country": "France"}).decode()
        for i, _ in enumerate(requests):
            on_result(i, Completion(text=text, completion_tokens=4))

    def close(self) -> None:
        pass


def test_abba_passes_cold_with_the_prefix_cache_reset(tmp_path: Path) -> None:
    backend = BatchSizeBackend()
    rates, requests = bench_llm._whole_vs_slices(backend, tmp_path)
    assert requests == 256 and set(rates) == {"whole", "slices32"}
    # whole, slices, slices, whole: every pass cold (4 caches, 4 prefix-cache resets)
    assert backend.sizes == [256] + [32] * 16 + [256]
    assert backend.engine.resets == 4
    assert all(r > 0 for r in rates.values())
