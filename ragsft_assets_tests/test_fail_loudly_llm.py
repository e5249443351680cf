"""LLM faults fail loudly and in bounded time, and lose nothing that was answered.

Local servers on 127.0.0.1 only, small timeouts: a hung fleet (answers a few calls, then holds
every connection without answering), a fleet answering HTTP 500, a dead URL beside a live one, a
base URL carrying a user:password while an API key is set, and a base URL with a query string.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ragsft_assets.defs.resources import llm_for_role
from ragsft_assets.llm.backends.openai_backend import FleetDown, OpenAIBackend, endpoint
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.transport_errors import TransportErrors
from ragsft_assets.llm.types import STATUS_OK, SamplingParams
from ragsft_assets_tests.fake_openai import FakeOpenAI, echo

MODEL = "served-model"


def _convs(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"q{i}"}] for i in range(n)]


def _backend(urls: list[str], **kw: Any) -> OpenAIBackend:
    options: dict[str, Any] = {
        "timeout_s": 0.3,
        "backoff_s": 0.01,
        "backoff_max_s": 0.05,
        "max_retries": 1000,
    }
    return OpenAIBackend(urls, MODEL, **(options | kw))


class _HangsAfter:
    """Answers the first ``n`` POSTs, then holds every later one until released (a hung server)."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.seen += 1
            answer = self.seen <= self.n
        if not answer:
            self.release.wait(30)
        return echo(path, body)


def test_a_hung_fleet_fails_the_batch_in_bounded_time_and_keeps_the_answers(tmp_path: Path) -> None:
    hang = _HangsAfter(4)
    with FakeOpenAI(hang).running() as srv:
        backend = _backend([srv.url], concurrency=1, dead_after_s=1.0, weights_id="w")
        client = ChatClient(backend, LLMCache(tmp_path))
        started = time.monotonic()
        with pytest.raises(FleetDown) as caught:
            client.chat(_convs(10), SamplingParams())
        elapsed = time.monotonic() - started
        hang.release.set()
        backend.close()
    # without the bound each request would retry 1000 times at 0.3 s: the batch fails in seconds
    assert elapsed < 8, elapsed
    message = str(caught.value)
    assert "every URL has failed for 1s or more" in message and "TimeoutError" in message
    assert srv.url in message and "rerun" in message and "cached" in message
    # the 4 answers were cached: a rerun against a healthy server makes only the 6 missing calls
    with FakeOpenAI().running() as healthy:
        again = ChatClient(_backend([healthy.url], weights_id="w"), LLMCache(tmp_path)).chat(
            _convs(10), SamplingParams()
        )
    assert (again.stats.cache_hits, again.stats.calls) == (4, 6)
    assert all(r.status == STATUS_OK for r in again.results)


def test_a_500_fleet_fails_the_batch_in_bounded_time(tmp_path: Path) -> None:
    def broken(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        return 500, {}, {"error": "down"}

    with FakeOpenAI(broken).running() as a, FakeOpenAI(broken).running() as b:
        backend = _backend([a.url, b.url], dead_after_s=0.5, cooldown_s=0.05)
        started = time.monotonic()
        with pytest.raises(FleetDown, match="HTTP 500"):
            ChatClient(backend, LLMCache(tmp_path)).chat(_convs(6), SamplingParams())
        elapsed = time.monotonic() - started
        backend.close()
    assert elapsed < 8, elapsed  # 1000 retries each, without the bound


def test_a_500_fleet_with_few_retries_fails_the_stage_by_the_share_rule(tmp_path: Path) -> None:
    def broken(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        return 500, {}, {"error": "down"}

    with FakeOpenAI(broken).running() as srv:
        backend = _backend([srv.url], max_retries=1)
        with pytest.raises(TransportErrors) as caught:
            ChatClient(backend, LLMCache(tmp_path), name="generator").chat(_convs(5), SamplingParams())
        backend.close()
    assert str(caught.value).startswith("generator: 5 of 5 LLM requests failed in transport (100.0%")
    assert f"at {srv.url}: HTTP 500 x5" in str(caught.value)


def test_a_dead_url_beside_a_live_one_never_stops_the_batch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with FakeOpenAI().running() as live:
        backend = _backend([dead, live.url], dead_after_s=0.2, cooldown_s=0.05, weights_id="w", max_retries=2)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(40), SamplingParams())
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)


def test_user_password_and_an_api_key_fail_at_start_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSFT_TEST_KEY", "sk-SECRET")
    with pytest.raises(ValueError, match="both would be the Authorization header") as caught:
        OpenAIBackend(
            ["http://user:PASSWORD@127.0.0.1:9/v1"], MODEL, api_key_env="RAGSFT_TEST_KEY", role="judge"
        )
    message = str(caught.value)
    assert "PASSWORD" not in message and "sk-SECRET" not in message
    assert "http://***@127.0.0.1:9/v1" in message and "RAGSFT_TEST_KEY" in message
    # the same through a role configured from the environment, at the resource's start
    monkeypatch.setenv("RAGSFT_JUDGE_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_JUDGE_BASE_URLS", "http://user:PASSWORD@127.0.0.1:9/v1")
    monkeypatch.setenv("RAGSFT_JUDGE_MODEL", MODEL)
    monkeypatch.setenv("RAGSFT_JUDGE_API_KEY_ENV", "RAGSFT_TEST_KEY")
    with pytest.raises(ValueError, match="Keep one") as caught:
        llm_for_role("judge").client()
    assert "PASSWORD" not in str(caught.value)
    # either one alone is accepted
    OpenAIBackend(["http://user:PASSWORD@127.0.0.1:9/v1"], MODEL).close()
    OpenAIBackend(["http://127.0.0.1:9/v1"], MODEL, api_key_env="RAGSFT_TEST_KEY").close()


def test_a_base_url_with_a_query_string_gets_the_path_before_it(tmp_path: Path) -> None:
    assert (
        endpoint("http://h/v1?api-version=2", "/chat/completions")
        == "http://h/v1/chat/completions?api-version=2"
    )
    assert endpoint("http://h/v1", "/models") == "http://h/v1/models"
    with FakeOpenAI().running() as srv:
        backend = _backend([f"{srv.url}?api_key=KEY"], timeout_s=5.0)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(2), SamplingParams())
        backend.close()
    assert [r.text for r in batch.results] == ["answer to q0", "answer to q1"]
    assert all(p == "/v1/chat/completions?api_key=KEY" for p in srv.paths)
    assert backend.shown_urls == [f"{srv.url}?api_key=***"]
