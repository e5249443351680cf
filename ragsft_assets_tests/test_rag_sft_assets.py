"""The whole rag_sft stage in-process, with the LLM test double, on the 70 real HotpotQA records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from ragsft_assets.defs.rag_sft import defs as rag_defs
from ragsft_assets.defs.rag_sft.assets import rag_prompts, rag_responses, rag_sft, rag_verdicts
from ragsft_assets.rag_sft.citations import check_response
from ragsft_assets.rag_sft.examples import refusal_phrases
from ragsft_assets.rag_sft.hotpot_input import original_to_hf_table
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedChatModel

DATA = Path(__file__).resolve().parent / "data" / "hotpotqa" / "hotpotqa_train_distractor_70.json"
PARTITION = "hotpot.en"
REFUSAL = "The documents provided do not allow me to answer this question. Please rephrase or add documents."

RECORDS = json.loads(DATA.read_text())
GOLD = {
    r["question"]: (r["answer"], list(dict.fromkeys(t for t, _ in r["supporting_facts"]))) for r in RECORDS
}
# Scripted misbehaviour, keyed by question, so it does not depend on processing order.
UNREADABLE_Q = RECORDS[0]["question"]
BAD_JUDGE_Q = RECORDS[1]["question"]


def _first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def generator_responder(messages) -> str:
    system, question = messages[0]["content"], messages[1]["content"]
    if question == UNREADABLE_Q:
        return "<think>thinking forever"  # an unclosed think block: empty answer
    answer, golds = GOLD[question]
    docs = parse_documents(system)
    titles = [t for t, _ in docs]
    references = "References:" in system and "Do not put citation markers" in system
    if not all(g in titles for g in golds):
        return REFUSAL
    if references:
        refs = "\n".join(f'<ref id="{titles.index(g) + 1}"/>' for g in golds)
        return f"The answer is {answer}.\n\nReferences:\n{refs}"
    parts = []
    for g in golds:
        n = titles.index(g) + 1
        words = docs[n - 1][1].split()
        # an elided excerpt whose ellipsis skips no word: the cleanup must join it back. Whole
        # whitespace tokens, six after the ellipsis: HotpotQA's own markup ("{'1': ") holds tokens
        # without words, and the strict verifier wants 3 words per fragment.
        excerpt = (
            f"{_first_words(' '.join(words[:3]), 3)} ... {' '.join(words[3:9])}"
            if len(words) > 9
            else " ".join(words)
        )
        parts.append(f'<ref id="{n}">{excerpt}</ref>')
    return f"The answer is {answer}. " + " ".join(parts)


def judge_responder(messages) -> str:
    text = messages[0]["content"]
    if BAD_JUDGE_Q and f"Question: {BAD_JUDGE_Q}\n" in text:
        return "I think it is fine."  # not JSON: an unreadable judge verdict
    if "Reference answer:" in text:
        answer = re.search(r"Reference answer: (.*)\n", text).group(1)
        reply = text.split("Assistant's answer", 1)[1]
        return json.dumps({"score": 5 if answer in reply else 1, "reason": "scripted"})
    if "declines to answer" in text:
        return json.dumps({"refuses": "do not allow me" in text, "reason": "scripted"})
    return json.dumps({"score": 5, "reason": "scripted"})


def _materialize(home: Path, run_config: dict | None = None):
    store = ArtifactStore(home=str(home))
    store.write_splits(original_to_hf_table(RECORDS), PARTITION, "multihop_questions")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    generator = ScriptedChatModel(generator_responder, "gen-double")
    judge = ScriptedChatModel(judge_responder, "judge-double")
    config = {"tokenizer": "whitespace", **(run_config or {})}
    result = dg.materialize(
        [rag_prompts, rag_responses, rag_verdicts, rag_sft],
        resources={"store": store, "generator": generator, "judge": judge},
        partition_key=PARTITION,
        instance=instance,
        run_config={
            "ops": {
                name: {"config": config}
                for name in ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
            }
        },
    )
    return result, store, generator, judge


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _materialize(tmp_path_factory.mktemp("home"))


def test_stage_runs_and_rows_verify(run) -> None:
    result, store, generator, judge = run
    assert result.success
    prompts = store.read(PARTITION, "rag_prompts").to_pylist()
    assert len({p["question_id"] for p in prompts}) == 70
    assert len(generator.calls) == len(prompts)  # one generation per example, nothing else
    assert all(
        c == [{"role": "system", "content": p["system"]}, {"role": "user", "content": p["user"]}]
        for c, p in zip(generator.calls, prompts, strict=True)
    )
    rows = store.read(PARTITION, "rag_sft").to_pylist()
    assert 0 < len(rows) < len(prompts)
    assert set(rows[0]) == {"id", "pair_id", "messages", "supporting_facts_titles", "chunks_total", "split"}
    for r in rows:
        system, user, assistant = r["messages"]
        docs = parse_documents(system["content"])
        assert len(docs) == r["chunks_total"]
        rep = check_response(
            assistant["content"],
            [d for _, d in docs],
            [t for t, _ in docs],
            r["supporting_facts_titles"] or None,
        )
        assert rep.passes, (r["id"], assistant["content"])
        assert " ... " not in assistant["content"]  # idle ellipses removed by the cleanup
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {"twins_together", "citations_verified", "layout_intact"}
    assert all(c.passed for c in checks)


def test_twins_together_and_unanswerable_rows(run) -> None:
    _, store, _, _ = run
    prompts = store.read(PARTITION, "rag_prompts").to_pylist()
    rows = store.read(PARTITION, "rag_sft").to_pylist()
    pair_size = {}
    for p in prompts:
        pair_size[p["pair_id"]] = pair_size.get(p["pair_id"], 0) + 1
    assert 2 in pair_size.values()  # some twins at 22% of 70
    kept = {}
    for r in rows:
        kept[r["pair_id"]] = kept.get(r["pair_id"], 0) + 1
    assert all(kept[pid] == pair_size[pid] for pid in kept)
    unanswerable = [r for r in rows if not r["supporting_facts_titles"]]
    assert unanswerable
    by_id = {p["id"]: p for p in prompts}
    for r in unanswerable:
        p, target = by_id[r["id"]], r["messages"][2]["content"]
        assert target == (p["refusal_phrase"] if p["refusal_rule"] == "strict" else REFUSAL)
        assert p["refusal_rule"] == "generic" or p["refusal_phrase"] in refusal_phrases("en")


def test_unreadable_outputs_are_recorded_verdicts(run) -> None:
    _, store, _, _ = run
    verdicts = store.read(PARTITION, "rag_verdicts").to_pylist()
    reasons = {v["reason"] for v in verdicts if v["verdict"] == "unreadable"}
    assert reasons == {"response_unreadable", "judge_unreadable"}
    ledger = pq.read_table(store.root / PARTITION / "_ledger" / "rag_verdicts.parquet").to_pylist()
    assert len(ledger) == len(verdicts)
    assert {r["product"] for r in ledger} == {"hotpotqa_cite"}
    assert all(r["cache_keys"] for r in ledger)
    judged = [r for r in ledger if r["reason"] in ("kept", "factual_score", "not_refusal")]
    assert judged and all(len(r["cache_keys"]) == 2 for r in judged)  # generation + judge
    for stage in ("rag_prompts", "rag_responses", "rag_sft"):
        assert (store.root / PARTITION / "_ledger" / f"{stage}.parquet").is_file()


def test_deterministic_and_max_questions(run, tmp_path) -> None:
    _, store, _, _ = run
    again = _materialize(tmp_path / "again")[1]
    for split in ("train", "validation", "test"):
        for asset in ("rag_prompts", "rag_sft"):
            assert (
                again.path(PARTITION, asset, split).read_bytes()
                == store.path(PARTITION, asset, split).read_bytes()
            )
    small = _materialize(tmp_path / "small", {"max_questions": 10})[1]
    assert len({p["question_id"] for p in small.read(PARTITION, "rag_prompts").to_pylist()}) == 10


def test_defs_load() -> None:
    keys = sorted(k.to_user_string() for a in rag_defs.assets for k in a.keys)
    # one factory, two chains: the snapshot chain keeps its keys, the QA chain is under qa/
    stages = ["rag_prompts", "rag_responses", "rag_sft", "rag_verdicts"]
    assert keys == sorted([*stages, *(f"qa/{k}" for k in [*stages, "questions", "release"])])
