"""The HotpotQA-fr recipes: one per published config, the card's numbers, overrides, the record."""

from __future__ import annotations

import dataclasses

import pytest

from ragsft_assets import recipes
from ragsft_assets.multihop import recipes as mh
from ragsft_assets.release.layout import CONFIGS_BY_NAME, CORPUS_COLUMNS


def test_one_recipe_per_published_config() -> None:
    published = [c.name for c in CONFIGS_BY_NAME.values() if c.family in ("multihop", "corpus")]
    assert sorted(mh.RECIPES) == sorted(published) == recipes.names(mh.FAMILY)
    for name, recipe in mh.RECIPES.items():
        assert recipe.name == name and recipes.get(name) is recipe
        assert dataclasses.is_dataclass(recipe) and type(recipe).__dataclass_params__.frozen


@pytest.mark.parametrize("name", sorted(mh.RECIPES))
def test_recipe_values_are_the_cards(name: str) -> None:
    r = mh.RECIPES[name]
    assert r.drafts_per_pair == 3  # 3 questions per pair
    assert (r.answer_max_words, r.answer_max_chars) == (10, 70)  # at most 10 words and 70 characters
    assert (r.retrieval, r.distractors_k, r.context_size) == ("tfidf", 8, 10)  # 2 gold + 8 bigram tf-idf
    assert (r.max_per_bridge, r.max_per_source) == (2, 3)  # 2 questions per bridge, 3 per source
    assert r.cascade_order == ("ab", "b", "a", "none")  # A+B, then B alone, then A alone, then none
    assert r.strict_impossible is True
    # 590,596 judge calls for 281,119 judged questions, decomposed by the card's rounds
    assert 281_119 + 144_144 + 95_470 + 69_863 == 590_596
    assert r.card_judge_calls_per_judged == round(590_596 / 281_119, 2) == 2.10
    assert r.surface_auc_bar == 0.62
    assert (r.first_hop_role, r.criteria_role, r.bridge_judge_role, r.language_judge_role) == (
        "judge", "annotator", "judge", "judge"
    )  # fmt: skip
    assert r.corpus_columns == ("id", "title", "text", "sentences", "qid") == CORPUS_COLUMNS


def test_each_config_names_its_filters_and_parent() -> None:
    got = {n: (r.filters, r.parent) for n, r in mh.RECIPES.items()}
    assert got == {
        "default": ((), None),
        "filtered": (("first_hop", "mechanical_rules"), "default"),
        "filtered_qwen": (("criteria_annotation",), "default"),
        "filtered_qwen_v2": (
            ("bridge_judge", "language_judge", "publishability_score", "descriptor_check"),
            "filtered_qwen",
        ),
        "corpus": ((), None),
        "corpus_filtered_qwen_v2": ((), "filtered_qwen_v2"),
    }


def test_assets_resolve_their_configs_recipe_and_overrides() -> None:
    assert mh.resolve("question_drafts", None).name == "default"
    assert mh.resolve("first_hop", None).name == "filtered"
    assert mh.resolve("criteria_annotation", None).name == "filtered_qwen"
    assert mh.resolve("bridge_judge", None).name == "filtered_qwen_v2"
    assert mh.resolve("corpus_filtered_qwen_v2", None).name == "corpus_filtered_qwen_v2"
    r = mh.resolve("distractors", None, {"max_per_bridge": 4, "cascade_order": ["a", "b", "ab", "none"]})
    assert (r.max_per_bridge, r.cascade_order) == (4, ("a", "b", "ab", "none"))
    rec = recipes.record(r)
    assert rec["changed"] == {
        "cascade_order": {"card": ["ab", "b", "a", "none"], "run": ["a", "b", "ab", "none"]},
        "max_per_bridge": {"card": 2, "run": 4},
    }
    assert "differing from the card" in recipes.card_sentence(rec)
    assert (
        recipes.card_sentence(recipes.record(mh.resolve("first_hop", None)))
        == "Recipe `filtered`: as the card."
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cascade_order": ["ab", "ab", "a", "none"]}, "cascade_order"),
        ({"retrieval": "dense"}, "retrieval"),
        ({"first_hop_role": "generator"}, "first_hop_role"),
        ({"max_per_bridge": 0}, "caps"),
        ({"max_per_bridge": "two"}, "expected int"),
        ({"max_pairs": 3}, "unknown recipe field"),
    ],
)
def test_bad_overrides_fail_with_a_clear_error(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mh.resolve("question_drafts", None, overrides)


def test_unknown_or_foreign_recipe_names() -> None:
    with pytest.raises(KeyError, match="unknown recipe"):
        mh.resolve("question_drafts", "nope")
    foreign = [n for n in recipes.names() if n not in mh.RECIPES]
    if foreign:  # another family's recipe is no multihop recipe
        with pytest.raises(ValueError, match="not a multihop recipe"):
            mh.resolve("question_drafts", foreign[0])
