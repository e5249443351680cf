"""Verdict logic: deterministic checks before judges, the language judge for French, twins together."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ragsft_assets.rag_sft import examples as ex
from ragsft_assets.rag_sft import verdicts as vd
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.rag_sft.recipes import FR_V2_RECIPE, HOTPOTQA_CITE_RECIPE, TRUST_ALIGN_RECIPE
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
    recipe = replace(HOTPOTQA_CITE_RECIPE, twin_share=0.5, references_share=0.0)
    return ex.build_prompts(recs, seed=5, lang="fr", recipe=recipe).prompts


# The fixture's gold B paragraphs are two words ("B0 lives."): quotes of two words are allowed here.
TWO_WORDS = replace(HOTPOTQA_CITE_RECIPE, min_quote_words=2)


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
    run = vd.judge_examples(prompts, responses, model, recipe=TWO_WORDS)
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
    assert FR_V2_RECIPE.language_judge_scope == "answerable"
    assert HOTPOTQA_CITE_RECIPE.language_judge_scope == "all"
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
    run = vd.judge_examples(
        prompts, responses, model, recipe=replace(TWO_WORDS, language_judge_scope="answerable")
    )
    refusals = [v for v in run.verdicts if v.kind == ex.UNANSWERABLE]
    assert refusals and all(v.kept and v.language_score is None for v in refusals)
    assert all(v.kept and v.language_score == 5 for v in run.verdicts if v.kind == ex.ANSWERABLE)
    n_answerable = sum(p.kind == ex.ANSWERABLE for p in prompts)
    assert len(model.calls) == len(prompts) + n_answerable  # factual/refusal each + language on answers
    with pytest.raises(ValueError, match="language_judge_scope"):
        vd.judge_examples(
            prompts, responses, model, recipe=replace(TWO_WORDS, language_judge_scope="refusals")
        )


def test_unreadable_judge_is_a_verdict(prompts) -> None:
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    run = vd.judge_examples(
        prompts, responses, ScriptedChatModel(lambda m: "not json at all"), recipe=TWO_WORDS
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


def test_stricter_quoting_flags_by_default_and_drops_on_the_recipe_option(prompts) -> None:
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = ScriptedChatModel(lambda m: json.dumps({"score": 5, "refuses": True}))
    # The card's check (verbatim, fragments in order): a two-word quote passes and reaches the
    # judges; the stricter rule (3 words) only flags it, in the verdicts and the ledger.
    card = vd.judge_examples(prompts, responses, model)
    answerable = [v for v in card.verdicts if v.kind == ex.ANSWERABLE]
    assert answerable and not any(v.reason == "citations_invalid" for v in card.verdicts)
    assert all(v.quote_flags == ["too_short"] for v in answerable)
    assert vd.quote_flag_counts(card.verdicts)["kept_flagged"] == sum(v.kept for v in answerable) > 0
    ledger = {d.candidate_id: d for d in vd.verdict_decisions(card.verdicts)}
    assert all(ledger[v.id].detail["quote_flags"] == ["too_short"] for v in answerable)
    # The recipe option: the same rule drops them before the judges.
    strict = vd.judge_examples(
        prompts,
        responses,
        ScriptedChatModel(model.responder),
        recipe=replace(HOTPOTQA_CITE_RECIPE, citation_check="drop"),
    )
    dropped = [v for v in strict.verdicts if v.kind == ex.ANSWERABLE]
    assert all(v.reason == "citations_invalid" and '"too_short"' in v.citations for v in dropped)


class ParamsRecorder(ScriptedChatModel):
    """The double, also recording the sampling parameters of every conversation."""

    def __init__(self, responder) -> None:  # noqa: ANN001
        super().__init__(responder)
        self.params: list = []

    def chat(self, conversations, params, **kwargs):  # noqa: ANN001, ANN003, ANN201
        self.params += [params] * len(conversations)
        return super().chat(conversations, params, **kwargs)


def test_factual_rubric_and_what_each_judge_sees(prompts) -> None:
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = ParamsRecorder(lambda m: json.dumps({"score": 5, "refuses": True}))
    vd.judge_examples(prompts, responses, model, recipe=TWO_WORDS)
    factual = [c[0]["content"] for c in model.calls if "Réponse de référence" in c[0]["content"]]
    assert factual
    for text in factual:  # the card's rubric: correct answer, every supporting fact, sound reasoning
        assert "faits justificatifs" in text and "raisonnement" in text
        assert "[CHUNK_START]" not in text  # gold answer and supporting fact titles, no passages
    params = [
        k for c, k in zip(model.calls, model.params, strict=True) if "Réponse de référence" in c[0]["content"]
    ]
    assert {(k.enable_thinking, k.max_tokens) for k in params} == {(False, 160)}  # the recipe's: no thinking
    # trust_align's judge reads the passages' text and thinks first
    en = [replace(p, language="en") for p in prompts if p.kind == ex.ANSWERABLE][:3]
    multi = ParamsRecorder(lambda m: json.dumps({"score": 5}))
    vd.judge_examples(en, responses, multi, recipe=replace(TRUST_ALIGN_RECIPE, min_quote_words=2))
    assert len(multi.calls) == 3
    for call, p in zip(multi.calls, sorted(en, key=lambda x: x.id), strict=True):
        assert all(par in call[0]["content"] for par in p.paragraphs)
    assert {(k.enable_thinking, k.thinking_max_tokens) for k in multi.params} == {(True, 2048)}


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_factual_rubric_has_the_cards_three_parts(lang: str) -> None:
    from ragsft_assets.prompts import load_prompt

    text = load_prompt("rag_judge_factual", lang).render(
        question="Q?", answer="A", gold_titles="T1; T2", response="R", passages="P"
    )
    parts = {
        "en": ("the answer is correct", "uses all the supporting facts", "its reasoning is sound"),
        "fr": (
            "la réponse est correcte",
            "utilise tous les faits justificatifs",
            "son raisonnement est juste",
        ),
    }[lang]
    assert all(p in text for p in parts) and "T1; T2" in text and "A" in text


def test_the_three_judges_are_one_batch_with_their_own_keys(prompts) -> None:
    """Factual, refusal and language judges reach the model as one ``run`` batch; each request
    keeps its own template version, so its cache key is the one a batch of its own would give."""
    from ragsft_assets.prompts import load_prompt

    class VersionRecorder(ScriptedChatModel):
        def __init__(self, responder) -> None:  # noqa: ANN001
            super().__init__(responder)
            self.versions: list[str] = []

        def chat(self, conversations, params, **kwargs):  # noqa: ANN001, ANN003, ANN201
            self.versions += [kwargs.get("template_version", "")] * len(conversations)
            return super().chat(conversations, params, **kwargs)

    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = VersionRecorder(lambda m: json.dumps({"score": 5, "refuses": True}))
    vd.judge_examples(prompts, responses, model, recipe=TWO_WORDS)
    assert model.runs == 1  # one batch for the three judges
    lang = prompts[0].language
    expected = {
        load_prompt(t, lang).version
        for t in (TWO_WORDS.factual_rubric, "rag_judge_refusal", "rag_judge_language")
    }
    assert set(model.versions) == expected  # each task keyed by its own template


def test_generation_and_judges_run_without_thinking_by_default(prompts) -> None:
    """The card generates "without thinking mode"; its Mistral judges name no thinking mode, while
    trust_align's run "Qwen3.8-27B as judge (thinking mode)" (test_cards_000)."""
    from ragsft_assets.rag_sft import recipes as rr

    for recipe in (rr.HOTPOTQA_CITE_RECIPE, rr.FR_V2_RECIPE, rr.TRUST_ALIGN_RECIPE):
        assert recipe.generation_thinking is False
    assert rr.HOTPOTQA_CITE_RECIPE.judges_thinking is False and rr.FR_V2_RECIPE.judges_thinking is False
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = ParamsRecorder(lambda m: json.dumps({"score": 5, "refuses": True}))
    vd.judge_examples(prompts, responses, model, recipe=TWO_WORDS)
    assert model.params and {k.enable_thinking for k in model.params} == {False}
