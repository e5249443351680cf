"""The whole graph on the sample snapshot: with the oracle double (every stage keeps rows, exact
bookkeeping, byte-identical reruns) and once with the real embedded model (the run completes and
the funnel adds up, whatever few questions a 135M model gets through)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.definitions import build_definitions
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.oracle_double import oracle_model

KEY = "sample.fr"
FILTERED_PARENTS = {"filtered": "default", "filtered_qwen": "default", "filtered_qwen_v2": "filtered_qwen"}


def run_full_job(home: Path, model: object, run_config: dict | None = None) -> dg.ExecuteInProcessResult:
    install_snapshot(KEY, sample_folder(), home)
    resources = {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        "generator": model,
        "judge": model,
        "annotator": model,
        "base_model": model,
        "embedder": EmbeddingResource(cache_dir=str(home / "llm_cache")),  # bound; full_job embeds nothing
    }
    defs = build_definitions(resources)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [KEY])
    return defs.resolve_job_def("full_job").execute_in_process(
        partition_key=KEY, instance=instance, run_config=run_config or {}
    )


def ledger(home: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW ledger AS SELECT * FROM read_parquet('{home}/assets/{KEY}/_ledger/*.parquet')")
    return con


def rows(home: Path, asset: str) -> int:
    return ArtifactStore(home=str(home)).read(KEY, asset).num_rows


@pytest.fixture(scope="module")
def oracle_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("oracle_home")
    result = run_full_job(home, oracle_model())
    assert result.success
    return home


def test_every_stage_keeps_rows(oracle_home: Path) -> None:
    for asset in ("abstracts", "link_graph", "bridge_pairs", "question_drafts", "distractors"):
        assert rows(oracle_home, asset) > 0, asset
    assert rows(oracle_home, "multihop_questions") > 0
    assert rows(oracle_home, "rag_sft") > 0


def test_funnel_adds_up_in_the_ledger(oracle_home: Path) -> None:
    con = ledger(oracle_home)
    drafted = con.execute(
        "SELECT count(*) FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept'"
    ).fetchone()[0]
    decided_later = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE product = 'multihop' "
        "AND stage NOT IN ('question_drafts') AND candidate_id IN "
        "(SELECT candidate_id FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept')"
    ).fetchone()[0]
    assert drafted > 0 and decided_later == drafted  # every drafted question was decided downstream
    kept = set(ArtifactStore(home=str(oracle_home)).read(KEY, "multihop_questions")["id"].to_pylist())
    dropped_after = {
        r[0]
        for r in con.execute(
            "SELECT candidate_id FROM ledger WHERE product = 'multihop' AND verdict <> 'kept'"
        ).fetchall()
    }
    assert kept and not (kept & dropped_after)  # a released question was never dropped


def test_release_verifies_and_loads(oracle_home: Path) -> None:
    from datasets import load_dataset

    folder = oracle_home / "releases" / KEY
    assert verify_release(folder).ok
    loaded = {}
    for config in ("default", "corpus", "hotpotqa_cite", *FILTERED_PARENTS, "corpus_filtered_qwen_v2"):
        loaded[config] = ds = load_dataset(str(folder), config)
        assert sum(len(split) for split in ds.values()) > 0, config
    # issue 13: every filtered config is a subset of the config it filters, row for row, with its
    # filters' verdicts in its provenance folder
    for config, parent in FILTERED_PARENTS.items():
        assert (folder / "provenance" / config / "verdicts.parquet").is_file(), config
        for split, rows in loaded[config].items():
            by_id = {r["id"]: r for r in loaded[parent][split]}
            assert all(by_id.get(r["id"]) == r for r in rows), (config, split)


def test_rerun_gives_identical_bytes(oracle_home: Path, tmp_path: Path) -> None:
    assert run_full_job(tmp_path, oracle_model()).success
    for asset in ("multihop_questions", "rag_sft", "_ledger"):
        a = sorted((oracle_home / "assets" / KEY / asset).glob("*.parquet"))
        b = sorted((tmp_path / "assets" / KEY / asset).glob("*.parquet"))
        assert [p.name for p in a] == [p.name for p in b]
        for x, y in zip(a, b, strict=True):
            assert x.read_bytes() == y.read_bytes(), x


@pytest.mark.integration
def test_full_job_with_the_embedded_model(embedded_model: object, tmp_path: Path) -> None:
    result = run_full_job(
        tmp_path, embedded_model, {"ops": {"question_drafts": {"config": {"max_pairs": 8}}}}
    )
    assert result.success
    md = result.asset_materializations_for_node("question_drafts")[0].metadata
    # the engine really answered (a broken engine errors every call, and every slot is still ledgered)
    assert md["generator/errors"].value == 0 and md["generator/completion_tokens"].value > 0
    con = ledger(tmp_path)
    drafts = con.execute("SELECT count(*) FROM ledger WHERE stage = 'question_drafts'").fetchone()[0]
    assert drafts == 8 * 3  # every draft slot of the 8 pairs has a ledger row, whatever the model said
    # Each slot exactly once (a duplicated or lost slot fails), and the kept ones are the drafts
    # that reached the next stage: two independent counts, not the same rows summed twice.
    slots = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE stage = 'question_drafts'"
    ).fetchone()[0]
    assert slots == drafts
    kept = con.execute(
        "SELECT count(*) FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept'"
    ).fetchone()[0]
    downstream = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE product = 'multihop' "
        "AND stage NOT IN ('question_drafts') AND candidate_id IN "
        "(SELECT candidate_id FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept')"
    ).fetchone()[0]
    assert downstream == kept  # every kept draft was decided downstream, the others never reached it
    assert verify_release(tmp_path / "releases" / KEY).ok
