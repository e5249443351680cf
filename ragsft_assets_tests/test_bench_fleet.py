"""The fleet simulator's behaviours (429 + Retry-After, injected errors, slot accounting, scripted
pass rates, stage recognition on the package's own prompts) and a tiny ``bench fleet`` run."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from ragsft_assets.bench import fleet as bench_fleet
from ragsft_assets.bench.fleet_sim import DEFAULT_RATES, FleetSimulator, Script, stage_of
from ragsft_assets.cli.bench import format_line
from ragsft_assets.prompts import load_prompt


def _chat(url: str, content: str, max_tokens: int = 16) -> httpx.Response:
    body = {
        "model": "sim/fleet-32b",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    }
    return httpx.post(f"{url}/chat/completions", content=orjson.dumps(body), timeout=30.0)


def test_models_lists_the_served_model() -> None:
    with FleetSimulator(
        replicas=2, slots=2, error_rate=0.0, model="m/x", root="/w/x", max_model_len=999
    ) as f:
        assert len(f.base_urls) == 2 and len(set(f.base_urls)) == 2
        for url in f.base_urls:
            entry = httpx.get(f"{url}/models").json()["data"][0]
            assert entry == {"id": "m/x", "object": "model", "root": "/w/x", "max_model_len": 999}


def test_a_full_replica_answers_429_with_retry_after() -> None:
    # One replica, two slots, about 5 s per request: the third concurrent request finds no slot.
    with FleetSimulator(replicas=1, slots=2, prefill_tok_s=5.0, decode_tok_s=1000.0, error_rate=0.0) as f:
        url = f.base_urls[0]
        answers: list[httpx.Response] = []
        threads = [
            threading.Thread(target=lambda i=i: answers.append(_chat(url, "x" * 60 + str(i))))
            for i in range(2)
        ]
        for t in threads:
            t.start()
        while f.stats()["in_flight"] < 2:  # both admitted (a loaded machine may take a while)
            time.sleep(0.05)
        third = _chat(url, "the third")
        for t in threads:
            t.join()
        assert third.status_code == 429
        assert int(third.headers["Retry-After"]) >= 1
        assert [a.status_code for a in answers] == [200, 200]
        s = f.stats()
        assert s["rejected_429"] == 1 and s["ok"] == 2 and s["max_in_flight"] == 2
        assert s["max_in_flight_per_replica"] == [2]


def test_error_injection_rate_and_kinds() -> None:
    n, rate = 400, 0.2
    with FleetSimulator(replicas=1, slots=512, error_rate=rate, seed=7, time_scale=0.0) as f:
        codes: list[int | str] = []
        with httpx.Client(timeout=30.0) as client:
            for i in range(n):
                body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]})
                try:
                    codes.append(client.post(f"{f.base_urls[0]}/chat/completions", content=body).status_code)
                except httpx.TransportError:
                    codes.append("reset")
        s = f.stats()
    errors_500, resets = codes.count(500), codes.count("reset")
    assert 0.12 * n < errors_500 + resets < 0.28 * n  # about the configured share
    assert errors_500 > 0.3 * (errors_500 + resets) and resets > 0.3 * (errors_500 + resets)  # half and half
    assert (s["errors_500"], s["resets"], s["ok"]) == (errors_500, resets, codes.count(200))
    assert s["requests"] == n and s["retries"] == errors_500 + resets


def test_slot_accounting_follows_the_latency_model() -> None:
    prefill, decode, scale = 2000.0, 200.0, 4.0
    exact = {"batch_floor": 1.0, "jitter": 0.0, "tail_rate": 0.0, "stall_rate": 0.0}  # work = latency
    with FleetSimulator(
        replicas=2,
        slots=4,
        prefill_tok_s=prefill,
        decode_tok_s=decode,
        error_rate=0.0,
        time_scale=scale,
        **exact,
    ) as f:
        expected = 0.0
        lock = threading.Lock()

        def one(i: int) -> None:
            nonlocal expected
            usage = _chat(f.base_urls[i % 2], f"Question : q{i}\nIMPOSSIBLE " + "mot " * (20 * i)).json()[
                "usage"
            ]
            with lock:
                expected += (usage["prompt_tokens"] / prefill + usage["completion_tokens"] / decode) * scale

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s = f.stats()
        # A slot is busy for the real time it is held: the work, plus the event loop's own lag.
        lag = 0.1 * 8
        assert expected * 0.99 <= s["slot_seconds"] <= expected + lag
        assert s["stages"]["ablation"]["ok"] == 8
        assert expected * 0.99 <= s["stages"]["ablation"]["busy_s"] <= expected + lag
        assert 0 < s["max_in_flight"] <= 8 and s["slots"] == 8
        assert 0 < s["utilization"] <= 1.0
        assert s["duplicated"] == 0 and s["distinct_ok"] == 8
        _chat(f.base_urls[0], "Question : q0\nIMPOSSIBLE ")  # the same body again: a duplicate
        again = f.stats()
        assert again["duplicated"] == 1
        # where it came from: the stage, and how long after its answer it was sent again
        [(stage, gap)] = again["admitted_again"]
        assert stage == "ablation" and 0.0 <= gap < 30.0
        f.reset_stats()
        s = f.stats()
        assert s["requests"] == 0 and s["slot_seconds"] == 0 and s["stages"] == {}


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "X"


@pytest.mark.parametrize("lang", ["fr", "en"])
def test_stages_are_recognised_from_the_package_prompts(lang: str) -> None:
    expected = {
        "multihop_question": "draft",
        "multihop_ablation": "ablation",
        "multihop_first_hop": "first_hop",
        "multihop_criteria": "criteria",
        "multihop_bridge_judge": "bridge_judge",
        "multihop_language_judge": "language_judge",
        "multihop_publishability": "publishability",
        "multihop_descriptor_check": "descriptor_check",
        "rag_judge_factual": "rag_factual",
        "rag_judge_refusal": "rag_refusal",
        "rag_judge_language": "rag_language",
        "rag_system": "rag_answer",
    }
    for task, stage in expected.items():
        text = load_prompt(task, lang).text.format_map(_Blank())
        if task == "rag_system":
            text += "\n[Source 1]\n* filename: X\n\n[CHUNK_START]\n\nX\n\n[CHUNK_END]"
        if task == "multihop_question":
            text = text.replace("Document A", "Document A")  # as rendered
        assert stage_of(text) == stage, task


def _draft_prompt(i: int) -> str:
    return load_prompt("multihop_question", "fr").render(
        n=3,
        alias=f"Pont {i}",
        a_title=f"Source {i}",
        a_sentences="[0] Le Pont {i} traverse la ville.".replace("{i}", str(i)),
        b_title=f"Pont {i}",
        b_sentences=f"[0] Il fut construit en {1800 + i % 200} par Gustave.\n[1] Sa longueur est modeste.",
    )


def test_scripted_pass_rates_follow_the_funnel_and_the_seed() -> None:
    script = Script(seed=3)
    questions, unreadable = [], 0
    for i in range(1500):
        stage, reply = script.answer([{"role": "user", "content": _draft_prompt(i)}])
        assert stage == "draft"
        if reply.startswith("{"):
            questions += [q["question"] for q in orjson.loads(reply)["questions"]]
        else:
            unreadable += 1
    assert unreadable / 1500 == pytest.approx(1 - DEFAULT_RATES["draft_call_readable"], abs=0.01)
    assert len(questions) == 3 * (1500 - unreadable)
    abl = load_prompt("multihop_ablation", "fr")
    passed = 0
    for q in questions:
        known = script.drafted[q]
        ctx = f"Document 1 : {known.a_title}\nA\n\nDocument 2 : {known.b_title}\nB"
        stage, reply = script.answer([{"role": "user", "content": abl.render(context=ctx, question=q)}])
        assert stage == "ablation"
        passed += reply == known.answer
        if reply != known.answer:
            assert reply == "IMPOSSIBLE"
    assert passed / len(questions) == pytest.approx(DEFAULT_RATES["ablation_ab"], abs=0.03)  # about half fail
    # same seed, same answers; another seed, other answers
    again = Script(seed=3).answer([{"role": "user", "content": _draft_prompt(5)}])
    assert again == Script(seed=3).answer([{"role": "user", "content": _draft_prompt(5)}])
    assert Script(seed=4).answer([{"role": "user", "content": _draft_prompt(5)}]) != again
    # a rate can be set per stage
    never = Script(seed=3, rates={"ablation_ab": 0.0})
    never.drafted.update(script.drafted)
    q = questions[0]
    known = script.drafted[q]
    ctx = f"Document 1 : {known.a_title}\nA\n\nDocument 2 : {known.b_title}\nB"
    assert never.answer([{"role": "user", "content": abl.render(context=ctx, question=q)}])[1] == "IMPOSSIBLE"


def test_unknown_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown pass rates"):
        FleetSimulator(rates={"ablation_abc": 0.5})


def test_a_tiny_bench_run_loses_and_repeats_nothing(tmp_path: Path) -> None:
    values = bench_fleet.run(workdir=str(tmp_path), pairs=40, time_scale=0.02, slots=16)
    line = format_line("fleet", values)
    parsed = dict(part.split("=", 1) for part in line.split(" "))
    assert parsed["bench"] == "fleet"
    for key in (
        "utilization",
        "max_in_flight",
        "requests",
        "retries",
        "client_cpu_ms_per_request",
        "peak_rss_mb",
    ):
        assert key in parsed, key
    assert parsed["lost"] == "0" and parsed["duplicated"] == "0" and parsed["gave_up"] == "0"
    assert parsed["swapped"] == "0" and int(parsed["checked"]) == int(parsed["cache_entries"])
    # The closing line ends with what the bars read.
    assert list(parsed)[-6:] == ["regime", "utilization_e2e", "lost", "duplicated", "swapped", "passed"]
    assert parsed["regime"] == "equal" and 0 < float(parsed["utilization_e2e"]) <= 1
    assert int(parsed["requests"]) >= int(parsed["answered"]) > 40  # drafts and more stages ran
    assert int(parsed["max_in_flight"]) <= 2 * 16
    for stage in ("draft", "ablation", "rag_answer"):
        assert int(parsed[f"{stage}_calls"]) > 0, stage
    assert int(parsed["cache_entries"]) == int(parsed["answered"]) - int(parsed["duplicated"])


def test_latency_grows_with_the_sequences_running() -> None:
    # vLLM's decode tokens/s per sequence falls as the batch fills: here a lone request does its
    # work 1 / batch_floor = 2.5x faster than one of a full batch of 8 (no jitter, no tail).
    steady = {"jitter": 0.0, "tail_rate": 0.0, "stall_rate": 0.0, "error_rate": 0.0}
    with FleetSimulator(replicas=1, slots=8, prefill_tok_s=20.0, decode_tok_s=1e6, **steady) as f:
        url = f.base_urls[0]
        content = "Question : x\nIMPOSSIBLE " + "m" * 24  # 20 prompt tokens: 1 s at a full batch
        assert _chat(url, content).json()["usage"]["prompt_tokens"] == 20
        alone = f.stats()["slot_seconds"]  # the slot's real hold time, measured by the fleet
        f.reset_stats()
        threads = [threading.Thread(target=_chat, args=(url, f"{content}{i:03d}")) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s = f.stats()
    assert 0.38 <= alone <= 0.6  # 1 s x 0.4 alone, plus the loop's lag
    assert s["ok"] == 8 and s["max_in_flight"] >= 6
    assert s["slot_seconds"] / 8 > 1.5 * alone  # with the batch full, each went slower


def test_a_stalled_request_is_aborted_when_its_client_times_out() -> None:
    # Every attempt stalls past twice the clients' timeout; the client gives up at its timeout,
    # and the fleet frees the slot at once, as vLLM aborts a request whose client went away.
    with FleetSimulator(replicas=1, slots=2, error_rate=0.0, stall_rate=1.0, timeout_s=0.5) as f:
        body = {"model": "m", "messages": [{"role": "user", "content": "a stall"}], "max_tokens": 4}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{f.base_urls[0]}/chat/completions", content=orjson.dumps(body), timeout=0.5)
        deadline = time.monotonic() + 5
        while f.stats()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        s = f.stats()
    assert s["aborted"] == 1 and s["in_flight"] == 0 and s["ok"] == 0
    assert s["slot_seconds"] < 1.0  # held until the client went away, not for the stall's 2.5 s


def test_an_answer_ready_as_its_client_hangs_up_is_not_an_answer() -> None:
    # A straggler cut (or a timeout) racing the answer: the fleet has it ready just as the client
    # closes the connection. It never reaches the client, which sends the request again; counting
    # it as answered made that retry a "duplicate" (1 in 84,000 requests at 20,000 pairs, under).
    import asyncio

    from ragsft_assets.bench.fleet_sim import _Fleet

    async def scenario() -> tuple[Any, dict[str, Any]]:
        fleet = _Fleet({"replicas": 1, "slots": 4, "error_rate": 0.0, "time_scale": 1e-6, "jitter": 0.0})
        body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
        ready = asyncio.Event()

        class _Closed:
            async def read(self, n: int) -> bytes:
                await ready.wait()
                return b""  # the client hung up as the answer became ready

        async def answered_at_once() -> Any:
            reply = await fleet.complete(0, body, True)
            ready.set()
            return reply

        reply = await fleet._watched(answered_at_once(), _Closed())
        return reply, fleet.stats()

    reply, s = asyncio.run(scenario())
    assert reply is not None and not isinstance(reply, tuple)  # nothing to write: the client left
    assert s["hung_up"] == 1 and s["ok"] == 0 and s["distinct_ok"] == 0 and s["duplicated"] == 0


def test_every_cached_answer_is_checked_against_its_own_request(tmp_path: Path) -> None:
    from ragsft_assets.llm.backends.openai_backend import OpenAIBackend
    from ragsft_assets.llm.cache import LLMCache
    from ragsft_assets.llm.client import ChatClient
    from ragsft_assets.llm.types import SamplingParams

    with FleetSimulator(replicas=1, slots=8, error_rate=0.0, time_scale=0.01) as f:
        backend = OpenAIBackend(f.base_urls, f.model, timeout_s=10.0)
        convs = [[{"role": "user", "content": f"Question : q{i}\nIMPOSSIBLE"}] for i in range(6)]
        batch = ChatClient(backend, LLMCache(tmp_path)).chat(convs, SamplingParams(max_tokens=8))
        backend.close()
        answers = f.answers()
    assert all(r.ok for r in batch.results) and len(answers) == 6
    body_of = OpenAIBackend(["http://127.0.0.1:1/v1"], f.model)._body
    assert bench_fleet.check_answers(tmp_path, answers, body_of) == {
        "checked": 6,
        "swapped": 0,
        "lost": 0,
        "shared": 0,
    }
    # Deliberately swap two cached answers (each now sits under the other's request): both caught.
    db = LLMCache(tmp_path)
    conn = db._conn()
    (k1, r1), (k2, r2) = conn.execute("SELECT key, response FROM calls ORDER BY key LIMIT 2").fetchall()
    conn.execute("UPDATE calls SET response = ? WHERE key = ?", (r2, k1))
    conn.execute("UPDATE calls SET response = ? WHERE key = ?", (r1, k2))
    assert bench_fleet.check_answers(tmp_path, answers, body_of)["swapped"] == 2
    # The right id with another text is caught too; an answer given but not cached is lost.
    resp = orjson.loads(r1)
    conn.execute("UPDATE calls SET response = ? WHERE key = ?", (orjson.dumps({**resp, "text": "x"}), k1))
    conn.execute("DELETE FROM calls WHERE key = ?", (k2,))
    db.close()
    check = bench_fleet.check_answers(tmp_path, answers, body_of)
    assert (check["checked"], check["swapped"], check["lost"]) == (5, 1, 2)
