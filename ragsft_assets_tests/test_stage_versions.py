"""Every family's stage versions follow their prompts and recipes by themselves (issue 38): the
long-context variants, the Recall Rewrite stages, the RAG SFT prompts, responses and verdicts and the multihop
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
from ragsft_assets.rag_sft import recipes as sft_recipes
from ragsft_assets.recall import recipes as recall_recipes

OUTSIDE_MULTIHOP = {
    *(f"long_context/{v}" for v in lc_recipes.VARIANTS),
    *("claims", "claim_audit", "probes", "probe_answers", "probe_labels", "known_claims", "rewrites"),
    *(f"{prefix}rag_{stage}" for prefix in ("", "qa/") for stage in ("prompts", "responses", "verdicts")),
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


@pytest.mark.parametrize(
    ("recipe", "field", "value", "stage"),
    [
        (sft_recipes.HOTPOTQA_CITE, "twin_share", 0.3, "rag_prompts"),
        (sft_recipes.FR_V2, "document_token_budget", 4096, "rag_prompts"),
        (sft_recipes.TRUST_ALIGN, "temperature", 0.7, "rag_responses"),
        (sft_recipes.FR_V2, "generation_thinking", True, "rag_responses"),
        (sft_recipes.HOTPOTQA_CITE, "citation_check", "drop", "rag_verdicts"),
        (sft_recipes.TRUST_ALIGN, "factual_judge_max_tokens", 200, "rag_verdicts"),
        # read by the prompts (no twins) and by the verdicts (no citation F1)
        (sft_recipes.HOTPOTQA_CITE, "multi_answer", True, "rag_prompts rag_verdicts"),
    ],
)
def test_the_rag_sft_stages_follow_the_recipe_fields_they_read(
    monkeypatch, recipe, field, value, stage
) -> None:
    before = stage_versions.stage_versions()
    family = dict(sft_recipes.RECIPES)
    family[recipe] = dataclasses.replace(family[recipe], **{field: value})
    monkeypatch.setattr(sft_recipes, "RECIPES", family)
    # both chains (snapshot, qa/) serve every recipe of the family
    assert _changed(before, stage_versions.stage_versions()) == {
        f"{prefix}{s}" for prefix in ("", "qa/") for s in stage.split()
    }


def test_a_rag_sft_field_no_llm_stage_reads_changes_no_version(monkeypatch) -> None:
    """A formatting step's field (read by rag_sft alone, not an LLM stage) moves no LLM stage."""
    before = stage_versions.stage_versions()
    family = dict(sft_recipes.RECIPES)
    name = sft_recipes.FR_V2
    family[name] = dataclasses.replace(family[name], rewrite_refusals=not family[name].rewrite_refusals)
    monkeypatch.setattr(sft_recipes, "RECIPES", family)
    assert _changed(before, stage_versions.stage_versions()) == set()
