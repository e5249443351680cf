"""The HTTP client at fleet speed, against local OpenAI-compatible servers on 127.0.0.1.

Per-URL in-flight limits, Retry-After and AIMD under pushback, failing URLs set aside while
the others carry the batch, identity checks at start, the thinking switch (sent, keyed, and
resolved role > task > model), reasoning kept out of answers, and OpenAI reasoning models.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from ragsft_assets.defs.resources import embedder_from_env, llm_for_role
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.backends.openai_backend import (
    _HELD,
    PROBE_HOLD_ANSWERS,
    OpenAIBackend,
    ServedModelError,
    _answer_arriving,
    _Fleet,
    retry_after_s,
)
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient, result_from_response
from ragsft_assets.llm.thinking import DEFAULT_REASONING_BUDGET, effective_request
from ragsft_assets.llm.types import STATUS_ERROR, STATUS_OK, STATUS_UNREADABLE, SamplingParams
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets_tests.fake_openai import Answer, FakeOpenAI, chat_payload, echo
from ragsft_assets_tests.llm_double import ScriptedChatModel

MODEL = "served-model"


def _convs(n: int, prefix: str = "q") -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{prefix}{i}"}] for i in range(n)]


def _backend(urls: list[str], **kw: Any) -> OpenAIBackend:
    options: dict[str, Any] = {"timeout_s": 10.0, "backoff_s": 0.01, "max_retries": 2}
    return OpenAIBackend(urls, MODEL, **(options | kw))


def _resource(urls: list[str], tmp_path: Path, **kw: Any) -> LLMResource:
    return LLMResource(
        backend="openai", model=MODEL, base_urls=urls, backoff_s=0.01, cache_dir=str(tmp_path), **kw
    )


# ----- per-URL limits and least-outstanding dispatch ------------------------------------------


def test_the_per_url_limit_is_reached_and_never_exceeded(tmp_path: Path) -> None:
    with FakeOpenAI(delay_s=0.1).running() as a, FakeOpenAI(delay_s=0.1).running() as b:
        backend = _backend([a.url, b.url], concurrency=6)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(72), SamplingParams())
        backend.close()
    assert [r.text for r in batch.results] == [f"answer to q{i}" for i in range(72)]
    assert (a.peak, b.peak) == (6, 6)  # each URL holds its limit, never more
    assert a.posts + b.posts == 72 and min(a.posts, b.posts) >= 30  # least outstanding: both carry it
    md = batch.stats.to_metadata("generator")
    assert md["generator/in_flight_max"] == 12 and md["generator/retries"] == 0
    assert 6 <= md["generator/in_flight_mean"] <= 12  # the effective concurrency of the batch


def test_the_default_limit_suits_a_replica_and_each_role_has_its_own_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert LLMResource().concurrency == 128
    for role in ("generator", "judge"):
        monkeypatch.setenv(f"RAGSFT_{role.upper()}_BACKEND", "openai")
        monkeypatch.setenv(f"RAGSFT_{role.upper()}_BASE_URLS", "http://a:8000/v1,http://b:8000/v1")
        monkeypatch.setenv(f"RAGSFT_{role.upper()}_MODEL", MODEL)
    monkeypatch.setenv("RAGSFT_JUDGE_CONCURRENCY", "200")
    monkeypatch.setenv("RAGSFT_JUDGE_TIMEOUT_S", "30.5")
    monkeypatch.setenv("RAGSFT_JUDGE_MAX_RETRIES", "7")
    gen, judge = llm_for_role("generator"), llm_for_role("judge")
    assert (judge.concurrency, judge.timeout_s, judge.max_retries) == (200, 30.5, 7)
    assert gen.concurrency == 128
    _, gen_opts = gen._backend_options()
    _, judge_opts = judge._backend_options()
    assert gen_opts["role"] == "generator" and judge_opts["role"] == "judge"  # two registry entries
    monkeypatch.setenv("RAGSFT_JUDGE_CONCURRENCY", "lots")
    with pytest.raises(ValueError, match="RAGSFT_JUDGE_CONCURRENCY"):
        llm_for_role("judge")
    # The embedder's HTTP settings work the same way.
    monkeypatch.setenv("RAGSFT_EMBEDDER_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_EMBEDDER_CONCURRENCY", "64")
    monkeypatch.setenv("RAGSFT_EMBEDDER_TIMEOUT_S", "9")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MAX_RETRIES", "1")
    emb = embedder_from_env()
    assert (emb.concurrency, emb.timeout_s, emb.max_retries) == (64, 9.0, 1)


def test_the_embedder_keeps_its_per_url_limit(tmp_path: Path) -> None:
    posts = {"n": 0}
    lock = threading.Lock()

    def vectors(path: str, body: dict) -> tuple[int, dict, Any]:
        with lock:
            posts["n"] += 1
            if posts["n"] == 1:
                return 429, {"Retry-After": "0"}, {"error": "slow down"}
        data = [{"index": i, "embedding": [1.0, float(len(t))]} for i, t in enumerate(body["input"])]
        return 200, {}, {"data": data, "usage": {"prompt_tokens": len(data)}}

    with FakeOpenAI(vectors, models=[{"id": "emb", "root": "/m/emb"}], delay_s=0.05).running() as srv:
        res = EmbeddingResource(
            backend="openai",
            base_urls=[srv.url],
            model="emb",
            per_request=2,
            concurrency=3,
            backoff_s=0.01,
            normalize=False,
            cache_dir=str(tmp_path),
        )
        out = res.embed([f"t{'x' * i}" for i in range(30)])
        res.close()
    assert out.vectors.shape == (30, 2) and out.vectors[7, 1] == 8.0
    assert srv.peak == 3 and srv.posts == 16  # 15 requests of 2 inputs, one answered 429 first
    md = out.stats.as_metadata()
    assert md["embedder/in_flight_max"] == 3 and md["embedder/http_429"] == 1 and md["embedder/retries"] == 1


# ----- overload: Retry-After, AIMD -------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_and_counted(status: int, tmp_path: Path) -> None:
    served = {"n": 0}
    lock = threading.Lock()

    def answer(path: str, body: dict) -> tuple[int, dict, Any]:
        with lock:
            served["n"] += 1
            first = served["n"] == 1
        if first:
            return status, {"Retry-After": "1"}, {"error": "slow down"}
        return echo(path, body)

    with FakeOpenAI(answer).running() as srv:
        backend = _backend([srv.url], concurrency=1)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(3), SamplingParams())
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert srv.posts == 4
    # Nothing reached the server during the second it asked for.
    assert srv.times[1] - srv.times[0] >= 0.95
    assert (batch.stats.http_429, batch.stats.retries, batch.stats.errors) == (int(status == 429), 1, 0)


def test_retry_after_forms() -> None:
    assert retry_after_s("2") == 2.0 and retry_after_s("0.5") == 0.5
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    from datetime import UTC, datetime, timedelta

    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_s(later) or 0) <= 30
    assert retry_after_s("100000") == 600.0  # believed only this far


def test_pushback_lowers_the_limit_once_per_round_trip_and_successes_raise_it() -> None:
    async def scenario() -> None:
        fleet = _Fleet(["u"], cap=16, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        u = fleet.urls[0]
        epoch = u.epoch
        for _ in range(10):  # ten 429s from one window of requests: one cut
            fleet.pushback(u, epoch, None, 0.0)
        assert u.limit == 8.0 and u.ssthresh == 8.0
        fleet.pushback(u, u.epoch, 2.0, 5.0)  # a 429 to a request sent after the cut: cut again
        assert u.limit == 4.0 and u.available_at == 7.0  # and the URL waits its Retry-After
        for _ in range(200):
            fleet.ok(u)
        assert u.limit == 16.0  # recovered to the configured limit, never above

    asyncio.run(scenario())


def test_a_429_while_ours_run_sets_the_window_to_what_runs_without_pausing() -> None:
    async def scenario() -> None:
        fleet = _Fleet(["u"], cap=16, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        u = fleet.urls[0]
        u.outstanding = 16  # a window of 16 sent to a gateway with 10 slots: 6 come back 429
        for _ in range(6):
            assert fleet.pushback(u, u.epoch, 1.0, 0.0)  # the window alone holds the retry back
            u.outstanding -= 1  # the rejected request's slot is released
        assert u.limit == 10.0 and u.available_at == 0.0  # the gateway's capacity, no pause
        for _ in range(PROBE_HOLD_ANSWERS):  # held there a while: no refusal per round trip
            fleet.ok(u)
        assert u.limit == 10.0
        for _ in range(10):  # then a round trip of answers: one more
            fleet.ok(u)
        assert u.limit == pytest.approx(11.0, abs=0.05)
        u.outstanding = 1  # nothing else of ours runs there: a rate limit, so pause and halve
        assert not fleet.pushback(u, u.epoch, 2.0, 5.0)
        assert u.available_at == 7.0 and u.limit == pytest.approx(5.5, abs=0.05)

    asyncio.run(scenario())


def test_requests_waiting_in_line_sleep_until_a_slot_frees_or_a_pause_ends() -> None:
    # A thousand requests in line (a stream, or a client over the gateway) must cost the loop
    # nothing while they wait: each used to wake every second on its own timeout, half the HTTP
    # loop's CPU in bench fleet. Now an answer, a grown window or the end of a pause wakes them.
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fleet = _Fleet(["u"], cap=1, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        picks = 0
        pick = fleet._pick

        def counted(now: float, avoid: Any) -> Any:
            nonlocal picks
            picks += 1
            return pick(now, avoid)

        fleet._pick = counted  # type: ignore[method-assign]
        first = await fleet.acquire()
        waiting = [asyncio.ensure_future(fleet.acquire()) for _ in range(300)]
        await asyncio.sleep(1.3)  # past the old per-waiter bound of 1 s
        assert not any(w.done() for w in waiting)
        assert picks <= 302  # each looked once when it came, none since
        fleet.release(first)  # an answer: the head of the line gets the slot, in order
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert waiting[0].done() and not any(w.done() for w in waiting[1:])
        waiting[1].cancel()  # a cancelled waiter leaves the line
        await asyncio.sleep(0)
        assert len(fleet.waiters) == 298
        # A Retry-After pause with a free slot: the line moves when the pause ends, with no answer.
        u = fleet.urls[0]
        u.limit, u.available_at = 2.0, loop.time() + 0.3
        fleet.wake()
        fleet._arm(loop, loop.time())
        t0 = loop.time()
        while not waiting[2].done():
            await asyncio.sleep(0.02)
            assert loop.time() - t0 < 2.0, "the pause ended and nobody woke the line"
        assert loop.time() - t0 >= 0.25
        for w in waiting[3:]:
            w.cancel()
        await asyncio.gather(*waiting[3:], return_exceptions=True)
        assert not fleet.waiters
        fleet.release(waiting[0].result())
        fleet.release(waiting[2].result())

    asyncio.run(scenario())


def test_a_server_full_of_our_other_roles_work_cuts_the_window_but_not_its_regrowth() -> None:
    # A judge streaming behind the drafts meets a server the generator role fills. Halving per
    # round trip, its window fell to one request and its slow-start threshold with it: once the
    # drafts drained it grew by one per round trip (a minute of near-empty fleet in bench fleet).
    async def scenario() -> None:
        generator = _Fleet(["shared"], cap=128, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        judge = _Fleet(["shared"], cap=128, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        held = [await generator.acquire() for _ in range(100)]  # the generator fills the server
        u = judge.urls[0]
        try:
            for now in range(20):  # the judge's lone probe, refused once a Retry-After
                u.outstanding += 1
                _HELD.add("shared", 1)
                assert not judge.pushback(u, u.epoch, 1.0, float(now))
                u.outstanding -= 1
                _HELD.add("shared", -1)
                assert u.available_at == now + 1.0  # it waits its Retry-After: no storm
            assert u.limit == 1.0 and u.ssthresh >= 128.0
            for g in held:  # the drafts drain
                generator.release(g)
            held = []
            for _ in range(31):  # room again: slow start, +1 per answer (doubling per round trip)
                judge.ok(u)
            assert u.limit == 32.0
            # With only its own requests there, a 429 is the capacity probe as before.
            u.outstanding = 33
            _HELD.add("shared", 33)
            assert judge.pushback(u, u.epoch, 1.0, 30.0) and u.limit == 32.0 and u.ssthresh == 32.0
            _HELD.add("shared", -33)
        finally:
            for g in held:
                generator.release(g)
        assert _HELD.get("shared") == 0

    asyncio.run(scenario())


def test_a_role_with_requests_in_line_takes_the_room_its_other_roles_left_at_once() -> None:
    # bench fleet, 5,000 pairs over: the annotator's window was cut to 2 while the judge's cascade
    # filled the server; once the judge drained, doubling per round trip took 10 s to refill the
    # fleet. The capacity the 429 found (every role's requests there) is the room to take, half
    # of what is left per answer (another role may take it at the same time).
    async def scenario(url: str, refused: bool) -> tuple[float, int]:
        judge = _Fleet([url], cap=128, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        annotator = _Fleet([url], cap=128, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        held = [await judge.acquire() for _ in range(100)]  # the judge fills the server
        u = annotator.urls[0]
        first = await annotator.acquire()
        second = await annotator.acquire()
        if refused:  # the annotator's third request: refused, the server full at 102 of ours
            third = await annotator.acquire()
            assert annotator.pushback(u, u.epoch, 1.0, 0.0)  # the window holds it back
            annotator.release(third)
            assert u.limit == 2.0
        else:
            u.limit = 2.0  # the same window, with no 429 that found the server's room
        line = [asyncio.ensure_future(annotator.acquire()) for _ in range(80)]
        await asyncio.sleep(0)
        for h in held:  # the judge's work drains
            judge.release(h)
        annotator.ok(u)  # one answer of the annotator's: half the room, at once
        annotator.release(first)
        await asyncio.sleep(0)
        served = sum(w.done() for w in line)
        limit = u.limit
        if refused:
            assert (limit, served) == (52.0, 51)  # 102 found, 2 running: 2 + 100 // 2; 1 left after
            annotator.ok(u)  # the next answer: half of what is left (102 - 52 running = 50)
            assert u.limit == 52.0 + 25
        for w in line:
            w.cancel()
        await asyncio.gather(*line, return_exceptions=True)
        for w in line:
            if not w.cancelled():
                annotator.release(w.result())
        annotator.release(second)
        assert _HELD.get(url) == 0
        return limit, served

    asyncio.run(scenario("room-found", refused=True))
    limit, served = asyncio.run(scenario("room-unknown", refused=False))
    assert limit == 3.0 and served == 2  # no 429 said how much room: slow start, +1 per answer


def test_a_new_batchs_fast_failures_do_not_set_a_busy_url_aside() -> None:
    # A batch opens with a full window; its first answers are the fast failures (a 500, a reset),
    # long before any success. Three of them while 100 requests still run there prove nothing.
    async def scenario() -> None:
        fleet = _Fleet(["a", "b"], cap=128, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        busy, idle = fleet.urls
        busy.outstanding = 100
        for _ in range(3):
            fleet.failure(busy, 0.0, 0.0, "HTTP 500")
            busy.outstanding -= 1
        assert not busy.aside
        idle.outstanding = 1  # a URL that holds nothing else: three failures in a row set it aside
        for _ in range(3):
            fleet.failure(idle, 0.0, 0.0, "ClientConnectorError")
        assert idle.aside

    asyncio.run(scenario())


def test_a_hung_request_is_cut_as_a_straggler_and_sent_again(tmp_path: Path) -> None:
    # Two requests hang on their first attempt, one sent in the first window (before any answer)
    # and one later. Once the batch has 50 answers, a first attempt that has run 5 x their p99 (at
    # least 2 s) is cut and sent again: the batch waits seconds, not timeout_s, and the URL is not
    # counted as failing.
    seen: set[str] = set()
    lock = threading.Lock()

    def answer(path: str, body: dict) -> tuple[int, dict, Any]:
        content = body["messages"][0]["content"]
        with lock:
            first = content not in seen
            seen.add(content)
        if content in ("q3", "q99") and first:
            time.sleep(8.0)
        return echo(path, body)

    with FakeOpenAI(answer).running() as srv:
        backend = _backend([srv.url], concurrency=8, timeout_s=30.0)
        t0 = time.monotonic()
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(120), SamplingParams())
        elapsed = time.monotonic() - t0
        cut, fails = backend.stragglers_cut, backend._fleet.urls[0].fails if backend._fleet else -1
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert cut == 2 and fails == 0 and batch.stats.retries == 2 and batch.stats.errors == 0
    assert elapsed < 7.0  # cut at about 2 s, not after the hang (8 s) or timeout_s (30 s)


def test_a_small_batch_cuts_its_straggler_from_the_backends_recent_answers(tmp_path: Path) -> None:
    # A streamed chunk's batch has fewer than 50 answers of its own: its hung request is cut at 5 x
    # the p99 of the backend's recent answers to requests of the same max_tokens (at least 2 s).
    hung: set[str] = set()

    def once(path: str, body: dict) -> tuple[int, dict, Any]:
        content = body["messages"][0]["content"]
        if content == "small0" and content not in hung:  # its first attempt hangs, the next answers
            hung.add(content)
            time.sleep(8.0)
        return echo(path, body)

    with FakeOpenAI(once).running() as srv:
        backend = _backend([srv.url], concurrency=8, timeout_s=30.0)
        client = ChatClient(backend, LLMCache(tmp_path))
        client.chat(_convs(60), SamplingParams(max_tokens=16))  # the history: 60 quick answers
        t0 = time.monotonic()
        batch = client.chat(_convs(5, "small"), SamplingParams(max_tokens=16))
        elapsed = time.monotonic() - t0
        other = client.chat(_convs(3, "other"), SamplingParams(max_tokens=17))  # no history at 17
        cut = backend.stragglers_cut
        backend.close()
    assert all(r.status == STATUS_OK for r in [*batch.results, *other.results])
    assert cut == 1 and batch.stats.retries == 1
    assert elapsed < 7.0  # cut at about 2 s, not after the hang (8 s) or timeout_s (30 s)


def test_a_gateway_with_fewer_slots_is_found_fast(tmp_path: Path) -> None:
    # The client's limit is twice the gateway's slots (the `over` regime of bench fleet): after the
    # first window, no more than about 5% of attempts are refused, and the window sits at the
    # gateway's capacity instead of halving below it.
    from ragsft_assets.bench.fleet_sim import FleetSimulator

    sim = {"prefill_tok_s": 60.0, "error_rate": 0.0, "stall_rate": 0.0, "model": MODEL}
    with FleetSimulator(replicas=1, slots=32, **sim) as f:
        backend = _backend(f.base_urls, concurrency=64, max_retries=4)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(640, "Question : q"), SamplingParams())
        window = backend._fleet.urls[0].limit if backend._fleet else 0
        backend.close()
        s = f.stats()
    assert all(r.status == STATUS_OK for r in batch.results)
    first = sum(st["rejected_before_ok"] for st in s["stages"].values())
    steady = (s["rejected_429"] - first) / (s["requests"] - first)
    assert first <= 32  # the first window's excess
    assert steady <= 0.05, s
    assert 28 <= window <= 40  # found, not halved to 16
    assert s["max_in_flight"] == 32


def test_a_server_that_pushes_back_gets_fewer_requests_not_a_storm(tmp_path: Path) -> None:
    state = {"in": 0, "peak": 0}
    lock = threading.Lock()

    def answer(path: str, body: dict) -> tuple[int, dict, Any]:
        with lock:
            if state["in"] >= 4:  # a replica with 4 slots: full means 429
                return 429, {"Retry-After": "0"}, {"error": "full"}
            state["in"] += 1
        try:
            time.sleep(0.03)
            return echo(path, body)
        finally:
            with lock:
                state["in"] -= 1

    with FakeOpenAI(answer).running() as srv:
        backend = _backend([srv.url], concurrency=32)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(120), SamplingParams())
        limit = backend._fleet.urls[0].limit if backend._fleet else 0
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert limit < 32  # the limit came down
    assert batch.stats.http_429 < 120  # fewer 429s than requests: no retry storm


# ----- failing URLs ----------------------------------------------------------------------------


def test_a_failing_url_is_set_aside_while_the_others_carry_the_batch(tmp_path: Path) -> None:
    def broken(path: str, body: dict) -> tuple[int, dict, Any]:
        return 500, {}, {"error": "down"}

    with (
        FakeOpenAI(broken).running() as bad,
        FakeOpenAI(delay_s=0.01).running() as good,
    ):
        backend = _backend([bad.url, good.url], concurrency=4, max_retries=1, cooldown_s=60.0)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(60), SamplingParams())
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)  # one retry each sufficed
    # Its window of 4, plus the slots freed by its first failures, then nothing during the cool-down.
    assert bad.posts <= 4 + 2
    assert good.posts == 60
    assert batch.stats.url_set_asides == 1 and batch.stats.retries == bad.posts


def test_a_url_set_aside_is_probed_and_comes_back(tmp_path: Path) -> None:
    started: list[float] = []
    lock = threading.Lock()

    def restarting(path: str, body: dict) -> tuple[int, dict, Any]:
        with lock:
            started[:] = started or [time.monotonic()]
        if time.monotonic() < started[0] + 0.3:  # down for its first 0.3 s
            return 503, {}, {"error": "restarting"}
        return echo(path, body)

    with (
        FakeOpenAI(restarting, delay_s=0.01).running() as back,
        FakeOpenAI(delay_s=0.01).running() as steady,
    ):
        backend = _backend([back.url, steady.url], concurrency=2, cooldown_s=0.2)
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(_convs(300), SamplingParams())
        backend.close()
    assert all(r.status == STATUS_OK for r in batch.results)
    assert batch.stats.url_set_asides >= 1
    late = [t for t in back.times if t > started[0] + 0.3]
    assert len(late) > 20  # after its cool-down a probe answered and it took its share again
    assert steady.posts + len(late) == 300


def test_when_every_url_fails_each_request_ends_with_an_error(tmp_path: Path) -> None:
    def broken(path: str, body: dict) -> tuple[int, dict, Any]:
        return 500, {}, {"error": "down"}

    with FakeOpenAI(broken).running() as a, FakeOpenAI(broken).running() as b:
        backend = _backend([a.url, b.url], concurrency=2, max_retries=2, cooldown_s=0.05)
        # max_error_share=1: each request's ending is under test; the stage rule is test_fail_loudly_llm's
        batch = ChatClient(backend, LLMCache(tmp_path), max_error_share=1.0).chat(_convs(4), SamplingParams())
        backend.close()
    assert all(
        r.status == STATUS_ERROR and "gave up after 3 attempts" in (r.error or "") for r in batch.results
    )
    assert a.posts + b.posts == 12


# ----- identity at start -----------------------------------------------------------------------


def test_identity_is_checked_on_every_url_at_start(tmp_path: Path) -> None:
    ctx = dg.build_init_resource_context()
    with (
        FakeOpenAI(models=[{"id": MODEL, "root": "/models/a"}]).running() as a,
        FakeOpenAI(models=[{"id": MODEL, "root": "/models/b"}]).running() as b,
        FakeOpenAI(models=[{"id": "other-model", "root": "/x"}]).running() as other,
        FakeOpenAI(models=[{"id": MODEL, "root": "/models/a", "max_model_len": 8192}]).running() as a2,
    ):
        with pytest.raises(ServedModelError, match="different weights"):
            _resource([a.url, b.url], tmp_path).setup_for_execution(ctx)
        with pytest.raises(ServedModelError, match=r"no URL serves it; served: \['other-model'\]"):
            _resource([other.url], tmp_path).setup_for_execution(ctx)
        with pytest.raises(ServedModelError, match="not by"):
            _resource([a.url, other.url], tmp_path).setup_for_execution(ctx)
        gets = a.model_gets
        res = _resource([a.url, a2.url], tmp_path)
        res.setup_for_execution(ctx)
        ident = res.model_identity()
        assert ident["weights_sha256"] == "served:/models/a" and ident["served_root"] == "/models/a"
        assert a.posts == 0 and a.model_gets == gets + 1 and a2.model_gets == 1  # checked before any call
        res.close()


def test_models_listing_is_retried_and_unknown_weights_need_saying(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI(models_status=503).running() as down:
        with pytest.raises(ServedModelError, match="weights_id"):
            _backend([down.url]).identity()
        assert down.model_gets == 3  # max_retries=2: three tries before giving up
        res = _resource([down.url], tmp_path, weights_id="unknown")
        run_log = logging.getLogger("run-log")
        with caplog.at_level("INFO"):
            res.setup_for_execution(dg.build_init_resource_context())
            out = res.chat(_convs(1), SamplingParams(), log=run_log)
        assert out.results[0].ok
        ident = res.model_identity()
        assert ident["weights_sha256"] == "unknown" and "set explicitly" in ident["weights_note"]
        assert "weights 'unknown' (set explicitly)" in caplog.text
        said = [r.getMessage() for r in caplog.records if r.name == "run-log"]
        assert any("weights 'unknown', set explicitly" in m for m in said)  # the stage's run log says so
        res.close()
    # A listing without a root (a provider): the weights must be named.
    with FakeOpenAI(models=[{"id": MODEL, "object": "model"}]).running() as provider:
        with pytest.raises(ServedModelError, match="no `root`"):
            _backend([provider.url]).identity()
        assert _backend([provider.url], weights_id="2025-08-07").identity()["weights_sha256"] == "2025-08-07"


# ----- thinking ----------------------------------------------------------------------------------


def test_thinking_precedence_role_over_task_over_model() -> None:
    msgs = [{"role": "user", "content": "x"}]
    task_off = Request(msgs, SamplingParams(max_tokens=100, enable_thinking=False))
    task_on = Request(msgs, SamplingParams(max_tokens=100, enable_thinking=True, thinking_max_tokens=2000))
    plain = Request(msgs, SamplingParams(max_tokens=100))
    via_kwargs = Request(msgs, SamplingParams(max_tokens=100), None, {"enable_thinking": False})

    def sent(req: Request, role: bool | None = None, budget: int | None = None) -> tuple[Any, int]:
        r = effective_request(req, role, budget)
        return (r.chat_template_kwargs, r.params.max_tokens)

    assert sent(plain) == (None, 100)  # unset both: the model's own default
    assert sent(task_off) == ({"enable_thinking": False}, 100)
    assert sent(task_on) == ({"enable_thinking": True}, 2000)  # a thinking task gets its budget
    assert sent(task_off, role=True, budget=3000) == ({"enable_thinking": True}, 3000)  # the role wins
    assert sent(task_on, role=False) == ({"enable_thinking": False}, 100)
    assert sent(plain, role=True) == ({"enable_thinking": True}, 100)
    # A task default given as chat_template_kwargs is the same request, so the same cache key.
    assert effective_request(via_kwargs) == effective_request(task_off)
    assert effective_request(task_off).params.enable_thinking is None
    # Reasoning models: no template switch, room for the reasoning.
    r = effective_request(task_off, reasoning_model=True)
    assert r.chat_template_kwargs is None and r.params.max_tokens == DEFAULT_REASONING_BUDGET
    # Raw completions have no template: untouched.
    comp = Request((), SamplingParams(enable_thinking=True), None, None, "prompt")
    assert effective_request(comp, role_thinking=True).chat_template_kwargs is None


def test_thinking_is_sent_as_configured_and_is_part_of_the_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = SamplingParams(max_tokens=64, enable_thinking=False, thinking_max_tokens=1024)
    with FakeOpenAI().running() as srv:
        default = _resource([srv.url], tmp_path)
        a = default.chat(_convs(2), task)
        thinking = _resource([srv.url], tmp_path, enable_thinking=True)
        b = thinking.chat(_convs(2), task)
        again = thinking.chat(_convs(2), task)
        unset = _resource([srv.url], tmp_path).chat(_convs(2), SamplingParams(max_tokens=64))
        for res in (default, thinking):
            res.close()
    kwargs = [body.get("chat_template_kwargs") for body in srv.bodies]
    assert kwargs == [{"enable_thinking": False}] * 2 + [{"enable_thinking": True}] * 2 + [None] * 2
    assert [body["max_tokens"] for body in srv.bodies] == [64, 64, 1024, 1024, 64, 64]
    assert a.results[0].cache_key != b.results[0].cache_key != unset.results[0].cache_key
    assert again.stats.cache_hits == 2 and again.stats.calls == 0
    # From the environment: true, false, or unset.
    monkeypatch.setenv("RAGSFT_GENERATOR_BACKEND", "openai")
    for raw, want in (("true", True), ("false", False), ("unset", None)):
        monkeypatch.setenv("RAGSFT_GENERATOR_ENABLE_THINKING", raw)
        assert llm_for_role("generator").enable_thinking is want
    monkeypatch.setenv("RAGSFT_GENERATOR_ENABLE_THINKING", "maybe")
    with pytest.raises(ValueError, match="RAGSFT_GENERATOR_ENABLE_THINKING"):
        llm_for_role("generator")


def test_the_test_double_applies_the_same_thinking_rules() -> None:
    double = ScriptedChatModel(lambda msgs: "ok", enable_thinking=True)
    double.chat(_convs(1), SamplingParams(enable_thinking=False))
    plain = ScriptedChatModel(lambda msgs: "ok")
    plain.chat(_convs(1), SamplingParams(enable_thinking=False))
    plain.chat(_convs(1), SamplingParams())
    assert double.template_kwargs == [{"enable_thinking": True}]
    assert plain.template_kwargs == [{"enable_thinking": False}, None]


# ----- reasoning kept out of answers -------------------------------------------------------------


def test_reasoning_never_reaches_the_answer_and_a_cut_off_one_is_unreadable(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}

    def cases(thinking: bool | None, **response: Any) -> Any:
        return result_from_response(response, schema, "k", False, thinking)

    ok = cases(None, text='<think>maybe {"v": "no"}</think>{"v": "yes"}', finish_reason="stop")
    assert ok.parsed == {"v": "yes"} and "maybe" in (ok.reasoning or "")
    sep = cases(True, text='{"v": "yes"}', reasoning="thought", finish_reason="stop")
    assert sep.parsed == {"v": "yes"} and sep.reasoning == "thought"
    for res in (
        cases(None, text='<think>{"v": "draft"} and more', finish_reason="length"),  # unclosed block
        cases(True, text="", reasoning='{"v": "draft"}', finish_reason="length"),  # reasoning parser
        cases(True, text='{"v": "draft"} thinking on', finish_reason="length"),  # template-opened block
    ):
        assert res.status == STATUS_UNREADABLE and res.reason == "truncated_in_reasoning"
        assert res.text == "" and res.parsed is None and "draft" in (res.reasoning or "")
    plain = result_from_response({"text": "a cut answer", "finish_reason": "length"}, None, "k", False, None)
    assert plain.status == STATUS_OK and plain.text == "a cut answer"  # no thinking asked: an answer

    def answer(path: str, body: dict) -> tuple[int, dict, Any]:
        content = body["messages"][-1]["content"]
        if content == "cut":
            return 200, {}, chat_payload("", reasoning="still thinking", finish="length")
        return 200, {}, chat_payload('{"v": "fine"}', reasoning="short")

    with FakeOpenAI(answer).running() as srv:
        res = _resource([srv.url], tmp_path)
        convs = [[{"role": "user", "content": c}] for c in ("cut", "fine")]
        params = SamplingParams(enable_thinking=True)
        first = res.chat(convs, params, json_schema=schema)
        again = res.chat(convs, params, json_schema=schema)
        res.close()
    assert [r.reason for r in first.results] == ["truncated_in_reasoning", None]
    assert first.results[1].parsed == {"v": "fine"}
    md = first.stats.to_metadata("judge")
    assert md["judge/truncated_in_reasoning"] == 1 and md["judge/unreadable"] == 1
    assert again.stats.truncated_in_reasoning == 1 and again.stats.cache_hits == 2  # counted from cache too


# ----- OpenAI reasoning models -------------------------------------------------------------------


def _strict_reasoning_server(path: str, body: dict) -> tuple[int, dict, Any]:
    """Answers like OpenAI's reasoning models: 400 to max_tokens, temperature, top_p, unknown fields."""
    for field in ("max_tokens", "temperature", "top_p", "chat_template_kwargs"):
        if field in body:
            return 400, {}, {"error": {"message": f"Unsupported parameter: '{field}'"}}
    if body["messages"][-1]["content"] == "long":
        return 200, {}, chat_payload("", finish="length")  # the budget went to hidden reasoning
    return 200, {}, chat_payload(f"verdict for {body['messages'][-1]['content']}")


