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


def test_the_rag_config_has_the_cards_three_fields_and_its_ids_in_provenance(home: Path) -> None:
    """The Luciole RAG card: "Each row has three fields" (messages, supporting_facts_titles,
    chunks_total), and for fr_v2 "Same three fields and same document layout as hotpotqa_cite". The
    ids `ragsft explain` reads stay in provenance/<config>/ids.parquet, row by row."""
    import datasets
    import pyarrow.parquet as pq

    from ragsft_assets.release import build
    from ragsft_assets.release.explain import explain

    folder = home / "releases" / KEY
    ds = datasets.load_dataset(str(folder), "hotpotqa_fr_abstracts_v2", cache_dir=str(home / "hf"))
    assert list(ds) == ["train"]  # fr_v2: "The train split of the filtered_qwen_v2 configuration"
    assert list(ds["train"].features) == ["messages", "supporting_facts_titles", "chunks_total"]
    assert ds["train"].features["chunks_total"] == datasets.Value("int32")
    assert ds["train"].features["supporting_facts_titles"] == datasets.List(datasets.Value("string"))
    ids = pq.read_table(folder / build.ids_path("hotpotqa_fr_abstracts_v2")).to_pylist()
    assert [(r["split"], r["row"]) for r in ids] == [("train", k) for k in range(ds["train"].num_rows)]
    asset = {r["id"]: r for r in ArtifactStore(home=str(home)).read(KEY, "rag_sft").to_pylist()}
    for r, row in zip(ids, ds["train"], strict=True):  # the k-th id is the k-th row's
        assert asset[r["id"]]["messages"] == row["messages"] and asset[r["id"]]["pair_id"] == r["pair_id"]
    trace = explain(ids[0]["id"], home=home, partition=KEY, lookup=lambda key: None)
    assert trace.lineage["config"] == "hotpotqa_fr_abstracts_v2" and trace.lineage["question_id"]
    manifest = json.loads((folder / "provenance" / "hotpotqa_fr_abstracts_v2" / "manifest.json").read_text())
    assert "ids" in json.dumps(manifest)  # hashed: `ragsft verify` checks it
