"""Every family's stage versions follow their prompts and recipes by themselves (issue 38): the
long-context variants, the Recall Rewrite stages, the RAG SFT prompts and verdicts and the multihop
LLM stages declare their templates and recipe fields once (``stage_versions``); an edited template or
recipe value changes exactly the versions of the stages that use it, so the UI marks exactly those
stale."""

from __future__ import annotations

import dataclasses
import shutil
from importlib import resources
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets import stage_versions
from ragsft_assets.definitions import defs
from ragsft_assets.long_context import recipes as lc_recipes
from ragsft_assets.recall import recipes as recall_recipes

OUTSIDE_MULTIHOP = {
    *(f"long_context/{v}" for v in lc_recipes.VARIANTS),
    *("claims", "claim_audit", "probes", "probe_answers", "probe_labels", "known_claims", "rewrites"),
    *(f"{prefix}rag_{stage}" for prefix in ("", "qa/") for stage in ("prompts", "verdicts")),
}
TASKS = sorted({t for spec in stage_versions.STAGES.values() for t in spec.tasks})


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {a for a in before if before[a] != after[a]}


def test_every_declared_stage_carries_its_derived_version() -> None:
    graph = defs.resolve_asset_graph()
    versions = stage_versions.stage_versions()
    assert set(versions) >= OUTSIDE_MULTIHOP | {"question_drafts", "first_hop"}
    for asset, version in versions.items():
        key = dg.AssetKey.from_user_string(asset)
        assert graph.has(key), asset
        assert graph.get(key).code_version == version, asset
    # no hand-bumped integer left on them ("3-<hash>" before)
    assert all("-" not in v and len(v) == 12 for v in versions.values())


@pytest.mark.parametrize("task", TASKS)
def test_an_edited_template_changes_exactly_the_stages_that_use_it(tmp_path: Path, task: str) -> None:
    before = stage_versions.stage_versions()
    shipped = tmp_path / "shipped"
    shutil.copytree(str(resources.files("ragsft_assets.prompts")), shipped)
    assert stage_versions.stage_versions(stage_versions.template_folder(shipped)) == before
    path = shipped / f"{task}.en.txt"
    path.write_text(path.read_text(encoding="utf-8") + "One more word.\n", encoding="utf-8")
    after = stage_versions.stage_versions(stage_versions.template_folder(shipped))
    assert _changed(before, after) == {a for a, s in stage_versions.STAGES.items() if task in s.tasks}


def test_the_long_context_variants_follow_the_recipe_fields_their_step_reads(monkeypatch) -> None:
    before = stage_versions.stage_versions()
    family = dict(lc_recipes.RECIPES)
    name = "long_context_raft_syntactic"
    family[name] = dataclasses.replace(family[name], syntactic_reserve_tokens=128)
    monkeypatch.setattr(lc_recipes, "RECIPES", family)
    assert _changed(before, stage_versions.stage_versions()) == {"long_context/raft_syntactic"}
    # a field no step reads (the license) changes nothing
    family[name] = dataclasses.replace(family[name], syntactic_reserve_tokens=96, license="mit")
    assert _changed(before, stage_versions.stage_versions()) == set()


@pytest.mark.parametrize(
    ("field", "value", "stages"),
    [("refusal", "No.", {"rewrites"}), ("j_e", 3, {"known_claims"}), ("num_probes", 4, {"probes"})],
)
def test_the_recall_stages_follow_the_recipe_fields_they_read(monkeypatch, field, value, stages) -> None:
    before = stage_versions.stage_versions()
    resolve = recall_recipes.resolve
    monkeypatch.setattr(
        recall_recipes,
        "resolve",
        lambda name=None, overrides=None: dataclasses.replace(resolve(name, overrides), **{field: value}),
    )
    assert _changed(before, stage_versions.stage_versions()) == stages
