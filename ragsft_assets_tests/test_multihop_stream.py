"""The streamed multihop chain (``defs/multihop/stream.py``) against the stage-at-a-time run.

``question_drafts`` streams each pair through its draft, checks, the cascade and the judges after
it, in small batches of ready items, to fill the LLM cache; the stages then read their calls from it. Every
asset file, ledger and cache entry must be the stage-at-a-time run's, with the same requests sent,
each once; the only extra calls are the speculative ones (questions the caps then dropped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
import pyarrow as pa
import pytest

from ragsft_assets.defs.multihop import multihop_assets
from ragsft_assets.defs.multihop import stream as streaming
from ragsft_assets.llm.backends.base import Completion
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import SamplingParams
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests import test_multihop_assets as mh
from ragsft_assets_tests.llm_double import ScriptedChatModel

JUDGES = list(streaming.CHAIN)


class RoleBackend:
    """A chat backend answering through a test responder; records each request's conversation and
    the thread that sent it. ``fail_stream``: the first request a stream thread sends raises."""

    def __init__(self, role: str, responder: Callable[[Any], str], fail_stream: bool = False) -> None:
        self.role, self.responder, self.fail_stream = role, responder, fail_stream
        self.sent: list[tuple[str, str]] = []  # (thread name, conversation JSON)
        self._lock = threading.Lock()

    def identity(self) -> dict[str, str]:
        return {"backend": "stream-double", "model": self.role, "weights_sha256": "0" * 64}

    def generate(self, requests: Sequence[Any], on_result: Callable[[int, Completion], None]) -> None:
        thread = threading.current_thread().name
        with self._lock:
            if self.fail_stream and thread.startswith("ragsft-stream"):
                self.fail_stream = False
                raise ConnectionError("the fleet went away for this chunk")
            self.sent += [(thread, orjson.dumps(r.messages).decode()) for r in requests]
        for i, r in enumerate(requests):
            text = self.responder(r.messages)
            on_result(i, Completion(text=text, prompt_tokens=1, completion_tokens=len(text.split())))

    def close(self) -> None:
        pass


def _run(
    home: Path, stream: str, fail_stream: bool = False, where: str = "question_drafts"
) -> tuple[Any, ArtifactStore, dict[str, RoleBackend]]:
    store = ArtifactStore(home=str(home))
    mh.write_corpus(store)
    topics = home / "snapshots" / mh.PARTITION / "topics.tsv"
    topics.parent.mkdir(parents=True, exist_ok=True)
    topics.write_text(
        "# title\ttopic\n" + "".join(f"{t}\t{c}\n" for t, c in mh.TOPICS.items()), encoding="utf-8"
    )
    backends = {
        "generator": RoleBackend("generator", mh.generator_responder),
        "judge": RoleBackend("judge", mh.judge_responder, fail_stream),
        "annotator": RoleBackend("annotator", mh.annotator_responder),
    }
    cache = LLMCache(home / "llm_cache")
    models = {role: ChatClient(b, cache, name=role) for role, b in backends.items()}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [mh.PARTITION])
    # 4 requests in flight: questions at different stages at once, drafts waiting beside judges
    config = {"stream": stream, "stream_in_flight": 4}
    result = dg.materialize(
        [*multihop_assets, *(dg.AssetSpec(k) for k in ("abstracts", "bridge_pairs", "link_graph"))],
        resources={"store": store, "snapshots": SnapshotSource(home=str(home)), **models},
        partition_key=mh.PARTITION,
        instance=instance,
        run_config={"ops": {where: {"config": config}}},
        selection=[a.key for a in multihop_assets],
    )
    assert result.success
    return result, store, backends


def _files(store: ArtifactStore) -> dict[str, bytes]:
    root = store.root / mh.PARTITION
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cache(home: Path) -> dict[str, tuple[bytes, bytes]]:
    cache = LLMCache(home / "llm_cache")
    try:
        rows = cache._conn().execute("SELECT key, request, response FROM calls").fetchall()
    finally:
        cache.close()
    return {k: (bytes(q), bytes(r)) for k, q, r in rows}


def _metadata(result: Any, asset: str) -> dict[str, Any]:
    mats = result.asset_materializations_for_node(asset)
    return {k: v.value for k, v in mats[0].metadata.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    plain = tmp_path_factory.mktemp("plain")
    streamed = tmp_path_factory.mktemp("streamed")
    return (plain, *_run(plain, "off")), (streamed, *_run(streamed, "on"))


def _same_cache_but_speculation(plain_home: Path, stream_home: Path, speculative: int) -> None:
    """The streamed cache holds every entry of the stage-at-a-time run, byte for byte, plus at most
    ``speculative`` entries: calls for questions the caps dropped after the stream had asked them."""
    plain, streamed = _cache(plain_home), _cache(stream_home)
    assert {k: streamed.get(k) for k in plain} == plain  # same keys, same requests, same answers
    assert len(set(streamed) - set(plain)) <= speculative


def test_streamed_run_writes_what_the_stage_at_a_time_run_writes(runs):
    (plain_home, _, plain, _), (stream_home, result, streamed, _) = runs
    md = _metadata(result, "ablation_verdicts")
    assert md["stream/judges"] == ", ".join(JUDGES)  # every judge streamed, in chain order
    drafts_md = _metadata(result, "question_drafts")
    assert drafts_md["stream/pairs"] == md["stream/pairs"] > 4 and drafts_md["stream/in_flight"] == 4
    assert md["stream/questions"] > 4 and md["stream/failed"] == 0 and md["stream/calls"] > 0
    assert "stream/stopped" not in md  # it ran to its end
    # beside the stream the distractor search ran in a worker process of its own, and found the same
    assert _metadata(result, "distractors")["search_apart"] is True
    assert _metadata(runs[0][1], "distractors")["search_apart"] is False
    a, b = _files(plain), _files(streamed)
    assert sorted(a) == sorted(b)
    assert any(name.startswith("descriptor_check") for name in a)  # the chain's last judge wrote
    assert [n for n in a if a[n] != b[n]] == []  # every table, ledger and recipe record
    _same_cache_but_speculation(plain_home, stream_home, md["stream/speculative_calls"])
    # the stream applies the caps itself: what it sent on and the judge never saw, the distractor
    # search dropped (the test corpus is small: a few questions find too few distractors)
    assert set(md["stream/speculative_reasons"]) <= {"too_few_distractors"}


def test_stream_sends_each_request_once_and_the_stages_read_the_cache(runs):
    (_, _, _, plain), (_, result, _, streamed) = runs
    speculative = _metadata(result, "ablation_verdicts")["stream/speculative_calls"]
    extra = 0
    for role in ("generator", "judge", "annotator"):
        sent = Counter(conv for _, conv in streamed[role].sent)
        assert not Counter(conv for _, conv in plain[role].sent) - sent, role  # every stage's call made
        assert max(sent.values()) == 1, role  # identical prompts sent once, as stage at a time
        extra += sum((sent - Counter(conv for _, conv in plain[role].sent)).values())
        # the stages found the stream's calls in the cache: the stream's threads sent them all
        origins = Counter(t.split("_")[0] for t, _ in streamed[role].sent)
        assert set(origins) == {"ragsft-stream"}, role
    assert extra <= speculative  # what the stage-at-a-time run did not send: the speculation only
    assert streamed["judge"].sent and streamed["annotator"].sent


def test_the_cascade_streams_alone_when_the_drafts_did_not(runs, tmp_path):
    (plain_home, _, plain, _), _ = runs
    result, store, backends = _run(tmp_path, "on", where="ablation_verdicts")
    md = _metadata(result, "ablation_verdicts")
    assert md["stream/pairs"] == 0 and md["stream/questions"] > 4 and md["stream/speculative_calls"] == 0
    assert "stream/pairs" not in _metadata(result, "question_drafts")
    assert _files(store) == _files(plain)
    assert _cache(tmp_path) == _cache(plain_home)  # judged questions only: nothing speculative
    assert {t.split("_")[0] for t, _ in backends["generator"].sent} == {"MainThread"}
    assert {t.split("_")[0] for t, _ in backends["judge"].sent} == {"ragsft-stream"}


def test_a_failed_call_in_the_stream_costs_time_not_output(runs, tmp_path):
    (plain_home, _, plain, _), (_, streamed_result, _, _) = runs
    result, store, backends = _run(tmp_path, "on", fail_stream=True)
    md = _metadata(result, "ablation_verdicts")
    assert md["stream/failed"] == 1
    assert _files(store) == _files(plain)
    _same_cache_but_speculation(plain_home, tmp_path, md["stream/speculative_calls"])
    # the failed question's requests were sent by the stages, after the stream
    assert any(not t.startswith("ragsft-stream") for t, _ in backends["judge"].sent)


class _Gate(RoleBackend):
    """A backend whose calls wait for ``gate``; counts the calls that started."""

    def __init__(self, role: str, responder: Callable[[Any], str]) -> None:
        super().__init__(role, responder)
        self.gate = threading.Event()
        self.started = 0

    def generate(self, requests: Sequence[Any], on_result: Callable[[int, Completion], None]) -> None:
        with self._lock:
            self.started += len(requests)  # requests, whatever batch they come in
        self.gate.wait(10)
        super().generate(requests, on_result)


def _pairs_prefetch(tmp_path: Path, finished: Callable[[], bool] | None = None):
    """A drafts-only prefetch over the test corpus's pairs, 2 in flight, on a gated generator."""
    from ragsft_assets.multihop import generation
    from ragsft_assets.prompts import load_prompt

    store = ArtifactStore(home=str(tmp_path))
    mh.write_corpus(store)
    abstracts = store.read(mh.PARTITION, "abstracts")
    docs = generation.docs_by_id(abstracts)
    pairs, _ = generation.first_pairs(store.read(mh.PARTITION, "bridge_pairs"), docs, 100)
    backend = _Gate("generator", mh.generator_responder)
    model = ChatClient(backend, LLMCache(tmp_path / "cache"), name="generator")
    step = streaming.DraftStep(
        pairs, docs, model, load_prompt("multihop_question", "fr"), 2, generation.GENERATION_PARAMS, 10, 70
    )
    log = logging.getLogger("test-stream")
    prefetch = streaming.Prefetch(
        drafts=step,
        cascade=None,
        judge=None,
        stages=[],
        abstracts=abstracts,
        partition=mh.PARTITION,
        log=log,
        limit=2,
        finished=finished,
    )
    return prefetch, backend, pairs


