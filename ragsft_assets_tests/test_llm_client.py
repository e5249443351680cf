"""The batch runner and the resource with fake backends: budget, samples, parsing, errors, registry."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import BudgetExceeded, ChatClient, chat_samples, estimate_tokens
from ragsft_assets.llm.types import STATUS_ERROR, STATUS_OK, STATUS_UNREADABLE, ChatModel, SamplingParams
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.test_llm_cache import FakeBackend, _convs

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


class ScriptBackend(FakeBackend):
    """Answers from a dict (last user message -> text); a missing entry is a backend error."""

    def __init__(self, answers: dict[str, str], weights: str = "w1") -> None:
        super().__init__(weights)
        self.answers = answers
        self.seen: list[Request] = []

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, r in enumerate(requests):
            self.seen.append(r)
            self.calls += 1
            text = self.answers.get(r.messages[-1]["content"])
            c = (
                Completion(error="boom")
                if text is None
                else Completion(text=text, completion_tokens=len(text))
            )
            on_result(i, c)


def test_statuses_reasoning_and_errors_are_not_cached(tmp_path: Path) -> None:
    backend = ScriptBackend(
        {
            "good": '{"a": 1}',
            "fenced": '```json\n{"a": 2}\n```',
            "think": '<think>let me see</think>{"a": 3}',
            "prose": "I cannot answer",
            "wrong": '{"a": "x"}',
        }
    )
    client = ChatClient(
        backend, LLMCache(tmp_path), max_error_share=1.0
    )  # one error: a result, not a failure
    convs = [
        [{"role": "user", "content": c}] for c in ("good", "fenced", "think", "prose", "wrong", "missing")
    ]
    batch = client.chat(convs, SamplingParams(), json_schema=SCHEMA)
    r = batch.results
    assert [x.status for x in r] == [STATUS_OK] * 3 + [STATUS_UNREADABLE] * 2 + [STATUS_ERROR]
    assert [x.parsed for x in r[:3]] == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert r[2].reasoning == "let me see" and "think" not in r[2].text
    assert r[3].text == "I cannot answer" and r[3].error
    assert r[5].error == "boom"
    assert (batch.stats.unreadable, batch.stats.errors, batch.stats.calls) == (2, 1, 6)
    again = client.chat(convs, SamplingParams(), json_schema=SCHEMA)
    assert (again.stats.cache_hits, again.stats.calls) == (5, 1)  # only the error is retried


def test_duplicates_in_a_batch_are_generated_once(tmp_path: Path) -> None:
    backend = FakeBackend()
    batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(3) + _convs(3), SamplingParams())
    assert backend.calls == 3
    assert (batch.stats.calls, batch.stats.cache_hits) == (3, 3)
    assert [x.text for x in batch.results] == ["echo:q0", "echo:q1", "echo:q2"] * 2


def test_budget_refuses_before_any_call(tmp_path: Path) -> None:
    backend = FakeBackend()
    client = ChatClient(backend, LLMCache(tmp_path), budget_calls=5)
    with pytest.raises(BudgetExceeded, match="nothing was sent"):
        client.chat(_convs(6), SamplingParams())
    assert backend.calls == 0
    client.chat(_convs(4), SamplingParams())
    client.chat(_convs(4), SamplingParams())  # all cached: free
    with pytest.raises(BudgetExceeded):
        client.chat(_convs(6), SamplingParams())  # 2 misses, 1 call left
    tokens = ChatClient(FakeBackend(), LLMCache(tmp_path / "t"), budget_tokens=1000)
    with pytest.raises(BudgetExceeded, match="tokens"):
        tokens.chat(_convs(5), SamplingParams(max_tokens=256))
    assert estimate_tokens([Request(c, SamplingParams(max_tokens=10)) for c in _convs(2)]) >= 20


def test_samples_have_distinct_seeds_and_are_each_cached(tmp_path: Path) -> None:
    backend = ScriptBackend({"q0": "a", "q1": "b"})
    client = ChatClient(backend, LLMCache(tmp_path))
    params = SamplingParams(temperature=0.5, seed=7)
    out = chat_samples(client, _convs(2), params, 2)
    assert [[r.text for r in s] for s in out.samples] == [["a", "a"], ["b", "b"]]
    assert sorted(r.params.seed for r in backend.seen) == [7, 7, 8, 8]
    assert len({r.cache_key for s in out.samples for r in s}) == 4
    assert out.stats.calls == 4
    assert chat_samples(client, _convs(2), params, 2).stats.cache_hits == 4
    # Any ChatModel works (n batches through chat), e.g. the tests' double.
    double = ScriptedChatModel(lambda m: "x")
    assert isinstance(double, ChatModel)
    res = chat_samples(double, _convs(3), params, 2)
    assert [len(s) for s in res.samples] == [3 * 0 + 2] * 3 and len(double.calls) == 6


def test_progress_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = ChatClient(FakeBackend(), LLMCache(tmp_path), name="judge", progress_every_s=0.0, slice_size=4)
    with caplog.at_level(logging.INFO, logger="ragsft_assets.llm.client"):
        client.chat(_convs(10), SamplingParams())
    lines = [r.message for r in caplog.records if "calls (" in r.message]
    assert lines[-1].startswith("judge: 10/10 calls (100%)") and "ETA 0s" in lines[-1]
    assert len(lines) == 10


class _Registered(FakeBackend):
    instances = 0

    def __init__(self, model: str = "") -> None:
        super().__init__()
        type(self).instances += 1
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_resource_shares_one_backend_per_model_and_releases_it(tmp_path: Path) -> None:
    engines.register_backend("test-fake", _Registered)
    gen = LLMResource(backend="test-fake", model="m", cache_dir=str(tmp_path), role="generator")
    judge = LLMResource(backend="test-fake", model="m", cache_dir=str(tmp_path), role="judge")
    assert isinstance(gen, ChatModel)
    a = gen.chat(_convs(3), SamplingParams())
    b = judge.chat(_convs(3), SamplingParams())
    assert _Registered.instances == 1 and (a.stats.calls, b.stats.cache_hits) == (3, 3)
    backend = gen.client().backend
    gen.close()
    assert not backend.closed  # the judge still holds it
    judge.close()
    assert backend.closed and not any(h[0] == "test-fake" for h in engines.live_engines())


def test_resource_in_a_dagster_run(tmp_path: Path) -> None:
    engines.register_backend("test-fake", _Registered)

    @dg.asset
    def answers(generator: dg.ResourceParam[ChatModel]) -> dg.MaterializeResult:
        batch = generator.chat(_convs(4), SamplingParams(), template_version="v")
        return dg.MaterializeResult(metadata=batch.stats.to_metadata())

    res = LLMResource(backend="test-fake", model="dg", cache_dir=str(tmp_path))
    result = dg.materialize([answers], resources={"generator": res}, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    md = result.asset_materializations_for_node("answers")[0].metadata
    assert md["llm/calls"].value == 4
    assert not any(h[0] == "test-fake" for h in engines.live_engines())  # released on teardown


def test_unknown_backend_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown LLM backend"):
        LLMResource(backend="nope", cache_dir=str(tmp_path)).chat(_convs(1), SamplingParams())
    with pytest.raises(ValueError, match="base_urls"):
        LLMResource(backend="openai", cache_dir=str(tmp_path)).chat(_convs(1), SamplingParams())


def test_each_answer_tells_the_requests_that_stop_being_in_flight_as_they_do(tmp_path: Path) -> None:
    # A stream's budget counts the requests really in flight: the cache hits settle at once, each
    # call as it answers (its duplicates in the batch with it), a failed call too.
    from ragsft_assets.llm.client import each_answer

    backend = ScriptBackend({"a": "A", "b": "B"})
    # (one failed call in three passes the share a batch may lose: allowed here)
    client = ChatClient(backend, LLMCache(tmp_path / "cache"), max_error_share=1.0)
    client.chat([[{"role": "user", "content": "a"}]], SamplingParams())  # "a" is cached now
    settled: list[int] = []
    seen_at: list[int] = []
    inner = backend.generate

    def generate(requests: Sequence[Request], on_result: OnResult) -> None:
        def told(i: int, c: Completion) -> None:
            seen_at.append(sum(settled))  # what had settled when this answer came
            on_result(i, c)

        inner(requests, told)

    backend.generate = generate  # type: ignore[method-assign]
    convs = [[{"role": "user", "content": t}] for t in ("a", "b", "b", "missing", "a")]
    with each_answer(settled.append):
        batch = client.chat(convs, SamplingParams())
    assert [r.status for r in batch.results] == [STATUS_OK, STATUS_OK, STATUS_OK, STATUS_ERROR, STATUS_OK]
    # the two hits of "a" at once, then "b" with its duplicate, then the failed call
    assert settled == [2, 2, 1] and seen_at == [2, 4]
    settled.clear()
    client.chat(convs[:1], SamplingParams())  # outside the block: nobody is told
    assert settled == []
