"""Recall Rewrite stages with the scripted double: the 100 shared trees give both configs."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pyarrow as pa

from ragsft_assets.ids import sha256_hex
from ragsft_assets.recall.oasst import read_tree_export
from ragsft_assets.recall.rule import DEFAULT_THRESHOLDS, LABELS, RuleCounts, Thresholds, rederive
from ragsft_assets.recall.schema import FULL_SCHEMA, REFUSAL, SFT_SCHEMA
from ragsft_assets.recall.stages import run_all, statistics
from ragsft_assets_tests.llm_double import ScriptedChatModel

TREES = Path(__file__).parent / "data" / "oasst1" / "oasst_en_100_trees.jsonl"


def _h(*parts: str) -> int:
    return int(sha256_hex("\x1f".join(parts))[:8], 16)


def _section(text: str, name: str) -> str:
    return text.split(f"{name}:\n", 1)[1].split("\n\n", 1)[0]


def responder(messages) -> str:
    """Deterministic answers keyed on each prompt's own text."""
    text = messages[-1]["content"]
    if text.startswith("Decompose"):
        response = text.split("Assistant response:\n", 1)[1].rsplit("\n\nAnswer with", 1)[0]
        if _h(response) % 40 == 0:  # a few undecodable decompositions
            return "Sure! Here are the claims: ..."
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", response) if len(s.strip()) > 3][:3]
        return orjson.dumps({"claims": sentences}).decode()
    if text.startswith("A response to a user prompt"):
        claim = _section(text, "Claim")
        kd = _h(claim) % 3 != 0
        yes = "Yes, it does." if kd else "No, it does not."
        return orjson.dumps(
            {
                "is_independent_of_context": yes,
                "contains_specific_fact": yes if kd else ("Yes, a fact." if _h(claim, "f") % 2 else "No."),
                "is_not_obvious": yes,
                "can_be_asked_for": yes,
                "justification": "test",
                "is_knowledge_dependent": kd,
            }
        ).decode()
    if text.startswith("Write five"):
        claim = _section(text, "Claim")
        return orjson.dumps({"questions": [f"Question {i} on {claim[:30]}?" for i in range(5)]}).decode()
    if text.startswith("Q: What is the capital"):  # base model: few-shot completion, runs on past the stop
        q = text.rsplit("Q: ", 1)[1]
        return f" Answer {_h(q) % 7}.\nQ: another question\nA: more"
    if text.startswith("Compare an answer"):
        return orjson.dumps({"label": LABELS[_h(text) % 3]}).decode()
    if text.startswith("Rewrite"):
        response = text.split("Assistant response:\n", 1)[1].split("\n\nClaims to remove:", 1)[0]
        removed = [line[2:] for line in _section(text, "Claims to remove").splitlines()]
        for claim in removed:
            response = response.replace(claim, "")
        return orjson.dumps(
            {"rewritten_response": response.strip(), "has_substantive_content": bool(response.strip())}
        ).decode()
    raise AssertionError(f"unexpected prompt: {text[:80]}")


def test_hundred_trees_give_both_configs() -> None:
    pairs = read_tree_export(TREES).pairs
    chat, base = ScriptedChatModel(responder), ScriptedChatModel(responder, model_id="base-double")
    full, sft, stages = run_all(pairs, chat, base, "Qwen/Qwen3-4B-Base")

    claims = stages["claims"]
    dropped = sum(v for k, v in claims.reasons.items() if k.startswith("claims_"))
    assert dropped >= 1 and claims.reasons["claims_unreadable"] == dropped
    assert len(claims.records) + dropped == 94
    assert len(full) == len(sft) == len(stages["rewrites"].records) > 80

    full_t = pa.Table.from_pylist(full, schema=FULL_SCHEMA)  # raises on any missing or extra field
    sft_t = pa.Table.from_pylist(sft, schema=SFT_SCHEMA)
    assert full_t.schema.names == FULL_SCHEMA.names and sft_t.num_rows == full_t.num_rows
    assert {r["base_model"] for r in full} == {"Qwen/Qwen3-4B-Base"}

    # every knowledge-dependent claim: 5 probes x 2 answers, cut at the next few-shot item
    for r in full:
        for c in r["claims"]:
            if c["is_knowledge_dependent"]:
                assert len(c["probes"]) == 5 and all(len(p["answers"]) == 2 for p in c["probes"])
                assert all("\nQ:" not in a["text"] for p in c["probes"] for a in p["answers"])
                assert (
                    c["num_entailed_answers"] + c["num_contradicted_answers"] + c["num_unrelated_answers"]
                    == 10
                )
            else:
                assert c["probes"] == [] and c["is_known"] is None and not c["is_removed"]
        if r["num_unknown_claims"] == 0:
            assert r["rewritten_response"] == r["original_response"] and not r["is_refusal"]
        if r["is_refusal"]:
            assert r["rewritten_response"] == REFUSAL

    # a response with nothing removed gets no rewriter call
    rewrites = [c for c in chat.calls if c[-1]["content"].startswith("Rewrite")]
    assert len(rewrites) == sum(r["num_unknown_claims"] > 0 for r in full)
    # answers twice per question, each with its own seeded draw
    assert len(base.prompts) == 2 * sum(len(c["probes"]) for r in full for c in r["claims"])

    stats = statistics(full)
    assert stats["examples"] == len(full)
    assert stats["known_claims"] + stats["unknown_claims"] == stats["knowledge_dependent_claims"]
    assert stats["refusal_responses"] + stats["non_refusal_responses"] == len(full)
    assert abs(stats["share_entails"] + stats["share_unrelated"] + stats["share_contradicts"] - 1) < 1e-3
    assert stats["refusal_responses"] > 0 and stats["non_refusal_responses"] > 0

    # offline re-derivation: the default thresholds reproduce the verdicts, stricter ones change some
    counts = RuleCounts()
    again = [rederive(r, DEFAULT_THRESHOLDS, counts) for r in full]
    assert counts.rewrite_stale == 0 and [a["claims"] for a in again] == [r["claims"] for r in full]
    strict = RuleCounts()
    for r in full:
        rederive(r, Thresholds.parse("4/2/0/1"), strict)
    assert strict.known < counts.known and strict.rewrite_stale > 0

    # rerun (on a prefix, to stay fast): byte-identical rows
    some = pairs[:15]
    full2, _, _ = run_all(
        some, ScriptedChatModel(responder), ScriptedChatModel(responder), "Qwen/Qwen3-4B-Base"
    )
    ids = {p.id for p in some}
    assert orjson.dumps(full2) == orjson.dumps([r for r in full if r["id"] in ids])


def test_claims_schema_is_bounded_and_repeats_collapse() -> None:
    from ragsft_assets.recall.stages import CLAIMS_SCHEMA, MAX_CLAIMS, claims_stage

    # A small model stuck on one claim: the schema bounds the array, so the JSON closes in time.
    arr = CLAIMS_SCHEMA["properties"]["claims"]
    assert arr["maxItems"] == MAX_CLAIMS  # no maxLength: a real sentence (code) can run past 2,000 chars
    looped = orjson.dumps(
        {"claims": ["Today is 5 February.", "Today is 5 February.", " 322 days left. "] * 5}
    )
    model = ScriptedChatModel(lambda messages: looped.decode())
    pairs = read_tree_export(TREES).pairs[:1]
    out = claims_stage(pairs, model)
    assert [c["text"] for c in out.records[0]["claims"]] == ["Today is 5 February.", "322 days left."]
    assert [c["claim_id"] for c in out.records[0]["claims"]] == [f"{pairs[0].id}-c00", f"{pairs[0].id}-c01"]
