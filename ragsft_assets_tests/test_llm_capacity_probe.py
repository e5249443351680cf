"""Capacity probing: a role's window per URL grows past ``concurrency`` while requests wait in line
and no 429 says the server is full, up to ``max_concurrency`` (issue #36: "The client finds a
gateway's real capacity fast: no more than about 5% of attempts rejected in steady state").

Against the fleet simulator (a gateway with 429s) and local servers on 127.0.0.1: a client at
half a gateway's slots reaches them within a round trip or two; a full gateway refuses at most
about 5% of the attempts; ``max_concurrency == concurrency`` is a hard limit; a server that
queues instead of refusing never gets more than the ceiling.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ragsft_assets.defs.resources import llm_for_role
from ragsft_assets.llm.backends.openai_backend import PROBE_HOLD_ANSWERS, OpenAIBackend, _Fleet
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import STATUS_OK, SamplingParams
from ragsft_assets.resources.llm import MAX_CONCURRENCY_FACTOR, LLMResource
from ragsft_assets_tests.fake_openai import FakeOpenAI, echo

MODEL = "served-model"


def _convs(n: int, prefix: str = "q") -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{prefix}{i}"}] for i in range(n)]


def _backend(urls: list[str], **kw: Any) -> OpenAIBackend:
    options: dict[str, Any] = {"timeout_s": 10.0, "backoff_s": 0.01, "max_retries": 4}
    return OpenAIBackend(urls, MODEL, **(options | kw))


@pytest.fixture(scope="module")
def under(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`bench fleet --regime under` in small: a client at 16 per URL (ceiling 64) in front of a
    gateway with 32 slots that answers 429 + Retry-After when full."""
    from ragsft_assets.bench.fleet_sim import FleetSimulator

    sim = {"prefill_tok_s": 60.0, "error_rate": 0.0, "stall_rate": 0.0, "model": MODEL}
    with FleetSimulator(replicas=1, slots=32, **sim) as f:
        backend = _backend(f.base_urls, concurrency=16, max_concurrency=64)
        cache = LLMCache(tmp_path_factory.mktemp("under"))
        batch = ChatClient(backend, cache).chat(_convs(640, "Question : q"), SamplingParams())
        window = backend._fleet.urls[0].limit if backend._fleet else 0.0
        backend.close()
        stats = f.stats()
    return {"batch": batch, "window": window, "stats": stats}


def test_a_client_at_half_a_gateways_slots_reaches_them_fast(under: dict[str, Any]) -> None:
    s = under["stats"]
    assert all(r.status == STATUS_OK for r in under["batch"].results)
    assert s["max_in_flight"] == 32  # the gateway's slots, twice the configured 16
    assert 28 <= under["window"] <= 40, s  # found and kept: not the ceiling (64) nor the start (16)
    # Fast: at 16 in flight the 32 slots are at most half busy over the stage (0.43 measured);
    # found within a round trip or two of the 20, they are busy most of it (0.81, as at 32).
    assert s["utilization"] >= 0.65, s


def test_a_full_gateway_refuses_at_most_about_5_percent_of_attempts(under: dict[str, Any]) -> None:
    s = under["stats"]
    first = sum(st["rejected_before_ok"] for st in s["stages"].values())
    steady = (s["rejected_429"] - first) / (s["requests"] - first)
    assert s["max_in_flight"] == 32 and steady <= 0.05, s  # at capacity, and refused rarely


def test_a_small_gateway_is_held_at_its_slots_without_a_429_per_round_trip(tmp_path: Path) -> None:
    # 4 slots: growing by one per round trip right after each 429 would be refused once per 5
    # attempts (20%); the hold after a 429 keeps it near 2% while the 4 slots stay in use.
    state = {"in": 0, "peak": 0}
    lock = threading.Lock()

    def gateway(path: str, body: dict) -> tuple[int, dict, Any]:
        with lock:
            if state["in"] >= 4:
                return 429, {"Retry-After": "1"}, {"error": "full"}
            state["in"] += 1
            state["peak"] = max(state["peak"], state["in"])
        try:
            time.sleep(0.02)
            return echo(path, body)
        finally:
            with lock:
                state["in"] -= 1

    with FakeOpenAI(gateway).running() as srv:
        backend = _backend([srv.url], concurrency=2, max_concurrency=8)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(400), SamplingParams())
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert state["peak"] == 4  # the gateway's slots, twice the configured 2
    assert batch.stats.http_429 <= 0.05 * srv.posts, (batch.stats.http_429, srv.posts)


