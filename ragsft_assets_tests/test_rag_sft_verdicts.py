"""Verdict logic: deterministic checks before judges, the language judge for French, twins together."""

from __future__ import annotations

import json

import pytest

from ragsft_assets.rag_sft import examples as ex
from ragsft_assets.rag_sft import verdicts as vd
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.test_rag_sft_prompts import make_record


def _answer(p: ex.RagPrompt) -> str:
    if p.kind == ex.UNANSWERABLE:
        return "Les documents fournis ne permettent pas de répondre."
    n = p.titles.index(p.gold_titles[0]) + 1
    m = p.titles.index(p.gold_titles[1]) + 1
    # Whole words, at least three: the strict verifier accepts nothing less as a quote.
    a, b = (" ".join(p.paragraphs[k - 1].split()[:4]) for k in (n, m))
    return f'La réponse est {p.answer}. <ref id="{n}">{a}</ref> <ref id="{m}">{b}</ref>'


@pytest.fixture(scope="module")
def prompts() -> list[ex.RagPrompt]:
    recs = [make_record(i) for i in range(40)]
    return ex.build_prompts(recs, seed=5, lang="fr", shares=ex.PromptShares(twin=0.5, references=0.0)).prompts


def test_french_needs_language_judge_and_twins_fall_together(prompts) -> None:
    responses = [
        {"id": p.id, "response": _answer(p), "status": "ok", "cache_key": f"g{p.id}"} for p in prompts
    ]
    twinned = sorted({p.pair_id for p in prompts if p.kind == ex.UNANSWERABLE})
    victim = twinned[0]
    # break one answerable citation (wrong document), which must skip the judges for it
    broken = next(p for p in prompts if p.kind == ex.ANSWERABLE and p.pair_id != victim)
    for r in responses:
        if r["id"] == broken.id:
            r["response"] = r["response"].rsplit('">', 1)[0] + '">Nowhere to be found</ref>'

    for r, p in zip(responses, prompts, strict=True):
        if p.pair_id == victim and p.kind == ex.UNANSWERABLE:
            r["response"] += " Hélas."

    def judge(messages) -> str:
        text = messages[0]["content"]
        if "qualité de la langue" in text:
            return json.dumps({"score": 3 if "Hélas" in text else 5})  # the victim's refusal: poor French
        if "Décide si sa réponse refuse" in text:
            return json.dumps({"refuses": True})
        assert "Réponse de référence" in text
        return json.dumps({"score": 5})

    model = ScriptedChatModel(judge)
    # The fixture's gold B paragraphs are two words ("B0 lives."): quotes of two words are allowed here.
    run = vd.judge_examples(prompts, responses, model, min_quote_words=2)
    by_id = {v.id: v for v in run.verdicts}
    assert by_id[broken.id].reason == "citations_invalid" and by_id[broken.id].factual_score is None
    victims = [v for v in run.verdicts if v.pair_id == victim]
    assert sorted(v.reason for v in victims) == ["language_score", "twin_dropped"]
    kept = [v for v in run.verdicts if v.kept]
    assert kept and all(v.language_score == 5 for v in kept)
    # judges only saw what passed the deterministic checks: factual + refusal + language per example
    assert len(model.calls) == 2 * (len(prompts) - 1)
    assert all(len(v.cache_keys) == 3 for v in kept)


def test_language_judge_on_answerable_only(prompts) -> None:
    # hotpotqa_fr_abstracts_v2: the French-quality judge gates answerable examples, never refusals
    assert vd.language_judge_scope("", "hotpotqa_fr_abstracts_v2") == "answerable"
    assert (
        vd.language_judge_scope("", "hotpotqa_cite") == "all" and vd.language_judge_scope("all", "x") == "all"
    )
    responses = [
        {
            "id": p.id,
            "response": _answer(p) + (" Hélas." if p.kind == ex.UNANSWERABLE else ""),
            "status": "ok",
        }
        | {"cache_key": f"g{p.id}"}
        for p in prompts
    ]

    def judge(messages) -> str:
        text = messages[0]["content"]
        if "qualité de la langue" in text:
            assert "Hélas" not in text  # no refusal reaches the language judge
            return json.dumps({"score": 5})
        if "Décide si sa réponse refuse" in text:
            return json.dumps({"refuses": True})
        return json.dumps({"score": 5})

    model = ScriptedChatModel(judge)
    run = vd.judge_examples(prompts, responses, model, min_quote_words=2, language_scope="answerable")
    refusals = [v for v in run.verdicts if v.kind == ex.UNANSWERABLE]
    assert refusals and all(v.kept and v.language_score is None for v in refusals)
    assert all(v.kept and v.language_score == 5 for v in run.verdicts if v.kind == ex.ANSWERABLE)
    n_answerable = sum(p.kind == ex.ANSWERABLE for p in prompts)
    assert len(model.calls) == len(prompts) + n_answerable  # factual/refusal each + language on answers
    with pytest.raises(ValueError, match="language_scope"):
        vd.judge_examples(prompts, responses, model, language_scope="refusals")


def test_unreadable_judge_is_a_verdict(prompts) -> None:
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    run = vd.judge_examples(
        prompts, responses, ScriptedChatModel(lambda m: "not json at all"), min_quote_words=2
    )
    assert {v.reason for v in run.verdicts if not v.kept} <= {"judge_unreadable", "twin_dropped"}
    assert not any(v.kept for v in run.verdicts)
    assert sum(v.verdict == "unreadable" for v in run.verdicts) == len(prompts)


def test_generate_responses_uses_training_prompt(prompts) -> None:
    seen = []

    def gen(messages) -> str:
        seen.append(messages)
        return "" if len(seen) == 1 else "ok"

    table, stats = vd.generate_responses(prompts[:3], ScriptedChatModel(gen))
    rows = table.to_pylist()
    assert [r["status"] for r in rows] == ["unreadable", "ok", "ok"]
    assert stats.requests == 3
    first = sorted(prompts[:3], key=lambda p: p.id)[0]
    assert seen[0][0]["content"] == first.system and parse_documents(first.system)


@pytest.mark.integration
def test_embedded_tokenizer_counts_tokens() -> None:
    from ragsft_assets.rag_sft.statistics import default_token_counter

    counter, name = default_token_counter()
    if name == "whitespace":
        pytest.skip("embedded model not available")
    assert counter(["one two three four five six"])[0] > 0


def test_strict_quotes_drop_short_quotes_before_the_judges(prompts) -> None:
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = ScriptedChatModel(lambda m: json.dumps({"score": 5, "refuses": True}))
    run = vd.judge_examples(prompts, responses, model)  # default: 3 words at least
    answerable = [v for v in run.verdicts if v.kind == ex.ANSWERABLE]
    assert answerable and all(v.reason == "citations_invalid" for v in answerable)
    assert all('"too_short"' in v.citations for v in answerable)
    # The switch off: the same responses pass the deterministic checks and reach the judges.
    off = vd.judge_examples(prompts, responses, ScriptedChatModel(model.responder), strict_quotes=False)
    assert not any(v.reason == "citations_invalid" for v in off.verdicts)
