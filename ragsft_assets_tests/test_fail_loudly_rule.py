"""The transport-error rule of ``llm.transport_errors`` and its place in ``ChatClient.run``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ragsft_assets import recipes
from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.transport_errors import TransportErrors, error_kind, share_failure, transport_kinds
from ragsft_assets.llm.types import STATUS_ERROR, STATUS_UNREADABLE, SamplingParams


def test_error_kinds_drop_urls_and_attempt_counts() -> None:
    assert error_kind("gave up after 5 attempts: HTTP 500 from http://h:1/v1") == "HTTP 500"
    assert error_kind("gave up after 3 attempts (2 answered 429): HTTP 429 from http://h/v1") == "HTTP 429"
    assert error_kind("gave up after 2 attempts: TimeoutError from http://h/v1") == "TimeoutError"
    assert error_kind("gave up after 2 attempts: malformed response body from http://h/v1") == (
        "malformed response body"
    )
    assert error_kind("HTTP 401 from http://h/v1: wrong key") == "HTTP 401"
    assert error_kind("prompt_too_long: 5000 prompt tokens + max_tokens 64") == "prompt_too_long"
    assert error_kind("ValueError: something") == "ValueError"
    transport, request = transport_kinds(["HTTP 500 from x", "HTTP 500 from y", "prompt_too_long: 9"])
    assert transport == {"HTTP 500": 2} and request == {"prompt_too_long": 1}


def test_the_share_rule() -> None:
    # at or under the share: no failure; over it: a message
    assert share_failure("judge", [], 100, {"HTTP 500": 2}, 0, 0.02) is None
    assert share_failure("judge", [], 100, {}, 50, 0.02) is None  # unreadable answers never fail it
    message = share_failure(
        "generator", ["http://***@gpu-1/v1"], 100, {"HTTP 500": 2, "TimeoutError": 1}, 7, 0.02
    )
    assert message is not None
    # names the role, the masked URL, the kinds with counts, the unreadable ones apart, what to do
    assert message.startswith("generator: 3 of 100 LLM requests failed in transport (3.0%")
    assert "http://***@gpu-1/v1" in message and "HTTP 500 x2, TimeoutError x1" in message
    assert "7 unreadable answer(s)" in message and "counted apart" in message
    assert "rerun" in message and "cached" in message and "RAGSFT_GENERATOR_MAX_ERROR_SHARE" in message
    assert share_failure("judge", [], 24, {"HTTP 500": 1}, 0, 0.0) is not None  # 0: any error fails
    assert share_failure("judge", [], 24, {"HTTP 500": 24}, 0, 1.0) is None  # 1: never


def test_the_default_share_is_the_recipes_and_small() -> None:
    assert recipes.MAX_TRANSPORT_ERROR_SHARE == 0.02


class _Failing:
    """A backend whose requests listed in ``fail`` end with a transport error, the rest answer."""

    def __init__(self, fail: set[str], unreadable: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail, self.unreadable = fail, unreadable
        self.shown_urls = ["http://***@gpu-1:8000/v1"]

    def identity(self) -> dict[str, str]:
        return {"backend": "test", "model": "m", "weights_sha256": "w"}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, r in enumerate(requests):
            text = r.messages[-1]["content"]
            if text in self.fail:
                on_result(
                    i, Completion(error="gave up after 5 attempts: HTTP 500 from http://***@gpu-1:8000/v1")
                )
            else:
                on_result(i, Completion(text="not json" if text in self.unreadable else '{"a": 1}'))

    def close(self) -> None:
        pass


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _convs(names: Sequence[str]) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": n}] for n in names]


def test_a_batch_over_the_share_raises_after_caching_its_answers(tmp_path: Path) -> None:
    names = [f"q{i}" for i in range(20)]
    backend = _Failing({"q3", "q7"})
    client = ChatClient(backend, LLMCache(tmp_path), name="generator")
    with pytest.raises(TransportErrors) as caught:
        client.chat(_convs(names), SamplingParams(), json_schema=SCHEMA)
    message = str(caught.value)
    assert (
        "generator: 2 of 20" in message and "HTTP 500 x2" in message and "http://***@gpu-1:8000/v1" in message
    )
    # the 18 answers were cached before the failure: a rerun against a healed fleet makes 2 calls only
    backend.fail = set()
    again = client.chat(_convs(names), SamplingParams(), json_schema=SCHEMA)
    assert (again.stats.cache_hits, again.stats.calls, again.stats.errors) == (18, 2, 0)


def test_unreadable_answers_do_not_count_as_transport_errors(tmp_path: Path) -> None:
    names = [f"q{i}" for i in range(100)]
    unreadable = {f"q{i}" for i in range(40)}
    client = ChatClient(_Failing({"q99"}, unreadable), LLMCache(tmp_path), name="judge")
    batch = client.chat(_convs(names), SamplingParams(), json_schema=SCHEMA)  # 1% errors, 40% unreadable
    statuses = [r.status for r in batch.results]
    assert statuses.count(STATUS_UNREADABLE) == 40 and statuses.count(STATUS_ERROR) == 1


def test_the_share_is_a_setting(tmp_path: Path) -> None:
    names = [f"q{i}" for i in range(10)]
    loose = ChatClient(_Failing({"q1", "q2"}), LLMCache(tmp_path / "a"), max_error_share=0.5)
    assert loose.chat(_convs(names), SamplingParams()).stats.errors == 2
    strict = ChatClient(_Failing({"q1"}), LLMCache(tmp_path / "b"), max_error_share=0.0)
    with pytest.raises(TransportErrors):
        strict.chat(_convs(names), SamplingParams())


class _Leaky(_Failing):
    """A backend (any: a registered kind, a custom one) whose error quotes a URL with credentials."""

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, _ in enumerate(requests):
            on_result(i, Completion(error="ConnectionError: http://user:PASS1@h/v1?api_key=KEY1 refused"))


def test_the_client_masks_every_backends_error_text(tmp_path: Path) -> None:
    client = ChatClient(_Leaky(set()), LLMCache(tmp_path), max_error_share=1.0)
    batch = client.chat(_convs(["q"]), SamplingParams())
    assert batch.results[0].error == "ConnectionError: http://***@h/v1?api_key=*** refused"
