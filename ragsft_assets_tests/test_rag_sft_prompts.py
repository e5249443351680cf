"""Prompt building: draw shares on a large synthetic input, twins, collisions, order independence."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from ragsft_assets.rag_sft import examples as ex
from ragsft_assets.rag_sft.citations import REFERENCE
from ragsft_assets.rag_sft.hotpot_input import HotpotRecord, read_records
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE, RECIPES

N = 3000


def make_record(i: int, gold_text: str = "") -> HotpotRecord:
    golds = (f"Gold A {i}", f"Gold B {i}")
    context = [
        (golds[0], (gold_text or f"A{i} is born in town{i}.", " It is old.")),
        (golds[1], (f"B{i} lives.",)),
    ]
    context += [(f"Distractor {i}-{k}", (f"Distractor {i} {k} says things.", " More.")) for k in range(8)]
    return HotpotRecord(
        id=f"{i:024x}",
        question=f"Where was A{i} born?",
        answer=f"town{i}",
        type="bridge",
        level="hard",
        supporting_titles=golds,
        supporting_facts=((golds[0], 0), (golds[1], 0)),
        context=tuple(context),
        split="train",
    )


@pytest.fixture(scope="module")
def build() -> ex.PromptBuild:
    return ex.build_prompts([make_record(i) for i in range(N)], seed=7, lang="en")


def test_draw_shares(build: ex.PromptBuild) -> None:
    answerable = [p for p in build.prompts if p.kind == ex.ANSWERABLE]
    twins = [p for p in build.prompts if p.kind == ex.UNANSWERABLE]
    assert len(answerable) == N
    assert abs(len(twins) / N - 0.22) < 0.025
    assert abs(sum(t.twin_kind == ex.TWIN_BOTH for t in twins) / len(twins) - 0.6) < 0.06
    assert abs(sum(p.citation_style == REFERENCE for p in answerable) / N - 0.04) < 0.012
    assert abs(sum(p.refusal_rule == ex.STRICT for p in answerable) / N - 0.05) < 0.013
    # drop count uniform over 0..floor(0.7 x 8) = 0..5
    drops = Counter(p.distractors_dropped for p in answerable)
    assert set(drops) == set(range(6))
    assert all(abs(drops[k] / N - 1 / 6) < 0.03 for k in range(6))
    phrases = Counter(p.refusal_phrase for p in answerable if p.refusal_rule == ex.STRICT)
    assert set(phrases) == set(ex.refusal_phrases("en"))


def test_documents_shuffled_and_laid_out(build: ex.PromptBuild) -> None:
    answerable = [p for p in build.prompts if p.kind == ex.ANSWERABLE]
    first_is_gold = sum(p.titles[0].startswith("Gold") for p in answerable) / N
    assert 0.15 < first_is_gold < 0.45  # golds first in the input; shuffled they are not
    for p in answerable[:50]:
        assert parse_documents(p.system) == list(zip(p.titles, p.paragraphs, strict=True))
        assert p.chunks_total == 10 - p.distractors_dropped
        assert set(p.gold_titles) <= set(p.titles)


def test_twins_share_pair_and_variants(build: ex.PromptBuild) -> None:
    by_pair: dict[str, list[ex.RagPrompt]] = {}
    for p in build.prompts:
        by_pair.setdefault(p.pair_id, []).append(p)
    pairs = [v for v in by_pair.values() if len(v) == 2]
    assert pairs
    for a, u in (sorted(v, key=lambda p: p.kind) for v in pairs):
        assert (a.kind, u.kind) == (ex.ANSWERABLE, ex.UNANSWERABLE)
        assert u.question_id == a.question_id and u.id != a.id
        assert (u.citation_style, u.refusal_rule, u.refusal_phrase) == (
            a.citation_style,
            a.refusal_rule,
            a.refusal_phrase,
        )
        assert u.chunks_total == a.chunks_total and u.gold_titles == []
        assert len(u.removed_titles) == (2 if u.twin_kind == ex.TWIN_BOTH else 1)
        # replaced one for one, in place; the replacement is another record's non-gold paragraph
        for i, (ta, tu) in enumerate(zip(a.titles, u.titles, strict=True)):
            if ta in u.removed_titles:
                assert tu.startswith("Distractor ") and not tu.startswith(
                    f"Distractor {int(a.question_id, 16)}-"
                )
                assert u.paragraphs[i] != a.paragraphs[i]
            else:
                assert (tu, u.paragraphs[i]) == (ta, a.paragraphs[i])
        assert set(u.removed_titles) <= set(a.gold_titles)


def test_order_independent() -> None:
    recs = [make_record(i) for i in range(200)]
    shuffled = recs[:]
    random.Random(1).shuffle(shuffled)
    a = ex.prompts_table(ex.build_prompts(recs, seed=3).prompts)
    b = ex.prompts_table(ex.build_prompts(shuffled, seed=3).prompts)
    assert a.equals(b)
    c = ex.prompts_table(ex.build_prompts(recs, seed=4).prompts)
    assert not a.equals(c)


def test_markup_collision_dropped_with_twin() -> None:
    recs = [make_record(i) for i in range(50)]
    recs[3] = make_record(3, 'A3 was born <ref name="x">cite</ref> in town3.')
    recs[4] = make_record(4, "A4 [CHUNK_END] born in town4.")
    out = ex.build_prompts(recs, seed=1, recipe=replace(HOTPOTQA_CITE_RECIPE, twin_share=1.0))
    dropped = {d.candidate_id: d.reason for d in out.decisions if d.verdict == "dropped"}
    assert dropped == {recs[3].id: "markup_collision", recs[4].id: "markup_collision"}
    assert not {p.question_id for p in out.prompts} & set(dropped)
    assert out.funnel["dropped:markup_collision"] == 2


def test_bad_rows_are_counted_not_raised() -> None:
    rows = [
        {"_id": "x", "question": "q"},
        5,
        {
            "id": "y",
            "question": "q",
            "answer": "a",
            "supporting_facts": {"title": ["T"], "sent_id": [0]},
            "context": {"title": ["T"], "sentences": [["T is."]]},
        },
    ]
    records, bad = read_records(rows)
    assert [r.id for r in records] == ["y"]
    assert [b[0] for b in bad] == ["x", "#1"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_inline_prompt_quotes_the_card_word_for_word(name: str) -> None:
    # The two sentences of the card's citation rule (OpenRAG's inference prompt), as the card quotes them.
    card = (
        'When quoting from the context, wrap each excerpt inline with <ref id="N">excerpt</ref>, '
        "where N is the number of the cited document (the N of its [Source N] marker) and excerpt is "
        "copied verbatim from that document. From a table, quote the row you use as it is written, "
        'e.g. <ref id="N">| Revenue | 1,234 | 1,100 |</ref>, and give any value you compute from '
        "it after the tag."
    )
    recipe = RECIPES[name]
    lang = "fr" if name == "hotpotqa_fr_abstracts_v2" else "en"
    out = ex.build_prompts([make_record(i) for i in range(60)], seed=2, lang=lang, recipe=recipe)
    inline = [p for p in out.prompts if p.citation_style == "inline"]
    assert inline and all(card in p.system for p in inline)
    assert not any(card in p.system for p in out.prompts if p.citation_style == REFERENCE)
    parts = ex.prompt_parts(recipe.instructions_language)
    assert parts["quoted"] == {"rag_rule_cite_inline.en": list(ex.CARD_CITATION_SENTENCES)}
    assert " ".join(ex.CARD_CITATION_SENTENCES) == card
    assert "rag_system.en" in parts["ours"] and "rag_rule_cite_references.en" in parts["ours"]
