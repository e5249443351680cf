"""The offline vLLM backend's engine loop with a fault-injecting engine (no model loaded).

The fake has the shape of the installed vLLM's offline API the backend uses: ``LLM.enqueue`` /
``enqueue_chat`` return request ids, ``llm_engine.step()`` returns finished outputs a few at a
time in an order of its own. One bad request among 100 (refused, failed in the engine, or too
long for the context) must leave the 99 others ok and cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.backends.vllm_backend import VLLMBackend
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import STATUS_ERROR, STATUS_OK, SamplingParams

MAX_LEN = 64


@dataclass
class _Gen:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class _Out:
    request_id: str
    finished: bool
    outputs: list[_Gen]
    prompt_token_ids: list[int] = field(default_factory=list)


class _Tokenizer:
    def encode(self, text: str) -> list[int]:
        return [0] * len(text.split())

    def apply_chat_template(self, messages: Sequence[dict], **_: Any) -> list[int]:
        return [0] * (sum(len(m["content"].split()) for m in messages) + 4)


class _Engine:
    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.queue: list[tuple[str, str]] = []
        self.steps = 0
        self.max_running = 0

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def step(self) -> list[_Out]:
        self.steps += 1
        self.max_running = max(self.max_running, len(self.queue))
        # Finish three requests per step, last-in first: outputs arrive out of order.
        done, self.queue = self.queue[-3:], self.queue[:-3]
        outs = [_Out(rid, False, [_Gen("", [], None)]) for rid, _ in self.queue[:2]]  # unfinished noise
        for rid, text in done:
            reason = "error" if self.fault == "engine" and text == "item 37" else "stop"
            outs.append(_Out(rid, True, [_Gen(f"answer to {text}", [1, 2], reason)], [0] * 5))
        return outs

    def abort_request(self, ids: list[str]) -> None:
        self.queue = [q for q in self.queue if q[0] not in ids]


class _FakeLLM:
    def __init__(self, fault: str) -> None:
        self.llm_engine = _Engine(fault)
        self.next_id = 0

    def _add(self, text: str) -> list[str]:
        if self.llm_engine.fault == "refused" and text == "item 37":
            raise ValueError("invalid request")
        rid = str(self.next_id)
        self.next_id += 1
        self.llm_engine.queue.append((rid, text))
        return [rid]

    def enqueue(self, prompt: str, params: Any, use_tqdm: bool = False) -> list[str]:
        return self._add(prompt)

    def enqueue_chat(self, messages: list[dict], params: Any, **_: Any) -> list[str]:
        return self._add(messages[-1]["content"])

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()


class _Backend(VLLMBackend):
    def __init__(self, fault: str) -> None:
        super().__init__(
            "fake", {"backend": "vllm", "model": "fake", "weights_sha256": "w"}, max_model_len=MAX_LEN
        )
        self._llm = _FakeLLM(fault)

    def _sampling(self, req: Request) -> Any:
        return req.params  # vLLM's SamplingParams are not needed by the fake

    def close(self) -> None:
        self._llm = None


def _requests(fault: str) -> list[Request]:
    params = SamplingParams(max_tokens=16)
    out = []
    for i in range(100):
        text = f"item {i}"
        if fault == "too_long" and i == 37:
            text = "item 37 " + "word " * MAX_LEN
        if i % 2:
            out.append(Request([{"role": "user", "content": text}], params))
        else:
            out.append(Request((), params, None, None, text))
    return out


@pytest.mark.parametrize("fault", ["engine", "refused", "too_long"])
def test_one_bad_request_among_100_leaves_99_ok_and_cached(fault: str, tmp_path: Path) -> None:
    backend = _Backend(fault)
    client = ChatClient(backend, LLMCache(tmp_path), progress_every_s=0.0)
    reqs = _requests(fault)
    batch = client.run(reqs)
    statuses = [r.status for r in batch.results]
    assert statuses.count(STATUS_OK) == 99 and statuses[37] == STATUS_ERROR
    assert batch.stats.errors == 1
    # Each result is at its own index although the engine finished them out of order.
    assert all(r.text == f"answer to item {i}" for i, r in enumerate(batch.results) if i != 37)
    if fault == "too_long":
        assert batch.results[37].error.startswith("prompt_too_long:")
    engine = backend._llm.llm_engine
    # The whole batch was in the engine at once (no 32-request slices).
    assert engine.max_running == 100 - (fault != "engine")
    again = client.run(reqs)
    assert again.stats.cache_hits == 99 and again.stats.calls == 1  # only the bad one is retried


class _Scheduler:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine

    @property
    def running(self) -> list[tuple[str, str]]:
        return self.engine.queue


def test_the_offline_engine_reports_what_ran_at_once_and_gets_the_resolved_thinking_switch(
    tmp_path: Path,
) -> None:
    backend = _Backend("none")
    engine = backend._llm.llm_engine
    engine.engine_core = SimpleNamespace(engine_core=SimpleNamespace(scheduler=_Scheduler(engine)))
    seen: list[Any] = []
    enqueue_chat = backend._llm.enqueue_chat

    def spy(messages: list[dict], params: Any, **kw: Any) -> list[str]:
        seen.append(kw.get("chat_template_kwargs"))
        return enqueue_chat(messages, params, **kw)

    backend._llm.enqueue_chat = spy  # type: ignore[method-assign]
    client = ChatClient(backend, LLMCache(tmp_path), enable_thinking=True)  # the role's switch
    task = SamplingParams(max_tokens=16, enable_thinking=False, thinking_max_tokens=32)
    reqs = [Request([{"role": "user", "content": f"item {i}"}], task) for i in range(40)]
    batch = client.run(reqs)
    assert all(r.ok for r in batch.results)
    assert batch.stats.in_flight_max == engine.max_running == 40  # read from the scheduler
    assert seen == [{"enable_thinking": True}] * 40  # the role wins over the task's default
