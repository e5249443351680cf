"""Inputs declared once (issue 38, ``defs/wiring.py``): a judged stage's ``deps`` are both its
Dagster deps and the only tables its judge may read; an undeclared read fails loudly."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from ragsft_assets.defs.multihop.common import RecipeConfig
from ragsft_assets.defs.multihop.judged import JudgeCall, Judged, JudgedStage, judged_asset
from ragsft_assets.defs.wiring import DeclaredInputs, UndeclaredRead, reads
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedChatModel

PARTITION = "wiring.fr"


def test_declared_inputs_read_only_what_is_declared(tmp_path: Path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    for name in ("abstracts", "question_drafts", "first_hop"):
        store.write(pa.table({"id": [name]}), PARTITION, name)
    inputs = DeclaredInputs(store, "first_hop", frozenset({"abstracts"}))
    assert inputs.read(PARTITION, "abstracts")["id"].to_pylist() == ["abstracts"]
    assert inputs.read(PARTITION, "first_hop").num_rows == 1  # its own files: its checks read them
    with pytest.raises(UndeclaredRead, match=r"add 'question_drafts' to its deps"):
        inputs.read(PARTITION, "question_drafts")
    with pytest.raises(UndeclaredRead):
        inputs.files(PARTITION, "question_drafts")
    assert reads("a", dg.AssetKey(["qa", "b"])) == [dg.AssetKey("a"), dg.AssetKey(["qa", "b"])]


def _stage(deps: tuple[str, ...]) -> dg.AssetsDefinition:
    def judge(call: JudgeCall) -> Judged:
        ids = call.store.read(call.partition, "question_drafts")["id"].to_pylist()
        return Judged(pa.table({"id": ids, "verdict": ["kept"] * len(ids)}), [])

    return judged_asset(
        JudgedStage(
            name="first_hop",
            description="test-only judged stage",
            task="multihop_first_hop",
            role=lambda r: r.first_hop_role,
            config=RecipeConfig,
            reads=deps,
            judge=judge,
        )
    )


@pytest.mark.parametrize("declared", [True, False])
def test_a_judged_stage_reads_its_deps_and_nothing_else(
    tmp_path: Path, declared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # judged_asset registers its stage by name (the multihop stream runs the registered stages):
    # the test-only "first_hop" must not stay in place of the real one for later tests
    from ragsft_assets.defs.multihop.judged import JUDGED_STAGES

    monkeypatch.setitem(JUDGED_STAGES, "first_hop", JUDGED_STAGES["first_hop"])
    store = ArtifactStore(home=str(tmp_path))
    store.write(pa.table({"id": ["q1"], "question": ["Q ?"], "answer": ["A"]}), PARTITION, "question_drafts")
    asset = _stage(("question_drafts", "abstracts") if declared else ("abstracts",))
    assert {k.path[-1] for k in asset.asset_deps[asset.key]} == (
        {"question_drafts", "abstracts"} if declared else {"abstracts"}
    )
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    model = ScriptedChatModel(lambda messages: "{}")
    result = dg.materialize(
        [asset],
        resources={"store": store, "judge": model, "annotator": model},
        partition_key=PARTITION,
        instance=instance,
        raise_on_error=False,
    )
    assert result.success is declared
    if declared:
        assert store.read(PARTITION, "first_hop")["id"].to_pylist() == ["q1"]
    else:
        [failure] = [e for e in result.all_events if e.is_step_failure]
        assert "add 'question_drafts' to its deps" in str(failure.step_failure_data.error)
