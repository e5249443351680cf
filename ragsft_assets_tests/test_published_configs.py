"""A published config is one entry (issue 38, "a config in one place"): a test-only config registered
as a single ``PublishedConfig`` is an asset with its check in the built definitions, a recipe, a
run-config name, a config of the release layout, and a section of the dataset card, with nothing
else edited. The full job runs in a fresh Python, which registers the entry before importing the
families (they derive their tables from the entries when imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragsft_assets import published_configs as pc
from ragsft_assets.release import layout

REPO = Path(__file__).resolve().parents[1]
NAME, ASSET = "filtered_again", "multihop_filtered_again"
CORPUS = "corpus_filtered_again"  # a corpus config drawn from it: a second entry, its own asset
NOTE = "A test-only config: the rows of `default` that first_hop and mechanical_rules keep, once more."
# The fresh Python: one entry, then the whole snapshot graph with the oracle double, then what the
# definitions, the recipes, the release folder and its card say of the entry (one JSON line).
SCRIPT = f"""
import json, sys
from pathlib import Path

from ragsft_assets import published_configs as pc

pc.register(
    pc.PublishedConfig(
        {NAME!r},
        {ASSET!r},
        "multihop",
        "The rows of `default` kept by the first-hop judge and the mechanical rules, a second time.",
        card="ours: a test-only config",
        parent="default",
        filters=("first_hop", "mechanical_rules"),
        asset_description="A test-only filtered config.",
        check_description="Every row is a row of `default`.",
        card_note={NOTE!r},
        renamable=True,
        unit="questions",
    ),
    before="corpus",
)
pc.register(
    pc.PublishedConfig(
        {CORPUS!r},
        {CORPUS!r},
        "corpus",
        "The abstracts in the contexts of `filtered_again`.",
        parent={NAME!r},
        stages=({CORPUS!r},),
        asset_description="A test-only corpus config.",
        unit="abstracts",
    ),
    before="corpus",
)

from ragsft_assets import recipes
from ragsft_assets.cli.summary import UNITS
from ragsft_assets.defs.rag_sft.assets import SNAPSHOT_INPUTS
from ragsft_assets.defs.release.assets import ReleaseNamesConfig
from ragsft_assets.definitions import build_definitions
from ragsft_assets.release import layout
from ragsft_assets_tests.test_pipeline_e2e import filter_failing_model, run_full_job

home = Path(sys.argv[1])
defs = build_definitions()
spec, corpus = defs.get_assets_def({ASSET!r}), defs.get_assets_def({CORPUS!r})
result = run_full_job(home, filter_failing_model())
folder = home / "releases" / "sample.fr"
print("RESULT " + json.dumps({{
    "success": result.success,
    "checks": sorted(c.name for c in spec.check_specs),
    "check_passed": [e.passed for e in result.get_asset_check_evaluations()
                     if e.asset_key.to_user_string() == {ASSET!r}],
    "deps": sorted(k.to_user_string() for k in spec.asset_deps[spec.key]),
    "corpus_deps": sorted(k.to_user_string() for k in corpus.asset_deps[corpus.key]),
    "recipe": recipes.resolve({NAME!r}, {{}}).filters,
    "names_field": ReleaseNamesConfig().{NAME},
    "snapshot_input": SNAPSHOT_INPUTS.get({NAME!r}),
    "unit": UNITS.get({ASSET!r}),
    "layout": [c.name for c in layout.RELEASE_CONFIGS],
    "files": layout.release_files(folder),
    "card": (folder / "README.md").read_text(encoding="utf-8"),
}}))
"""


def _run_with_entry(home: Path) -> dict:
    env = {**os.environ, "RAGSFT_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(home)], env=env, capture_output=True, text=True, timeout=900
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.integration
def test_a_config_of_one_entry_is_built_released_and_carded(tmp_path: Path) -> None:
    """A filtered config of one entry, and a corpus config of one more drawn from its contexts."""
    out = _run_with_entry(tmp_path)
    assert out["success"]
    # the definitions: its asset, its check named after its parent, its filters' verdicts as inputs
    assert out["checks"] == ["is_subset_of_default"] and out["check_passed"] == [True]
    assert out["deps"] == ["first_hop", "mechanical_rules", "multihop_questions"]
    assert out["recipe"] == ["first_hop", "mechanical_rules"]  # a multihop recipe of its own
    assert out["names_field"] == NAME and out["snapshot_input"] == ASSET and out["unit"] == "questions"
    # the release layout, in the entry's place, and its files: the same rows as `filtered` (same filters)
    assert out["layout"].index(NAME) == out["layout"].index(CORPUS) - 1 == out["layout"].index("corpus") - 2
    assert set(out["files"][NAME]) == set(out["files"]["filtered"])
    folder = tmp_path / "releases" / "sample.fr"
    for split, rel in out["files"][NAME].items():
        assert (folder / rel).read_bytes() == (folder / layout.data_file("filtered", split)).read_bytes()
    assert (folder / "provenance" / NAME / "verdicts.parquet").is_file()
    # the card: its YAML entry, its filter section with the entry's note, its recipe line
    card = out["card"]
    assert f"- config_name: {NAME}" in card
    assert f"### `{NAME}`: verdicts of each filter, in the order they ran\n\n{NOTE}" in card
    assert f"- `{NAME}`: Recipe `filtered`: as the card." in card
    # the corpus config: its asset on its parent's rows, its files, its card section and recipe line
    assert out["corpus_deps"] == ["abstracts", ASSET] and set(out["files"][CORPUS]) == set(out["files"][NAME])
    assert f"### `{CORPUS}`: gold and distractor-only abstracts per split" in card
    assert f"- `{CORPUS}`: Recipe `{CORPUS}`: as the card." in card


def test_register_refuses_a_taken_name_an_unknown_parent_and_a_late_entry() -> None:
    entry = pc.by_name("filtered")
    with pytest.raises(ValueError, match="name or asset taken"):
        pc.register(entry)
    with pytest.raises(ValueError, match="parent 'nowhere' is no config"):
        pc.register(pc.PublishedConfig("x", "multihop_x", "multihop", "x", parent="nowhere"))
    # this process imported the families: an entry now would be missing from their tables
    with pytest.raises(RuntimeError, match="before importing the families"):
        pc.register(pc.PublishedConfig("x", "multihop_x", "multihop", "x", parent="default"))
    with pytest.raises(ValueError, match="family 'qa' is not one of"):
        pc.PublishedConfig("x", "multihop_x", "qa", "x")


def test_every_table_of_configs_is_the_entries() -> None:
    """The derived tables hold every entry and nothing else (a table spelled by hand drifts)."""
    from ragsft_assets.cli.sources import SNAPSHOT_QUESTIONS
    from ragsft_assets.defs.multihop.filters import CONFIG_ASSETS
    from ragsft_assets.multihop.recipes import RECIPES
    from ragsft_assets.release.card import FILTER_NOTES

    entries = pc.configs()
    assert [c.name for c in layout.RELEASE_CONFIGS] == [c.name for c in entries]
    assert set(RECIPES) == {c.name for c in entries if c.is_multihop_recipe}
    assert tuple(c.asset for c in entries if c.family == "multihop") == SNAPSHOT_QUESTIONS
    assert {n: a.key.to_user_string() for n, a in CONFIG_ASSETS.items()} == {
        c.name: c.asset for c in entries if c.filters or (c.family == "corpus" and c.parent)
    }
    assert set(FILTER_NOTES) == {c.name for c in entries if c.card_note}