def test_max_concurrency_equal_to_concurrency_is_a_hard_limit(tmp_path: Path) -> None:
    with FakeOpenAI(delay_s=0.02).running() as srv:  # never 429s: only the client limits it
        res = LLMResource(
            backend="openai",
            model=MODEL,
            base_urls=[srv.url],
            concurrency=4,
            max_concurrency=4,
            cache_dir=str(tmp_path),
            role="capacity-hard",
        )
        batch = res.chat(_convs(120), SamplingParams())
        backend = res.client().backend
        ceiling, window = backend.max_concurrency, backend._fleet.urls[0].limit
        res.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert ceiling == 4 and window == 4.0  # with a line of 116 waiting, the window stayed at 4
    assert srv.peak == 4


@pytest.mark.parametrize(("ceiling", "peak"), [(None, 4 * MAX_CONCURRENCY_FACTOR), (6, 6)])
def test_a_server_that_queues_gets_no_more_than_the_ceiling(
    tmp_path: Path, ceiling: int | None, peak: int
) -> None:
    # A plain `vllm serve` never answers 429: it queues. The window grows past concurrency while the
    # line waits, to the ceiling (by default MAX_CONCURRENCY_FACTOR x concurrency), never beyond.
    with FakeOpenAI(delay_s=0.03).running() as srv:
        res = LLMResource(
            backend="openai",
            model=MODEL,
            base_urls=[srv.url],
            concurrency=4,
            max_concurrency=ceiling,
            cache_dir=str(tmp_path),
            role=f"capacity-queue-{ceiling}",
        )
        batch = res.chat(_convs(160), SamplingParams())
        res.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert srv.peak == peak


def test_the_window_passes_concurrency_only_while_requests_wait_in_line() -> None:
    async def scenario() -> None:
        fleet = _Fleet(["u"], cap=4, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0, ceiling=8)
        u = fleet.urls[0]
        assert fleet.capacity() == 8  # the pools and the gate allow the ceiling
        for _ in range(50):  # answers with nobody waiting: the window is not used, so no growth
            fleet.ok(u)
        assert u.limit == 4.0
        fleet.waiters.append(asyncio.get_running_loop().create_future())  # a request in line
        for _ in range(3):  # slow start: one more per answer
            fleet.ok(u)
        assert u.limit == 7.0
        for _ in range(50):
            fleet.ok(u)
        assert u.limit == 8.0  # the ceiling
        u.outstanding = 9  # a window of 9 (a previous ceiling) meets a server full at 6: 3 refused
        for _ in range(3):
            assert fleet.pushback(u, u.epoch, 1.0, 0.0)
            u.outstanding -= 1
        assert u.limit == 6.0
        for _ in range(PROBE_HOLD_ANSWERS):  # held where the server was full, with the line waiting
            fleet.ok(u)
        assert u.limit == 6.0
        for _ in range(6):  # then one more per round trip
            fleet.ok(u)
        assert u.limit == pytest.approx(7.0, abs=0.1)

    asyncio.run(scenario())


def test_max_concurrency_is_a_setting_of_each_role(monkeypatch: pytest.MonkeyPatch) -> None:
    res = LLMResource(backend="openai", model=MODEL, base_urls=["http://a:8000/v1"], concurrency=50)
    assert res._backend_options()[1]["max_concurrency"] == 50 * MAX_CONCURRENCY_FACTOR
    assert res.window_ceiling(local=True) == 50  # the local `vllm serve` of serve=True only queues
    assert res.model_copy(update={"max_concurrency": 70}).window_ceiling(local=True) == 70
    monkeypatch.setenv("RAGSFT_JUDGE_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_JUDGE_BASE_URLS", "http://a:8000/v1")
    monkeypatch.setenv("RAGSFT_JUDGE_MAX_CONCURRENCY", "128")
    assert llm_for_role("judge")._backend_options()[1]["max_concurrency"] == 128
    with pytest.raises(ValueError, match="max_concurrency .3. is below concurrency .4."):
        _backend(["http://a:8000/v1"], concurrency=4, max_concurrency=3)