def test_a_stream_whose_run_ended_sends_nothing_more(tmp_path, monkeypatch):
    from ragsft_assets.defs import streaming as shared

    monkeypatch.setattr(shared, "POLL_S", 0.05)
    ended = threading.Event()
    prefetch, backend, pairs = _pairs_prefetch(tmp_path, finished=ended.is_set)
    assert len(pairs) > 4
    prefetch.start()
    deadline = time.monotonic() + 10
    while backend.started < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.started == 2  # the budget: 2 in flight, the other pairs in line
    ended.set()  # the run failed elsewhere: the stream must not go on sending
    deadline = time.monotonic() + 10
    while not prefetch.report.stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    backend.gate.set()
    report = prefetch.join()
    assert report.stopped == "its run ended"
    assert backend.started == 2 and len(backend.sent) == 2


def test_the_budget_holds_its_limit_and_a_release_lets_the_next_in():
    budget = streaming.Budget(2)
    held = [budget.acquire(1), budget.acquire(1)]
    order: list[str] = []

    def take(name: str) -> None:
        n = budget.acquire(1)
        order.append(name)
        budget.release(n)

    waiting = [threading.Thread(target=take, args=(f"call{i}",)) for i in range(3)]
    for t in waiting:
        t.start()
    time.sleep(0.05)
    assert order == [] and budget.used == 2  # the limit holds: three calls wait
    budget.release(held.pop())
    for t in waiting:
        t.join(5)
    assert sorted(order) == ["call0", "call1", "call2"] and budget.used == 1