def test_a_reasoning_model_role_sends_max_completion_tokens_and_no_temperature(tmp_path: Path) -> None:
    models = [{"id": MODEL, "object": "model"}]
    task = SamplingParams(temperature=0.0, max_tokens=48, enable_thinking=False)
    with FakeOpenAI(_strict_reasoning_server, models=models).running() as srv:
        plain = _resource(
            [srv.url], tmp_path / "a", weights_id="gpt-5-mini-2025-08-07", max_retries=0, max_error_share=1.0
        )
        refused = plain.chat(_convs(1), task).results[0]
        reasoning = _resource(
            [srv.url],
            tmp_path / "b",
            weights_id="gpt-5-mini-2025-08-07",
            reasoning_model=True,
            reasoning_effort="low",
        )
        out = reasoning.chat(_convs(2) + [[{"role": "user", "content": "long"}]], task)
        plain.close()
        reasoning.close()
    assert refused.status == STATUS_ERROR and "HTTP 400" in (refused.error or "")
    assert [r.text for r in out.results[:2]] == ["verdict for q0", "verdict for q1"]
    assert out.results[2].reason == "truncated_in_reasoning"
    sent = srv.bodies[-1]
    assert sent["max_completion_tokens"] == DEFAULT_REASONING_BUDGET and sent["reasoning_effort"] == "low"
    assert not {"max_tokens", "temperature", "top_p", "chat_template_kwargs"} & set(sent)


