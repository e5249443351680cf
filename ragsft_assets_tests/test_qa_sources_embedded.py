"""The QA chain (qa_source) with the real embedded model on 2 real HotpotQA questions."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.cli.sources import install_source
from ragsft_assets.defs.rag_sft.assets import qa_rag_prompts, qa_rag_responses, qa_rag_sft, qa_rag_verdicts
from ragsft_assets.defs.rag_sft.qa import questions
from ragsft_assets.resources.store import ArtifactStore

DATA = Path(__file__).resolve().parent / "data/hotpotqa/hotpotqa_train_distractor_70.json"
KEY = "hotpotqa.en"

pytestmark = [pytest.mark.integration]


def test_qa_chain_with_the_embedded_model(embedded_model: object, tmp_path: Path) -> None:
    copy = tmp_path / "train.json"
    shutil.copy(DATA, copy)
    install_source(KEY, copy, preset="hotpotqa", mapping_file=None, home=tmp_path)
    store = ArtifactStore(home=str(tmp_path))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", [KEY])
    config = {"max_questions": 2, "overrides": {"max_tokens": 160}}
    stages = ("rag_prompts", "rag_responses", "rag_verdicts")
    result = dg.materialize(
        [questions, qa_rag_prompts, qa_rag_responses, qa_rag_verdicts, qa_rag_sft],
        resources={"store": store, "generator": embedded_model, "judge": embedded_model},
        partition_key=KEY,
        instance=instance,
        run_config={"ops": {f"qa__{n}": {"config": config} for n in stages}},
    )
    assert result.success
    prompts = store.read(KEY, "rag_prompts")
    assert len(set(prompts["question_id"].to_pylist())) == 2
    responses = store.read(KEY, "rag_responses")
    verdicts = store.read(KEY, "rag_verdicts")
    # One real generation and one verdict per example, whatever the model wrote.
    assert sorted(responses["id"].to_pylist()) == sorted(prompts["id"].to_pylist())
    # the engine really answered: a broken engine errors every call and the rest would still pass
    assert "ok" in responses["status"].to_pylist()
    assert sorted(verdicts["id"].to_pylist()) == sorted(prompts["id"].to_pylist())
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"twins_together": True, "citations_verified": True, "layout_intact": True}
