"""The rag_sft recipes against the Luciole RAG card's numbers, overrides, and the partition's default."""

from __future__ import annotations

import dataclasses

import pytest

from ragsft_assets import recipes
from ragsft_assets.rag_sft import recipes as rs


def test_recipe_values_are_the_cards() -> None:
    cite, fr, ta = (
        rs.RECIPES["hotpotqa_cite"],
        rs.RECIPES["hotpotqa_fr_abstracts_v2"],
        rs.RECIPES["trust_align"],
    )
    # twins 22%; both golds removed in 60% of hotpotqa_cite's twins, in every fr_v2 twin; trust_align none
    assert (cite.twin_share, cite.twin_both_share) == (0.22, 0.6)
    assert (fr.twin_share, fr.twin_both_share) == (0.22, 1.0)
    assert ta.twin_share == 0.0
    # References 4% (inline only for trust_align); the strict refusal rule 5% / 4.4%
    assert cite.references_share == fr.references_share == 0.04 and ta.references_share == 0.0
    assert cite.strict_share == fr.strict_share == 0.05 and ta.strict_share == 0.044  # 77 / 1,737
    # the 8,192 token budget of fr_v2 only; its English OpenRAG instructions
    assert (cite.document_token_budget, fr.document_token_budget, ta.document_token_budget) == (0, 8192, 0)
    assert {r.instructions_language for r in rs.RECIPES.values()} == {"en"}
    # fr_v2 reads filtered_qwen_v2's train split; its drop rules and the language judge on answers
    assert (fr.questions, fr.questions_splits) == ("filtered_qwen_v2", ("train",))
    assert fr.drop_wrong_language and fr.drop_answer_only_in_ref and fr.language_judge_scope == "answerable"
    assert (
        not (cite.drop_wrong_language or cite.drop_answer_only_in_ref) and cite.language_judge_scope == "all"
    )
    # cleanup: step 6 on answers for hotpotqa_cite, off for fr_v2; step 7 on for fr_v2 only
    assert (cite.untagged_source_scope, fr.untagged_source_scope) == ("answers", "off")
    assert fr.rewrite_refusals and not cite.rewrite_refusals and not ta.rewrite_refusals
    # the citation check is the card's: the stricter rules flag, they do not drop
    assert {r.citation_check for r in rs.RECIPES.values()} == {"flag"}
    # the factual judges: the card's rubric; trust_align's reads the passages and thinks
    assert cite.factual_rubric == fr.factual_rubric == "rag_judge_factual"
    assert ta.factual_rubric == "rag_judge_factual_multi" and ta.multi_answer
    assert ta.factual_judge_thinking and ta.factual_judge_thinking_max_tokens > ta.factual_judge_max_tokens
    assert not (cite.factual_judge_thinking or fr.factual_judge_thinking)


def test_registered_frozen_and_overridable() -> None:
    assert recipes.names("rag_sft") == ["hotpotqa_cite", "hotpotqa_fr_abstracts_v2", "trust_align"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rs.HOTPOTQA_CITE_RECIPE.twin_share = 0.5  # type: ignore[misc]
    run = rs.resolve("hotpotqa_cite", {"twin_share": 0.3, "citation_check": "drop"}, "en", "hotpotqa.en")
    assert run.twin_share == 0.3 and run.strict_quotes_drop
    record = recipes.record(run)
    assert set(record["changed"]) == {"twin_share", "citation_check"}
    assert "differing from the card in" in recipes.card_sentence(record)
    assert recipes.card_sentence(recipes.record(rs.FR_V2_RECIPE)).endswith("as the card.")
    with pytest.raises(ValueError, match="unknown recipe field"):
        rs.resolve(None, {"twin_shares": 0.3}, "en", "hotpotqa.en")
    with pytest.raises(ValueError, match="citation_check"):
        rs.resolve(None, {"citation_check": "maybe"}, "en", "hotpotqa.en")
    with pytest.raises(ValueError, match=r"twin_share must be in \[0, 1\]"):
        rs.resolve(None, {"twin_share": 1.5}, "en", "hotpotqa.en")


@pytest.mark.parametrize(
    ("lang", "partition", "expected"),
    [
        ("en", "hotpotqa.en", "hotpotqa_cite"),
        ("en", "20240916.en", "hotpotqa_cite"),
        ("fr", "20240916.fr", "hotpotqa_fr_abstracts_v2"),
        ("fr", "hotpotqa.en", "hotpotqa_fr_abstracts_v2"),  # language: fr on an English key
        ("en", "trust_align.en", "trust_align"),
    ],
)
def test_the_partitions_recipe(lang: str, partition: str, expected: str) -> None:
    assert rs.resolve(None, {}, lang, partition).name == expected
    assert rs.resolve(None, {}, lang, partition) is rs.RECIPES[expected]  # no override: the card's object


def test_the_chains_record_holds_every_stages_overrides() -> None:
    prompts = recipes.record(rs.resolve(None, {"twin_share": 0.5}, "en", "hotpotqa.en"))
    verdicts = recipes.record(rs.resolve(None, {"citation_check": "drop"}, "en", "hotpotqa.en"))
    last = recipes.record(rs.HOTPOTQA_CITE_RECIPE)
    other = recipes.record(rs.FR_V2_RECIPE)
    stage_records = {"rag_prompts": prompts, "rag_verdicts": verdicts, "rag_sft": last, "abstracts": other}
    merged = rs.chain_record(stage_records, last)
    assert sorted(merged["changed"]) == ["citation_check", "twin_share"] and "other_recipes" not in merged
    assert "`twin_share` 0.5 (card: 0.22)" in recipes.card_sentence(merged)
    mixed = rs.chain_record({**stage_records, "rag_responses": other}, last)
    assert mixed["other_recipes"] == {"rag_responses": "hotpotqa_fr_abstracts_v2"}
