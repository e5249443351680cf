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


def test_claims_are_not_capped_ids_are_ints_and_repeats_are_kept() -> None:
    """The card counts the decompositions as they came: "64,301 claims, of which 39,853 are
    knowledge-dependent"; a claim repeated word for word is one more claim, not collapsed."""
    from ragsft_assets.recall.stages import CLAIMS_SCHEMA, claims_stage

    assert "maxItems" not in CLAIMS_SCHEMA["properties"]["claims"]  # a long response is decomposed whole
    many = [f"Fact number {i} holds." for i in range(45)]
    looped = orjson.dumps({"claims": [*many, "Fact number 3 holds.", " Fact number 7 holds. ", "  "]})
    model = ScriptedChatModel(lambda messages: looped.decode())
    pairs = read_tree_export(TREES).pairs[:1]
    out = claims_stage(pairs, model)
    claims = out.records[0]["claims"]
    assert [c["text"] for c in claims] == [*many, "Fact number 3 holds.", "Fact number 7 holds."]
    assert [c["claim_id"] for c in claims] == list(range(47))


class FlakyBase:
    """A base model whose answers to the questions of one claim fail (an engine error)."""

    def __init__(self, fail_on: str) -> None:
        self.inner = ScriptedChatModel(responder, model_id="flaky-base")
        self.fail_on = fail_on

    def model_identity(self) -> dict[str, str]:
        return self.inner.model_identity()

    def run(self, requests, *, template_version: str = "", log=None):
        from ragsft_assets.llm.types import ChatResult

        batch = self.inner.run(requests, template_version=template_version)
        for i, r in enumerate(requests):
            if self.fail_on in r.prompt:
                batch.results[i] = ChatResult(text="", status="error", error="engine died")
        return batch


def test_a_failure_of_one_base_model_keeps_the_example_for_every_model() -> None:
    pairs = read_tree_export(TREES).pairs[:12]
    good_full, _, _ = run_all(pairs, ScriptedChatModel(responder), ScriptedChatModel(responder), "good")
    probed = next(c for r in good_full for c in r["claims"] if c["is_knowledge_dependent"])
    flaky = FlakyBase(probed["probes"][0]["question"])

    class FailingRewriter(ScriptedChatModel):
        def chat(self, conversations, params, **kw):
            batch = super().chat(conversations, params, **kw)
            if conversations and conversations[0][-1]["content"].startswith("Rewrite"):
                from ragsft_assets.llm.types import ChatResult

                batch.results[0] = ChatResult(text="", status="error", error="timeout")
            return batch

    full, sft, stages = run_all(pairs, ScriptedChatModel(responder), flaky, "flaky")
    assert [r["id"] for r in full] == [r["id"] for r in good_full]  # the same example ids
    assert [r["id"] for r in sft] == [r["id"] for r in good_full]
    answers = stages["probe_answers"]
    assert answers.reasons["base_model_failed_answers"] >= 2
    assert not any(d.verdict == "dropped" for d in answers.decisions)
    assert stages["probe_labels"].reasons["failed_answer_as_unrelated"] >= 2


def test_a_failed_rewrite_is_dropped_and_counted_not_refused() -> None:
    """The card refuses only when little is left: "If too little information remains, the response
    becomes the fixed refusal" (003). A rewrite call that failed says nothing of what remains: the
    example is dropped and counted, its target never silently turned into the refusal."""
    pairs = read_tree_export(TREES).pairs[:12]
    good_full, _, _ = run_all(pairs, ScriptedChatModel(responder), ScriptedChatModel(responder), "m")

    class FailingRewriter(ScriptedChatModel):
        def chat(self, conversations, params, **kw):
            batch = super().chat(conversations, params, **kw)
            if conversations and conversations[0][-1]["content"].startswith("Rewrite"):
                from ragsft_assets.llm.types import ChatResult

                batch.results[0] = ChatResult(text="", status="error", error="timeout")
            return batch

    full, sft, stages = run_all(pairs, FailingRewriter(responder), ScriptedChatModel(responder), "m")
    rewrites = stages["rewrites"]
    dropped = [d for d in rewrites.decisions if d.verdict == "dropped"]
    assert [d.reason for d in dropped] == ["rewrite_error"] and rewrites.reasons["rewrite_error"] == 1
    lost = dropped[0].candidate_id
    assert [r["id"] for r in full] == [r["id"] for r in good_full if r["id"] != lost]
    assert [r["id"] for r in sft] == [r["id"] for r in full]
    assert not any(d.reason.endswith("_refused") for d in rewrites.decisions)
    # the other examples are the same rows as without the failure
    assert [r for r in good_full if r["id"] != lost] == full


def test_every_answer_goes_to_the_base_model_in_one_batch() -> None:
    pairs = read_tree_export(TREES).pairs[:10]
    base = ScriptedChatModel(responder, model_id="base-double")
    full, _, _ = run_all(pairs, ScriptedChatModel(responder), base, "m")
    assert base.runs == 1  # one batch, each request with its own seed
    assert len(base.prompts) == 2 * sum(len(c["probes"]) for r in full for c in r["claims"]) > 2


def test_the_chat_tasks_run_without_thinking_by_default() -> None:
    """Decompose, audit, probe, label and rewrite are judges and writers: no thinking, as the cards'
    (a role's own setting still wins, in the client)."""
    import inspect

    from ragsft_assets.recall import stages

    assert stages.THINKING is False
    source = inspect.getsource(stages)
    chat_params = source.count("SamplingParams(temperature=0.0")
    assert chat_params == 4 and source.count("enable_thinking=THINKING") == chat_params