def test_a_call_gives_its_budget_back_request_by_request_not_at_its_slowest_answer(tmp_path: Path) -> None:
    # A batch of 16 waiting on one straggler held 16 slots of the budget: with the budget all held
    # so, the fleet ran at 0.8 in bench fleet's cascade phase. Each request gives its slot back
    # as it answers.
    from ragsft_assets.defs import streaming as shared

    class _Lines(shared.BackgroundStream[shared.StreamCounts]):
        def progress(self) -> str:
            return "lines"

    gate, answered = threading.Event(), threading.Event()

    class _Straggler:
        def identity(self) -> dict[str, str]:
            return {"backend": "fake", "model": "m", "weights_sha256": "w"}

        def generate(self, requests: Sequence[Any], on_result: Callable[..., None]) -> None:
            for i, r in enumerate(requests):
                if i == len(requests) - 1:
                    answered.set()
                    gate.wait(10)  # the last one straggles
                on_result(i, Completion(text="ok:" + r.messages[-1]["content"]))

        def close(self) -> None:
            pass

    stream = _Lines(shared.StreamCounts(), lines=("x",), log=logging.getLogger("t"), limit=8)
    metered = shared.Metered(ChatClient(_Straggler(), LLMCache(tmp_path / "c")), stream)
    convs = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]
    t = threading.Thread(target=metered.chat, args=(convs, SamplingParams()))
    t.start()
    assert answered.wait(10)
    assert stream.budget.used == 1  # five answered: only the straggler holds its slot
    gate.set()
    t.join(10)
    assert stream.budget.used == 0 and stream.report.calls == 6