def test_the_straggler_ticker_moves_live_deadlines_and_leaves_passed_ones_alone():
    """Under load the event loop runs late: a deadline can have passed when the ticker moves
    deadlines (asyncio's Timeout raised ``Cannot change state of expiring Timeout`` there, seen in
    bench fleet at load 360). A passed deadline stays passed; a live one moves to sent + cut."""
    import asyncio

    from ragsft_assets.llm.backends import openai_backend as ob

    async def main() -> tuple[ob._Deadline, ob._Deadline, float]:
        loop = asyncio.get_running_loop()
        call = ob._Call()
        sent = loop.time()
        passed, live = (
            call.watch(ob._Deadline(loop, sent, lambda: None), 120.0),
            call.watch(ob._Deadline(loop, sent, lambda: None), 120.0),
        )
        passed.reschedule(sent)  # before the call has 50 answers: a deadline of its own
        await asyncio.sleep(0.01)
        assert passed.expired() and live.when() is None and not live.expired()
        for _ in range(ob.STRAGGLER_SAMPLES):
            call.answered(1.0)
        await asyncio.sleep(0.7)  # one tick
        ticker = call._ticker
        assert ticker is not None and not ticker.done()
        ticker.cancel()
        return passed, live, sent

    passed, live, sent = asyncio.run(main())
    assert passed.expired() and live.when() == sent + ob.STRAGGLER_FACTOR * 1.0 and not live.expired()


