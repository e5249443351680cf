"""`ragsft bench llm`'s ragsft-vs-raw-vLLM comparison, on a backend double (the engine is not needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import orjson

from ragsft_assets.bench import llm as bench_llm
from ragsft_assets.llm.backends.base import Completion, OnResult, Request, TransportStats

TEXT = orjson.dumps({"city": "Paris", "country": "France"}).decode()


class _Engine:
    """What the raw pass calls: ``vllm.LLM.chat`` (records its arguments)."""

    def __init__(self) -> None:
        self.resets = 0
        self.chats: list[tuple[list, list]] = []

    def reset_prefix_cache(self) -> None:
        self.resets += 1

    def chat(self, messages: list, sampling_params: list, use_tqdm: bool = True) -> list:
        assert use_tqdm is False
        self.chats.append((messages, sampling_params))
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1, 2, 3, 4])]) for _ in messages]


class BatchSizeBackend:
    """Answers every request with 4 tokens; records the size of each generate() call and reports
    a scheduler peak of 40 sequences."""

    def __init__(self) -> None:
        self.engine = _Engine()
        self.sizes: list[int] = []

    def _engine(self) -> _Engine:
        return self.engine

    def _sampling(self, req: Request) -> tuple:
        return ("sampling", req.params, orjson.dumps(req.json_schema))

    def identity(self) -> dict[str, str]:
        return {"backend": "double", "model": "m", "weights_sha256": "0" * 64}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> TransportStats:
        self.sizes.append(len(requests))
        for i, _ in enumerate(requests):
            on_result(i, Completion(text=TEXT, completion_tokens=4))
        return TransportStats(in_flight_max=40)

    def close(self) -> None:
        pass


def test_ragsft_and_raw_passes_in_abba_order_on_the_same_prompts(tmp_path: Path) -> None:
    backend = BatchSizeBackend()
    rates, requests, max_running = bench_llm.ragsft_vs_raw(backend, tmp_path)
    assert requests == 256 and set(rates) == {"ragsft", "raw"}
    # ragsft, raw, raw, ragsft: every pass cold (a fresh cache each, the prefix cache reset 4 times)
    assert backend.sizes == [256, 256]  # ragsft hands the engine one whole batch
    assert len(backend.engine.chats) == 2 and backend.engine.resets == 4
    expected = bench_llm._requests(bench_llm.SamplingParams(max_tokens=48))
    for messages, sampling in backend.engine.chats:
        # the raw pass gets the very prompts and sampling ragsft's backend would send
        assert messages == [[dict(m) for m in r.messages] for r in expected]
        assert sampling == [backend._sampling(r) for r in expected]
    assert max_running == 40  # the engine's scheduler peak, as the backend reported it
    assert all(r > 0 for r in rates.values())