def test_a_batched_line_takes_what_waits_up_to_a_batch_in_few_workers():
    # A thread and an HTTP batch per question cost 5-6 ms of client CPU per request and a thread per
    # question in flight (2.3 GB): a batched line's workers each take every item waiting.
    from ragsft_assets.defs import streaming as shared

    class _Lines(shared.BackgroundStream[shared.StreamCounts]):
        def progress(self) -> str:
            return "lines"

    stream = _Lines(shared.StreamCounts(), lines=("x",), log=logging.getLogger("t"), limit=32)
    gate, batches, busy, most = threading.Event(), [], [0], [0]
    lock = threading.Lock()

    def work(items: list[int]) -> None:
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        gate.wait(10)
        with lock:
            busy[0] -= 1
            batches.append(list(items))

    stream.batched("x", work, items=8)  # workers: max(4, 2 x 32 / 8) = 8
    for i in range(200):
        stream.put("x", i)
    time.sleep(0.2)
    gate.set()
    stream.join()
    assert sorted(i for b in batches for i in b) == list(range(200))  # each item once
    assert max(len(b) for b in batches) == 8  # never more than a batch
    assert most[0] <= 8  # never more workers than the line's
    assert len(batches) <= 200 // 8 + 8  # items that piled up went together
    assert sum(len(b) == 8 for b in batches) >= 15


def test_a_funnel_line_has_more_workers_and_the_cascade_is_one():
    # A cascade batch makes rounds on fewer and fewer questions: with as many workers as the draft
    # line, the fleet ran at 0.75-0.8 after the drafts.
    from ragsft_assets.defs import streaming as shared

    class _Lines(shared.BackgroundStream[shared.StreamCounts]):
        def progress(self) -> str:
            return "lines"

    stream = _Lines(shared.StreamCounts(), lines=("x", "y"), log=logging.getLogger("t"), limit=64)
    stream.batched("x", lambda items: None)
    stream.batched("y", lambda items: None, workers_factor=2)
    assert stream._batches["x"].workers == 8 and stream._batches["y"].workers == 16  # 2 x 64 / 16 x 1, x 2
    stream.budget.limit = 100_000  # a limit far past any fleet's slots: the workers stay capped
    stream.batched("z", lambda items: None, workers_factor=2)
    assert stream._batches["z"].workers == shared.MAX_LINE_WORKERS
    prefetch = streaming.Prefetch(
        drafts=None,
        cascade=None,
        judge=None,
        stages=[],
        abstracts=pa.table({"id": pa.array([], pa.string())}),
        partition="p",
        log=logging.getLogger("t"),
        limit=64,
    ).start()
    prefetch.join()
    workers = {line: b.workers for line, b in prefetch._batches.items()}
    assert workers["cascade"] == streaming.CASCADE_WORKERS_FACTOR * workers["draft"] == 2 * workers["judges"]