def test_a_fleet_waiting_on_its_last_answers_cuts_stragglers_sooner() -> None:
    # At the end of bench fleet's streams one stall held an idle fleet for 10-20 s: 5 x a p99
    # measured at load. With nothing in line and the process's requests under TAIL_SHARE of the
    # windows, a first attempt is cut at TAIL_STRAGGLER_FACTOR x the p99.
    import asyncio

    from ragsft_assets.llm.backends import openai_backend as ob

    async def scenario() -> None:
        fleet = ob._Fleet(["tail-a", "tail-b"], cap=64, cooldown_s=1.0, fail_threshold=3, cooldown_max_s=10.0)
        call = ob._Call(in_tail=fleet.in_tail)
        for _ in range(ob.STRAGGLER_SAMPLES):
            call.answered(1.0)
        ob._HELD.add("tail-a", 40)  # 40 of 128: the fleet is busy
        assert not fleet.in_tail() and call.straggler_s(120.0) == ob.STRAGGLER_FACTOR * 1.0
        ob._HELD.add("tail-a", -30)  # 10 of 128 (every role's): a tail
        assert fleet.in_tail() and call.straggler_s(120.0) == ob.TAIL_STRAGGLER_FACTOR * 1.0
        fleet.waiters.append(asyncio.get_running_loop().create_future())  # work in line: no tail
        assert not fleet.in_tail()
        ob._HELD.add("tail-a", -10)

    asyncio.run(scenario())


