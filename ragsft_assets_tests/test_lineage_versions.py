"""Versions follow prompts and recipes by themselves (issue 38): a multihop LLM stage's code version
is derived from its prompt templates and the recipe fields it reads, never bumped by hand, so an
edit marks exactly the stages that use what was edited stale."""

from __future__ import annotations

import dataclasses
import shutil
from importlib import resources
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.definitions import defs
from ragsft_assets.defs.multihop import common
from ragsft_assets.multihop import ablations
from ragsft_assets.prompts import load_prompt

TASKS = sorted({t for tasks in common.STAGE_TASKS.values() for t in tasks})


def test_every_llm_stage_has_its_derived_version() -> None:
    graph = defs.resolve_asset_graph()
    versions = common.stage_versions()
    assert {
        "question_drafts",
        "ablation_verdicts",
        "first_hop",
        "criteria_annotation",
        "bridge_judge",
    } <= set(versions)
    for asset, version in versions.items():
        assert graph.has(dg.AssetKey(asset)), asset
        assert graph.get(dg.AssetKey(asset)).code_version == version, asset


def _patched_folder(tmp_path: Path, task: str, lang: str) -> Path:
    folder = tmp_path / "prompts"
    shutil.copytree(str(resources.files("ragsft_assets.prompts")), folder)
    path = folder / f"{task}.{lang}.txt"
    assert path.is_file(), path
    path.write_text(path.read_text(encoding="utf-8") + "Un mot de plus.\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("task", TASKS)
def test_an_edited_template_changes_exactly_the_stages_that_use_it(tmp_path: Path, task: str) -> None:
    before = common.stage_versions()
    lang = "fr" if (resources.files("ragsft_assets.prompts") / f"{task}.fr.txt").is_file() else "en"
    after = common.stage_versions(common.template_folder(_patched_folder(tmp_path, task, lang)))
    changed = {a for a in before if before[a] != after[a]}
    assert changed == {a for a, tasks in common.STAGE_TASKS.items() if task in tasks}
    # the shipped texts read through a folder give the shipped versions
    folder = tmp_path / "same"
    shutil.copytree(str(resources.files("ragsft_assets.prompts")), folder)
    assert common.stage_versions(common.template_folder(folder)) == before


def test_an_edited_recipe_field_changes_exactly_the_stages_that_read_it(monkeypatch) -> None:
    before = common.stage_versions()
    resolve = common.mh_recipes.resolve

    def lenient(asset: str, name: str | None, overrides: dict | None = None):  # noqa: ANN202
        return dataclasses.replace(resolve(asset, name, overrides), strict_impossible=False)

    monkeypatch.setattr(common.mh_recipes, "resolve", lenient)
    after = common.stage_versions()
    assert {a for a in before if before[a] != after[a]} == {"ablation_verdicts"}


def test_the_ablation_layout_is_template_text() -> None:
    """The card's French layout of the judge's documents comes from the templates, not from code."""
    item = ablations.JudgeItem("q", "Qui ?", "X", "Ta", "texte a", "Tb", "texte b")
    tpl = load_prompt(ablations.PROMPT_TASK, "fr")
    [ab] = ablations.build_ablation_messages(tpl, item, "ab", "fr")
    assert "Document 1 : Ta\ntexte a\n\nDocument 2 : Tb\ntexte b" in ab["content"]
    [none] = ablations.build_ablation_messages(tpl, item, "none", "fr")
    assert "(aucun document)" in none["content"]
    [en] = ablations.build_ablation_messages(load_prompt(ablations.PROMPT_TASK, "en"), item, "a", "en")
    assert "Document 1: Ta\ntexte a" in en["content"]
    for task in (ablations.DOCUMENT_TASK, ablations.NO_DOCUMENT_TASK):
        assert {load_prompt(task, lang).lang for lang in ("fr", "en")} == {"fr", "en"}, task