def test_a_later_batched_line_waits_while_an_earlier_line_has_items_waiting():
    # Drafts first: the CPU stages after the drafts (checks, distractor search) then run while the
    # cascade and judges still fill the fleet, not at the stream's end.
    from ragsft_assets.defs import streaming as shared

    class _Lines(shared.BackgroundStream[shared.StreamCounts]):
        def progress(self) -> str:
            return "lines"

    stream = _Lines(shared.StreamCounts(), lines=("a", "b"), log=logging.getLogger("t"), limit=8)
    order: list[str] = []
    lock = threading.Lock()

    def work_a(items: list[int]) -> None:
        time.sleep(0.01)
        with lock:
            order.extend("a" for _ in items)
        for i in items:
            stream.put("b", i)  # each a item makes a b item, as a draft makes questions

    def work_b(items: list[int]) -> None:
        with lock:
            order.extend("b" for _ in items)

    stream.batched("a", work_a, items=4)
    stream.batched("b", work_b, items=4)
    for i in range(200):
        stream.put("a", i)
    stream.join()
    assert order.count("a") == order.count("b") == 200  # nothing stranded
    # no b batch started while a items waited in line: only the a batches already running
    # when the last a items were taken finish after the first b
    first_b = order.index("b")
    assert order[:first_b].count("a") >= 200 - 4 * stream._batches["a"].workers


def test_a_stream_keeps_twice_the_roles_window_in_flight():
    # A batch holds its share of the budget until its slowest call answers: at exactly the window
    # (bench fleet, client at half the slots) the answered calls' slots stayed empty meanwhile.
    from ragsft_assets.defs import streaming as shared

    class _Http:
        base_urls = ["http://a/v1", "http://b/v1"]

        def window_ceiling(self) -> int:
            return 128

    assert shared.in_flight(_Http()) == 2 * 128 * 2
    assert shared.in_flight(object()) == shared.IN_FLIGHT  # no per-URL limit: the default


def test_auto_streams_only_cached_roles_on_an_http_fleet(tmp_path):
    double = ScriptedChatModel(mh.judge_responder)
    assert streaming.usable(double, "auto") == "model without a cache on an HTTP backend"
    assert streaming.usable(double, "off") == "stream off"
    cached = ChatClient(RoleBackend("judge", mh.judge_responder), LLMCache(tmp_path))
    assert streaming.usable(cached, "on") is None
    assert streaming.usable(cached, "auto") is not None  # not an HTTP backend
    with pytest.raises(ValueError, match="needs an LLM cache"):
        streaming.usable(double, "on")
    with pytest.raises(ValueError, match="stream must be one of"):
        streaming.usable(cached, "always")


def test_single_flight_sends_a_request_in_flight_once(tmp_path):
    release = threading.Event()

    class Slow(RoleBackend):
        def generate(self, requests, on_result):
            release.wait(5)
            super().generate(requests, on_result)

    backend = Slow("judge", lambda messages: "IMPOSSIBLE")
    flight = streaming.SingleFlight(ChatClient(backend, LLMCache(tmp_path)))
    conv = [{"role": "user", "content": "Question: same?"}]
    params = SamplingParams(max_tokens=8)
    out: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda i=i: out.append(flight.chat([conv, [{"role": "user", "content": f"q{i}"}]], params))
        )
        for i in range(3)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(flight._flying) < 4 and time.monotonic() < deadline:  # all three threads have asked
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(10)
    assert len(out) == 3 and all(r.results[0].text == "IMPOSSIBLE" for r in out)
    sent = [conv for _, conv in backend.sent]
    assert sent.count(orjson.dumps(conv).decode()) == 1  # the two other threads waited, then read the cache
    assert len(sent) == 4


def _caps_world(seed: int, answers: list[str], n_docs: int = 12, density: float = 0.3):
    import random

    from ragsft_assets.ids import question_id
    from ragsft_assets.multihop import caps, generation

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    pairs = [
        generation.Pair(f"p{a}-{b}", docs[a], "A", docs[b], "B", "", "train")
        for a in range(n_docs)
        for b in range(n_docs)
        if a != b and rng.random() < density
    ]
    candidates = {}
    for p in pairs:
        for i in range(3):
            qid = question_id(p.a_id, p.b_id, i)
            if rng.random() < 0.8:  # the others failed their checks: no candidates
                words = " ".join(rng.sample(["où", "est", "la", "ville", "de", "né", "qui", "quand"], 5))
                answer = rng.choice(answers) if answers else qid  # no list: every answer its own
                candidates[qid] = caps.CapCandidate(qid, words, answer, p.a_id, p.b_id)
    return rng, pairs, candidates