def test_the_last_request_of_an_idle_fleet_is_cut_at_twice_the_p99(tmp_path: Path) -> None:
    # The backend hands its calls the tail test: 60 answers of 1 s make a p99 of about 1 s; a lone
    # hung request (1 in flight of a window of 64: a tail) is cut at about 2 x 1 s, not at 5 s,
    # and answered by its second attempt.
    hung: set[str] = set()

    def slow(path: str, body: dict) -> tuple[int, dict, Any]:
        content = body["messages"][0]["content"]
        if content == "last0" and content not in hung:
            hung.add(content)
            time.sleep(8.0)
        else:
            time.sleep(1.0)
        return echo(path, body)

    with FakeOpenAI(slow).running() as srv:
        backend = _backend([srv.url], concurrency=64, timeout_s=30.0)
        client = ChatClient(backend, LLMCache(tmp_path))
        client.chat(_convs(60), SamplingParams(max_tokens=16))  # the history
        t0 = time.monotonic()
        batch = client.chat(_convs(1, "last"), SamplingParams(max_tokens=16))
        elapsed = time.monotonic() - t0
        cut = backend.stragglers_cut
        backend.close()
    assert batch.results[0].status == STATUS_OK and cut == 1
    assert elapsed < 4.5  # cut at about 2 s, then 1 s: not at 5 s (5 x the p99), then 1 s


