"""review_labels with the real embedded model: an annotator role labels a 2-question blind
sample with the six-criteria protocol; whatever a 135M model says, each question ends as a boolean
label or an unreadable (not_annotated) verdict, never a crash."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import orjson
import pytest

from ragsft_assets.defs.multihop.review import review_labels
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.test_multihop_assets import PARTITION, materialize

pytestmark = [pytest.mark.integration]


def test_review_labels_with_the_embedded_model(embedded_model: object, tmp_path: Path) -> None:
    _, store, _, _ = materialize(tmp_path / "home")  # the questions and their documents, by the doubles
    questions = store.read(PARTITION, "multihop_questions").sort_by("id").slice(0, 2)
    sample = tmp_path / "sample.jsonl"
    rows = [{k: r[k] for k in ("id", "question", "answer")} for r in questions.to_pylist()]
    sample.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    unused = ScriptedChatModel(lambda m: pytest.fail("the judge role was not chosen"))
    result = dg.materialize(
        [review_labels, dg.AssetSpec("question_drafts"), dg.AssetSpec("abstracts")],
        resources={"store": store, "annotator": embedded_model, "judge": unused},
        partition_key=PARTITION,
        instance=instance,
        run_config={"ops": {"review_labels": {"config": {"sample": str(sample)}}}},
        selection=[review_labels.key],
    )
    assert result.success
    table = store.read(PARTITION, "review_labels").to_pylist()
    assert [r["id"] for r in table] == sorted(r["id"] for r in rows)
    # the engine answered every question (a broken engine errors each call: no text, no cache key)
    assert all(r["raw"] and r["cache_key"] for r in table), table
    labels = [orjson.loads(x) for x in (tmp_path / "labels-annotator.jsonl").read_bytes().splitlines()]
    by_id = {x["id"]: x["valid"] for x in labels}
    assert len(by_id) == len(labels) and set(by_id) <= {r["id"] for r in rows}
    for r in table:  # each question: a boolean label, or the unreadable verdict and no label
        if r["verdict"] == "not_annotated":
            assert r["id"] not in by_id
        else:
            assert isinstance(by_id[r["id"]], bool) and by_id[r["id"]] == (r["verdict"] == "kept")
    md = result.asset_materializations_for_node("review_labels")[0].metadata
    assert md["questions"].value == 2
    assert md["valid"].value + md["invalid"].value + md["not_annotated"].value == 2
    assert md["annotator/model"].value["backend"] == "vllm"  # the embedded engine, not a double