def _stream_caps(pairs, candidates, arrivals) -> tuple[list[str], int]:
    from ragsft_assets.ids import question_id

    order = streaming._CapsOrder(streaming.CapsStep(3, 2, 3, 0.6), pairs, 3)
    kept = []
    for p in arrivals:
        ids = [question_id(p.a_id, p.b_id, i) for i in range(3)]
        kept += [
            item for item, _ in order.add(ids, [(candidates[q], q, None) for q in ids if q in candidates])
        ]
    return sorted(kept), order.decided


def test_the_caps_decide_as_the_drafts_come_in_what_they_decide_over_all():
    from ragsft_assets.multihop import caps

    # without near duplicates (every answer its own), any order of arrival gives the caps' own
    # decisions: a question waits only for the earlier ones of its source and bridge documents
    rng, pairs, candidates = _caps_world(7, [])
    expected = caps.apply_caps(list(candidates.values()), 3, 2, 3, 0.6)
    kept_all = sorted(q for q, v in expected.items() if v == "kept")
    assert 0 < len(kept_all) < len(expected) and set(expected.values()) > {"kept"}
    for trial in range(5):
        arrivals = list(pairs)
        rng.shuffle(arrivals)  # drafts answer in any order
        kept, decided = _stream_caps(pairs, candidates, arrivals)
        assert decided == 3 * len(pairs), trial  # every question decided once all are in
        assert kept == kept_all, trial
    # with near duplicates too, drafts that come in the caps' order give exactly their decisions
    rng, pairs, candidates = _caps_world(8, ["Paris", "Lyon", "Nice"])
    expected = caps.apply_caps(list(candidates.values()), 3, 2, 3, 0.6)
    assert caps.NEAR_DUPLICATE in expected.values()
    order = streaming._CapsOrder(streaming.CapsStep(3, 2, 3, 0.6), pairs, 3)
    in_order = sorted(pairs, key=lambda p: order.first_position[p.id])
    kept, _ = _stream_caps(pairs, candidates, in_order)
    assert kept == sorted(q for q, v in expected.items() if v == "kept")


def test_a_slow_draft_holds_only_the_questions_of_its_documents():
    from ragsft_assets.ids import question_id

    # a sparse link graph, as a snapshot's (a few pairs per document)
    _, pairs, candidates = _caps_world(9, [], n_docs=200, density=0.008)
    order = streaming._CapsOrder(streaming.CapsStep(3, 2, 3, 0.6), pairs, 3)
    in_order = sorted(pairs, key=lambda p: order.first_position[p.id])
    # the draft of the caps' first question (in_order[0]) has not come
    for p in in_order[1:]:
        ids = [question_id(p.a_id, p.b_id, i) for i in range(3)]
        order.add(ids, [(candidates[q], q, None) for q in ids if q in candidates])
    waiting = 3 * len(pairs) - order.decided
    assert waiting >= 3  # the slow pair's own questions at least
    assert order.decided >= 0.9 * 3 * len(pairs)  # but nearly every other question went on


def test_a_run_status_that_cannot_be_read_does_not_stop_the_stream(tmp_path, monkeypatch):
    """The watcher reads the run's status from its own thread; an in-memory instance refuses that
    (seen in CI under load: the stream stopped and the stages sent its calls). Not knowing is not
    an ended run: the stream goes on."""
    from ragsft_assets.defs import streaming as shared

    monkeypatch.setattr(shared, "POLL_S", 0.02)

    def unreadable() -> bool:
        raise RuntimeError("SQLite objects created in a thread can only be used in that same thread")

    prefetch, backend, pairs = _pairs_prefetch(tmp_path, finished=unreadable)
    prefetch.start()
    time.sleep(0.3)  # many polls, each failing
    assert not prefetch.report.stopped
    backend.gate.set()
    report = prefetch.join()
    assert not report.stopped and len(backend.sent) == len(pairs)  # every pair drafted