def _use_loop(loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Backends started from here run on ``loop_kind``'s event loop ("uvloop" or "asyncio")."""
    from ragsft_assets.llm.backends import openai_backend as ob

    if loop_kind == "asyncio":
        monkeypatch.setattr(ob, "_new_loop", asyncio.new_event_loop)
    else:
        pytest.importorskip("uvloop")


def _race_answers(race: Callable[[int], tuple[int, dict, Any]], hold_s: float = 0.0) -> Answer:
    """A fake server's answers: a request whose message starts with "race" gets ``race(n)`` on
    its n-th attempt (counted across servers sharing this function), one starting with "hold"
    waits ``hold_s`` first, and every other one is echoed."""
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def answer(path: str, body: dict) -> tuple[int, dict, Any]:
        content = body["messages"][0]["content"]
        with lock:
            n = attempts[content] = attempts.get(content, 0) + 1
        if content.startswith("race"):
            return race(n)
        if content.startswith("hold"):
            time.sleep(hold_s)
        return echo(path, body)

    return answer


def _straggler_race(
    loop_kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first_answer_s: float,
    disturb: Callable[[asyncio.AbstractEventLoop], threading.Timer],
) -> tuple[Any, float]:
    """One request ("race") on a backend whose straggler deadline is 2 s (a p99 of milliseconds),
    under ``loop_kind``: its first attempt is answered after ``first_answer_s``, a second one
    after 3 s. ``disturb(loop)`` returns a started timer that holds or slows the backend's loop.
    Returns the batch and its seconds."""
    _use_loop(loop_kind, monkeypatch)

    def race(n: int) -> tuple[int, dict, Any]:
        time.sleep(first_answer_s if n == 1 else 3.0)
        return 200, {}, chat_payload(f"attempt {n}")

    with FakeOpenAI(_race_answers(race)).running() as srv:
        backend = _backend([srv.url], concurrency=64, timeout_s=30.0)
        client = ChatClient(backend, LLMCache(tmp_path))
        client.chat(_convs(60), SamplingParams(max_tokens=16))  # a p99 of milliseconds: a 2-s deadline
        t0 = time.monotonic()
        timer = disturb(backend._ensure_loop())
        batch = client.chat(_convs(1, "race"), SamplingParams(max_tokens=16))
        elapsed = time.monotonic() - t0
        backend.close()
        timer.cancel()
    return batch, elapsed


def _slow_turns(loop: asyncio.AbstractEventLoop) -> threading.Timer:
    """From 1.9 s to 3.1 s after now, each turn of ``loop`` takes 0.1 s (a loop held by the GIL);
    returns the started timer."""
    slow_until = [0.0]

    def slow_turn() -> None:
        if time.monotonic() < slow_until[0]:
            time.sleep(0.1)
            loop.call_soon(slow_turn)

    def start() -> None:
        slow_until[0] = time.monotonic() + 1.2
        slow_turn()

    timer = threading.Timer(1.9, lambda: loop.call_soon_threadsafe(start))
    timer.start()
    return timer


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_an_answer_that_arrives_with_the_straggler_deadline_is_kept(
    loop_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench fleet's duplicated=2 at 20,000 pairs over: the answer and the straggler deadline ready
    # in one loop iteration (a loop held by the GIL). Cutting the attempt there dropped an answer
    # the server had sent, and sent the request again. Here the loop is held from 1.2 s to 2.6 s;
    # the first attempt is answered at 1.6 s, its deadline is 2 s: the first answer must be kept,
    # whichever of the two the loop sees first (uvloop runs timers before I/O, asyncio after).
    def hold(loop: asyncio.AbstractEventLoop) -> threading.Timer:
        timer = threading.Timer(1.2, lambda: loop.call_soon_threadsafe(time.sleep, 1.4))
        timer.start()
        return timer

    batch, elapsed = _straggler_race(loop_kind, tmp_path, monkeypatch, 1.6, hold)
    assert batch.results[0].status == STATUS_OK
    assert batch.results[0].text == "attempt 1"  # a cut at the deadline gave "attempt 2", 3 s later
    assert elapsed < 3.2


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_an_answer_that_arrives_while_the_cut_waits_its_turns_is_kept(
    loop_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench fleet, 20,000 pairs under: an answer sent again 0.22 s after it was ready. The cut
    # waits a few turns of the loop, here 0.1 s each (a loop held by the GIL), and the answer
    # comes during them: a turn's callbacks run before its I/O, so the last check ran before
    # the loop had read it. The check must see the bytes waiting on the request's socket.
    # the deadline is at 2 s, the answer at 2.25 s: during the cut's turns, which end at about 2.3 s
    batch, _ = _straggler_race(loop_kind, tmp_path, monkeypatch, 2.25, _slow_turns)
    assert batch.results[0].status == STATUS_OK
    assert batch.results[0].text == "attempt 1"  # cut, it would be "attempt 2", 3 s later


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_a_cut_waiting_its_turns_never_cuts_the_attempt_after_the_one_it_was_for(
    loop_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cut waits turns of the loop after the deadline. If the attempt it was for ends in them
    # (a 429 while our other requests run at its URL: the window alone holds that URL, and the
    # retry goes at once to the other one), the next attempt is in flight when the cut's turns
    # are up: the cut belongs to the attempt it was set for, and must not cut the retry.
    _use_loop(loop_kind, monkeypatch)

    def race(n: int) -> tuple[int, dict, Any]:
        if n == 1:
            time.sleep(2.1)  # after its 2-s deadline, during the cut's turns (0.1 s each)
            return 429, {}, {"error": "full"}
        time.sleep(0.3)
        return 200, {}, chat_payload(f"attempt {n}")

    # "hold" requests, sent at 1 s, still run at the race's URL when its 429 comes
    answer = _race_answers(race, hold_s=1.5)
    with FakeOpenAI(answer).running() as a, FakeOpenAI(answer).running() as b:
        backend = _backend([a.url, b.url], concurrency=64, timeout_s=30.0)
        client = ChatClient(backend, LLMCache(tmp_path / "race"))
        client.chat(_convs(60), SamplingParams(max_tokens=16))  # a p99 of milliseconds: a 2-s deadline
        turns = _slow_turns(backend._ensure_loop())
        # three more requests: whichever URL the race went to holds at least one of them
        hold = ChatClient(backend, LLMCache(tmp_path / "hold"))
        holding = threading.Timer(1.0, lambda: hold.chat(_convs(3, "hold"), SamplingParams(max_tokens=16)))
        holding.start()
        batch = client.chat(_convs(1, "race"), SamplingParams(max_tokens=16))
        holding.join()
        cut = backend.stragglers_cut
        backend.close()
        turns.cancel()
    assert batch.results[0].status == STATUS_OK
    assert batch.stats.http_429 == 1
    # the retry kept: cut by the first attempt's pending cut, it would be "attempt 3"
    assert batch.results[0].text == "attempt 2" and cut == 0


def test_the_cut_sees_an_answer_arriving_on_a_socket_numbered_past_select_s_limit() -> None:
    # select() takes descriptors under 1,024 only (ValueError past it), and a run's roles hold
    # hundreds of connections each (the soft limit here is far higher): past 1,024 the cut's socket
    # check must still see the bytes waiting, not fall back to cutting.
    import resource
    import socket
    from types import SimpleNamespace

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    high = 1500
    if soft <= high:
        if hard != resource.RLIM_INFINITY and hard <= high:
            pytest.skip(f"descriptors limited to {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (high + 1, hard))
    ours, server = socket.socketpair()
    fd = os.dup2(ours.fileno(), high)
    ours.close()
    sock = socket.socket(fileno=fd)
    conn = SimpleNamespace(
        protocol=SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda _k: sock))
    )
    task = SimpleNamespace(_fut_waiter=None)
    try:
        assert not _answer_arriving(task, conn)  # nothing has come yet
        server.sendall(b"HTTP/1.1 200 OK\r\n")
        time.sleep(0.05)
        assert _answer_arriving(task, conn)
    finally:
        sock.close()
        server.close()
        if soft <= high:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
