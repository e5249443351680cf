"""The streamed rag_sft chain (``defs/rag_sft/stream.py``) against the stage-at-a-time run.

``rag_responses`` streams each prompt through its generator call and, as soon as it answers, the
example's verdict judging, to fill the LLM cache; ``rag_responses`` and ``rag_verdicts`` then read
their calls from it. Every file, ledger and cache entry must be the stage-at-a-time run's, with
the same requests sent, each once, all by the stream's threads.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
import pytest

from ragsft_assets.defs.rag_sft.assets import rag_prompts, rag_responses, rag_sft, rag_verdicts
from ragsft_assets.llm.backends.openai_backend import OpenAIBackend
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.rag_sft import examples, steps
from ragsft_assets.rag_sft.hotpot_input import original_to_hf_table
from ragsft_assets.rag_sft.recipes import resolve
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.fake_openai import FakeOpenAI, chat_payload
from ragsft_assets_tests.test_multihop_stream import RoleBackend, _cache, _metadata
from ragsft_assets_tests.test_rag_sft_assets import PARTITION, RECORDS, generator_responder, judge_responder

STAGES = ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
RESPONDERS = {"generator": generator_responder, "judge": judge_responder}
# a judge setting of rag_verdicts' own (rag_responses keeps the recipe's 160): the stream judges
# as rag_verdicts will, under its config, or the judge's cache keys differ
VERDICTS_OVERRIDES = {"factual_judge_max_tokens": 200}


def _run(
    home: Path,
    stream: str,
    *,
    fail: tuple[str, ...] = (),
    models: dict[str, Any] | None = None,
    assets: tuple[dg.AssetsDefinition, ...] = (rag_prompts, rag_responses, rag_verdicts, rag_sft),
) -> tuple[Any, ArtifactStore, dict[str, RoleBackend]]:
    store = ArtifactStore(home=str(home))
    store.write_splits(original_to_hf_table(RECORDS), PARTITION, "multihop_questions")
    backends = {role: RoleBackend(role, r, role in fail) for role, r in RESPONDERS.items()}
    cache = LLMCache(home / "llm_cache")
    models = {role: ChatClient(b, cache, name=role) for role, b in backends.items()} | (models or {})
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    ops: dict[str, Any] = {n: {"config": {"tokenizer": "whitespace"}} for n in STAGES}
    # 4 requests in flight: generator calls and judges of earlier examples at once
    ops["rag_responses"]["config"] |= {"stream": stream, "stream_in_flight": 4}
    ops["rag_verdicts"]["config"] |= {"overrides": VERDICTS_OVERRIDES}
    result = dg.materialize(
        list(assets),
        resources={"store": store, **models},
        partition_key=PARTITION,
        instance=instance,
        run_config={"ops": {a.key.path[-1]: ops[a.key.path[-1]] for a in assets}},
    )
    assert result.success
    return result, store, backends


def _files(store: ArtifactStore) -> dict[str, bytes]:
    root = store.root / PARTITION
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _sent(backend: RoleBackend) -> Counter:
    return Counter(conv for _, conv in backend.sent)


def _threads(backend: RoleBackend) -> set[str]:
    return {t.split("_")[0] for t, _ in backend.sent}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    plain = tmp_path_factory.mktemp("plain")
    streamed = tmp_path_factory.mktemp("streamed")
    return (plain, *_run(plain, "off")), (streamed, *_run(streamed, "on"))


def test_streamed_run_writes_what_the_stage_at_a_time_run_writes(runs):
    (plain_home, _, plain, _), (stream_home, result, streamed, _) = runs
    prompts = len(streamed.read(PARTITION, "rag_prompts"))
    responses, verdicts = _metadata(result, "rag_responses"), _metadata(result, "rag_verdicts")
    assert responses["stream/prompts"] == prompts > 4 and responses["stream/in_flight"] == 4
    assert verdicts["stream/judged"] == prompts and verdicts["stream/failed"] == 0
    assert verdicts["stream/calls"] > prompts  # the generator calls and the judges
    a, b = _files(plain), _files(streamed)
    assert sorted(a) == sorted(b) and any(n.startswith("_ledger/rag_verdicts") for n in a)
    assert [n for n in a if a[n] != b[n]] == []  # every table, ledger, recipe record, statistics
    assert _cache(stream_home) == _cache(plain_home)  # same keys, requests and answers; nothing more


def test_stream_sends_each_request_once_and_the_stages_read_the_cache(runs):
    (_, _, _, plain), (_, result, _, streamed) = runs
    for role in ("generator", "judge"):
        assert _sent(streamed[role]) == _sent(plain[role]), role  # the same requests, each once
        assert max(_sent(streamed[role]).values()) == 1, role
        assert _threads(streamed[role]) == {"ragsft-stream"}, role  # all by the stream's threads
        assert _threads(plain[role]) == {"MainThread"}, role
    # the stages found every call in the cache
    assert _metadata(result, "rag_responses")["llm/calls"] == 0
    assert _metadata(result, "rag_verdicts")["llm/calls"] == 0


def test_a_failed_call_in_the_stream_costs_time_not_output(runs, tmp_path):
    (plain_home, _, plain, plain_sent), _ = runs
    result, store, backends = _run(tmp_path, "on", fail=("generator", "judge"))
    md = _metadata(result, "rag_verdicts")
    assert md["stream/failed"] == 2  # one batch's generator call, another's judge call
    assert _files(store) == _files(plain)
    assert _cache(tmp_path) == _cache(plain_home)
    for role in ("generator", "judge"):
        assert _sent(backends[role]) == _sent(plain_sent[role]), role
        # the failed calls were sent by the stages, after the stream
        assert _threads(backends[role]) == {"ragsft-stream", "MainThread"}, role
    # the failed batch's prompts (every prompt waiting when it started, up to 16): not all of them
    failed_batch = _metadata(result, "rag_responses")["llm/calls"]
    assert 1 <= failed_batch <= min(16, md["stream/prompts"])


def _http(server: FakeOpenAI) -> OpenAIBackend:
    return OpenAIBackend([server.url], "served-model", timeout_s=10.0, backoff_s=0.01, max_retries=2)


def _fake(role: str) -> FakeOpenAI:
    responder = RESPONDERS[role]
    return FakeOpenAI(lambda path, body: (200, {}, chat_payload(responder(body["messages"]))))


def test_auto_streams_only_cached_roles_on_an_http_fleet(tmp_path):
    with _fake("generator").running() as gen, _fake("judge").running() as judge:
        cache = LLMCache(tmp_path / "http" / "llm_cache")
        both = {
            "generator": ChatClient(_http(gen), cache, name="generator"),
            "judge": ChatClient(_http(judge), cache, name="judge"),
        }
        result, store, _ = _run(tmp_path / "http", "auto", models=both)
        prompts = len(store.read(PARTITION, "rag_prompts"))
        md = _metadata(result, "rag_verdicts")
        assert md["stream/judged"] == prompts and md["stream/failed"] == 0
        assert _metadata(result, "rag_responses")["llm/calls"] == 0 and md["llm/calls"] == 0
        assert gen.posts == prompts and judge.posts == md["stream/calls"] - prompts

        # a judge without an HTTP backend: nothing streams, the stages send their own calls
        gen_only = {"generator": ChatClient(_http(gen), LLMCache(tmp_path / "mixed" / "c"), name="g")}
        result, _, backends = _run(tmp_path / "mixed", "auto", models=gen_only)
    md = _metadata(result, "rag_responses")
    assert md["stream/skipped"] == "model without a cache on an HTTP backend"
    assert md["llm/calls"] == prompts and "stream/judged" not in _metadata(result, "rag_verdicts")
    assert _threads(backends["judge"]) == {"MainThread"}


def test_no_stream_without_rag_verdicts_in_the_run(tmp_path):
    result, _, backends = _run(tmp_path, "on", assets=(rag_prompts, rag_responses))
    assert _metadata(result, "rag_responses")["stream/skipped"] == "rag_verdicts not in this run"
    assert _threads(backends["generator"]) == {"MainThread"} and not backends["judge"].sent


@pytest.mark.parametrize("partition", ["hotpot.en", "hotpot.fr"])
def test_judging_one_example_sends_what_the_whole_batch_sends_for_it(partition, tmp_path):
    """What the stream rests on: a call's cache key is its own request, and ``judge_stage`` on one
    example (the factual, refusal and, in French, language judges) builds exactly the requests it
    builds for that example in the whole batch; ``generate_stage`` likewise on one prompt."""
    from ragsft_assets.defs.multihop.stream import _Tables
    from ragsft_assets.defs.rag_sft.stream import _Responses

    lang = partition.split(".")[1]
    recipe = resolve(None, {}, lang, partition)
    reader = _Tables({"multihop_questions": original_to_hf_table(RECORDS)})
    built = steps.prompts_step(
        reader, partition, recipe, ("", "multihop_questions", ()), lang=lang, seed=0,
        max_questions=0, tokenizer="whitespace", info=lambda _: None,
    )  # fmt: skip
    prompts = examples.prompts_from_table(built.table)

    class Recorder(RoleBackend):
        def generate(self, requests, on_result):
            self.sent += [
                (
                    "",
                    orjson.dumps(
                        [r.messages, r.params.to_dict(), r.json_schema, r.template_version]
                    ).decode(),
                )
                for r in requests
            ]
            RoleBackend.generate(self, requests, on_result)

    def send(role: str, step: Any, batches: list[tuple[Any, list]]) -> tuple[Counter, list]:
        backend = Recorder(role, RESPONDERS[role])
        model = ChatClient(backend, LLMCache(tmp_path / role / str(len(batches))))
        outs = [step(r, partition, recipe, ps, model, 0, None).table for r, ps in batches]
        return Counter(c for t, c in backend.sent if not t), outs

    whole, (responses,) = send("generator", steps.generate_stage, [(None, prompts)])
    one_by_one, tables = send("generator", steps.generate_stage, [(None, [p]) for p in prompts])
    assert whole == one_by_one
    judged_whole, _ = send("judge", steps.judge_stage, [(_Responses(responses), prompts)])
    judged_one, _ = send(
        "judge", steps.judge_stage, [(_Responses(t), [p]) for t, p in zip(tables, prompts, strict=True)]
    )
    assert judged_whole == judged_one and sum(judged_whole.values()) > len(prompts) // 2


def test_an_example_batch_makes_two_rounds_so_its_line_has_twice_the_workers():
    # The generator's round, then the judges' on what it answered: at a one-round line's workers
    # the fleet ran the RAG chain's tail at 0.4-0.7 (bench fleet, 20,000 pairs under).
    import logging

    from ragsft_assets.defs.rag_sft.stream import Prefetch
    from ragsft_assets.defs.streaming import BATCH_ITEMS
    from ragsft_assets_tests.llm_double import ScriptedChatModel

    prefetch = Prefetch(
        prompts=[],
        generator=ScriptedChatModel(lambda _m: "x"),
        judge=None,
        generate=lambda *_a: None,
        judge_examples=None,
        log=logging.getLogger("t"),
        limit=64,
    ).start()
    prefetch.join()
    assert prefetch._batches["example"].workers == 2 * 2 * 64 // BATCH_ITEMS
