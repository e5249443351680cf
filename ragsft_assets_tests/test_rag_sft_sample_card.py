"""The sample.fr release card shows hotpotqa_fr_abstracts_v2's Luciole RAG statistics (test doubles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.test_pipeline_e2e import KEY, filter_failing_model, run_full_job


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("sample_card")
    assert run_full_job(home, filter_failing_model()).success
    return home


def test_sample_card_shows_the_fr_v2_recipe_and_statistics(home: Path) -> None:
    card = (home / "releases" / KEY / "README.md").read_text()
    stats = json.loads(
        (ArtifactStore(home=str(home)).path(KEY, "rag_sft").parent / "_statistics.json").read_text()
    )
    assert stats["recipe"]["recipe"] == "hotpotqa_fr_abstracts_v2"
    assert "Recipe `hotpotqa_fr_abstracts_v2`: as the card." in card
    assert "> From a table, quote the row you use as it is written" in card
    gold = stats["refusals_gold_left"]
    assert gold["one"] == 0  # fr_v2: every twin loses both golds
    assert (
        f"| refusals with no gold left / one gold left (share of twin refusals) | {gold['none']} / 0" in card
    )
    assert f"tokenizer: {stats['tokenizer']})" in card
    com = stats["commitment"]
    # the card's "Commitment after the first word	0.89	0.39	0.12", beside this build's
    assert f"| commitment after one word | {com['commitment_1']} | 0.89 | 0.39 | 0.12 |" in card
