"""The Recall Rewrite recipe holds the card's numbers, and runs override it by field."""

from __future__ import annotations

import pytest

from ragsft_assets import recipes
from ragsft_assets.recall import recipes as recall_recipes
from ragsft_assets.recall.rule import Thresholds


def test_card_values() -> None:
    r = recipes.get("recall_oasst1")
    assert r is recall_recipes.RECALL_OASST1 and "recall_oasst1" in recipes.names("recall")
    assert r.thresholds == Thresholds(2, 1, 2, 1) and str(r.thresholds) == "2/1/2/1"
    assert (r.num_probes, r.answers_per_probe, r.answer_temperature) == (5, 2, 0.5)
    assert r.refusal == "I cannot answer as I have insufficient information."
    assert r.dataset == "OpenAssistant/oasst1" and r.language == "en"
    # "The dataset is released under CC BY-SA 4.0." (003, License)
    assert r.license == "cc-by-sa-4.0"
    assert r.license_notice.startswith("The dataset is released under CC BY-SA 4.0.")


def test_overrides_are_typed_and_recorded() -> None:
    r = recall_recipes.resolve(None, {"j_e": 3, "j_c": 1})
    assert r.thresholds == Thresholds(3, 1, 1, 1)
    rec = recipes.record(r)
    assert rec["changed"] == {"j_e": {"card": 2, "run": 3}, "j_c": {"card": 2, "run": 1}}
    assert "`j_e` 3 (card: 2)" in recipes.card_sentence(rec)
    with pytest.raises(ValueError, match="unknown recipe field"):
        recall_recipes.resolve(None, {"thresholds": "3/1/1/1"})
    with pytest.raises(ValueError, match="expected int"):
        recall_recipes.resolve(None, {"j_e": "three"})


def test_stages_take_their_numbers_from_the_recipe() -> None:
    from ragsft_assets.recall.stages import probes_schema

    arr = probes_schema(recall_recipes.RECALL_OASST1.num_probes)["properties"]["questions"]
    assert arr["minItems"] == arr["maxItems"] == 5
