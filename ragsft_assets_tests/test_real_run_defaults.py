"""A real run by default (issue 35): a snapshot materialized with no config drafts every pair it
drew, the draw is the card's ("Il reste 1 778 280 arêtes, dont 200 000 paires ont été tirées pour
ce jeu."), and ``ragsft plan KEY --json`` forecasts that same run with every release config listed.

The sample snapshot keeps its quick demo through its own ``snapshot.json`` (``max_pairs`` 24), never
through a package default. The LLM roles are the oracle double behind the real client and cache,
set from the environment as a user sets them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.cli.snapshots import sample_folder
from ragsft_assets.llm import engines
from ragsft_assets.plan import measure
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedBackend
from ragsft_assets_tests.oracle_double import Oracle

KEY = "20991231.fr"  # a snapshot of the user's, added from a folder


class CountingOracle(ScriptedBackend):
    """The oracle double, counting the requests that reach a model (not the cache's answers)."""

    NAME = "real-run-oracle"
    oracle = Oracle()

    def respond(self, messages):  # noqa: ANN001, ANN201
        return type(self).oracle(messages)


def test_no_package_default_limits_the_draw() -> None:
    """The package's defaults are the card's: bridge_pairs draws 200,000 pairs and question_drafts
    takes every one drawn; only a snapshot's snapshot.json or a run config says fewer."""
    from ragsft_assets.defs.corpus.assets import BridgePairsAssetConfig
    from ragsft_assets.defs.multihop.assets import MultihopConfig
    from ragsft_assets.multihop.recipes import RECIPES, default_pairs_drawn

    assert default_pairs_drawn() == RECIPES["default"].pairs_drawn == 200_000  # "200 000 paires"
    assert BridgePairsAssetConfig().max_pairs == 0  # 0: snapshot.json's, else the recipe's
    cfg = MultihopConfig()
    assert cfg.max_pairs is None and cfg.max_judged is None
    assert cfg.resolved("question_drafts").pairs_drawn == 200_000
    sample = orjson.loads((sample_folder() / "snapshot.json").read_bytes())
    assert sample["max_pairs"] == 24  # the demo's size lives with the sample, said why
    assert "demo" in sample["max_pairs_why"]


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("RAGSFT_GIT_COMMIT", "0" * 40)
    engines.register_backend(CountingOracle.NAME, CountingOracle)
    for role in ("GENERATOR", "JUDGE", "ANNOTATOR", "BASE_MODEL"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", CountingOracle.NAME)
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", role.lower())
    # `ragsft materialize` runs the project's Definitions, built once at import with the roles of the
    # environment then: rebuilt here with the roles just set (another test may have imported it first)
    import ragsft_assets.definitions as definitions
    from ragsft_assets.defs.resources import default_resources

    monkeypatch.setattr(definitions, "defs", definitions.build_definitions(default_resources()))
    return home


def _cli(*args: str):
    out = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return out


def test_default_run_drafts_every_drawn_pair_and_the_plan_forecasts_it(
    user_home: Path, tmp_path: Path
) -> None:
    """`snapshots add KEY --from DIR`, then `materialize '*question_drafts'` with no config: one draft
    call per drawn pair. `plan KEY --json` forecasts the same calls, counts as cached exactly the
    pairs an earlier partial run drafted, and lists every config of full_job."""
    folder = tmp_path / "dump"
    shutil.copytree(sample_folder(), folder)  # the user's folder: dumps and snapshot.json
    _cli("snapshots", "add", KEY, "--from", str(folder))

    # a partial run first (10 pairs), then the plan: its cache hits are those 10, counted
    _cli("materialize", "*question_drafts", "--partition", KEY, "--config-json",
         '{"ops": {"question_drafts": {"config": {"max_pairs": 10}}}}')  # fmt: skip
    store = ArtifactStore(home=str(user_home))
    drawn = store.read(KEY, "bridge_pairs").num_rows
    assert drawn == 24  # snapshot.json's max_pairs: the sample's quick demo
    out = _cli("plan", KEY, "--sample", "5", "--json")
    plan = orjson.loads(out.stdout)  # JSON alone on stdout
    drafts = plan["stages"]["question_drafts"]
    assert plan["input_items"] == drawn and drafts["calls"] == drawn
    assert drafts["cache_hits"] == 10  # the partial run's 10 pairs, not the sample's 100% x 24

    # the run with no config: every drawn pair gets its one draft call
    CountingOracle.calls = 0
    _cli("materialize", "*question_drafts", "--partition", KEY)
    assert CountingOracle.calls == drawn - 10  # the 10 of the partial run came from the cache
    counts = measure.ledger_counts(user_home / "assets" / KEY)["question_drafts"]
    assert len(counts["keys"]) == drawn  # one request per drawn pair
    assert counts["items"] == 3 * drawn  # the card's "trois questions demandées par paire"

    # the plan of that run: the same calls, all cached now, and every config of full_job listed
    plan = orjson.loads(_cli("plan", KEY, "--json").stdout)
    drafts = plan["stages"]["question_drafts"]
    assert (plan["sample_items"], plan["input_items"]) == (drawn, drawn)
    assert drafts["calls"] == drawn and drafts["cache_hits"] == drawn
    configs = set(plan["configs"])
    assert configs == {
        "default",
        "filtered",
        "filtered_qwen",
        "filtered_qwen_v2",
        "corpus",
        "corpus_filtered_qwen_v2",
        "hotpotqa_fr_abstracts_v2",
    }, configs
    assert all(c["rows_low"] <= c["rows"] <= c["rows_high"] for c in plan["configs"].values())
    for name, stage in plan["stages"].items():  # every LLM stage of the job, each with its range
        assert stage["calls_low"] <= stage["calls"] <= stage["calls_high"], name
    assert {"question_drafts", "ablation_verdicts", "first_hop", "criteria_annotation"} <= set(plan["stages"])


def test_a_snapshot_without_settings_drafts_every_pair_of_its_graph(user_home: Path, tmp_path: Path) -> None:
    """No max_pairs anywhere: bridge_pairs draws the recipe's 200,000, capped at the 189 pairs the
    sample's graph holds, and question_drafts sends one call for each (not a toy 24)."""
    folder = tmp_path / "dump"
    shutil.copytree(sample_folder(), folder)
    settings = orjson.loads((folder / "snapshot.json").read_bytes())
    for name in ("max_pairs", "max_pairs_why"):
        settings.pop(name)
    (folder / "snapshot.json").write_bytes(orjson.dumps(settings))
    _cli("snapshots", "add", KEY, "--from", str(folder))
    CountingOracle.calls = 0
    _cli("materialize", "*question_drafts", "--partition", KEY)
    drawn = ArtifactStore(home=str(user_home)).read(KEY, "bridge_pairs").num_rows
    assert drawn == 189  # every pair of the graph: fewer than the card's 200,000
    assert CountingOracle.calls == drawn
    counts = measure.ledger_counts(user_home / "assets" / KEY)["question_drafts"]
    assert len(counts["keys"]) == drawn
