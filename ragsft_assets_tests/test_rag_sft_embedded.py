"""The rag_sft stage with the real embedded model on real HotpotQA records (few rows, real calls)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.defs.rag_sft.assets import rag_prompts, rag_responses, rag_sft, rag_verdicts
from ragsft_assets.rag_sft.citations import check_response
from ragsft_assets.rag_sft.hotpot_input import original_to_hf_table
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.resources.store import ArtifactStore

DATA = Path(__file__).resolve().parent / "data/hotpotqa/hotpotqa_train_distractor_70.json"
PARTITION = "hotpot.en"

pytestmark = [pytest.mark.integration]


def test_rag_sft_stage_with_the_embedded_model(embedded_model: object, tmp_path: Path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    store.write_splits(original_to_hf_table(json.loads(DATA.read_text())), PARTITION, "multihop_questions")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    config = {"max_questions": 4, "overrides": {"max_tokens": 160}}
    result = dg.materialize(
        [rag_prompts, rag_responses, rag_verdicts, rag_sft],
        resources={"store": store, "generator": embedded_model, "judge": embedded_model},
        partition_key=PARTITION,
        instance=instance,
        run_config={"ops": {n: {"config": config} for n in ("rag_prompts", "rag_responses", "rag_verdicts")}},
    )
    assert result.success
    prompts = store.read(PARTITION, "rag_prompts")
    responses = store.read(PARTITION, "rag_responses")
    verdicts = store.read(PARTITION, "rag_verdicts")
    assert len(set(prompts["question_id"].to_pylist())) == 4
    # One real generation per example and one verdict per example, whatever the model wrote.
    assert sorted(responses["id"].to_pylist()) == sorted(prompts["id"].to_pylist())
    # the engine really answered: a broken engine errors every call and the rest would still pass
    assert "ok" in responses["status"].to_pylist()
    assert sorted(verdicts["id"].to_pylist()) == sorted(prompts["id"].to_pylist())
    assert set(responses["status"].to_pylist()) <= {"ok", "unreadable", "error"}
    # What survives really passes the deterministic checks (the card's: the stricter rules only flag).
    for row in store.read(PARTITION, "rag_sft").to_pylist():
        system, _user, assistant = row["messages"]
        docs = parse_documents(system["content"])
        rep = check_response(
            assistant["content"],
            [d for _, d in docs],
            [t for t, _ in docs],
            row["supporting_facts_titles"] or None,
            strict=False,
        )
        assert rep.passes
    md = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "rag_responses"
    )
    assert md["llm/calls"].value + md["llm/cache_hits"].value == prompts.num_rows
