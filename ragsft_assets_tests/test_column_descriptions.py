"""Column descriptions in the UI: each asset's column schema carries what its columns hold."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA
from ragsft_assets.defs.metadata import column_schema
from ragsft_assets.long_context.build import CLUSTERED_SCHEMA, RAFT_SCHEMA, SYNTACTIC_SCHEMA
from ragsft_assets.multihop.hotpot_format import MULTIHOP_SCHEMA
from ragsft_assets.rag_sft.formatting import SFT_SCHEMA as RAG_SFT_SCHEMA
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA
from ragsft_assets.release import columns
from ragsft_assets_tests.test_recall_job import runs  # noqa: F401 - the recall job's run, as a fixture


def test_every_mapped_asset_is_an_asset_of_the_project() -> None:
    from ragsft_assets.definitions import defs

    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert set(columns.BY_ASSET) - keys == set()


@pytest.mark.parametrize(
    ("asset", "schema"),
    [
        ("abstracts", ABSTRACTS_SCHEMA),
        ("multihop_questions", MULTIHOP_SCHEMA),
        ("multihop_filtered_qwen_v2", MULTIHOP_SCHEMA),
        ("rag_sft", RAG_SFT_SCHEMA),
        ("qa/rag_sft", RAG_SFT_SCHEMA),
        ("long_context/raft", RAFT_SCHEMA),
        ("long_context/raft_syntactic", SYNTACTIC_SCHEMA),
        ("long_context/clustered", CLUSTERED_SCHEMA),
        ("recall_release", SFT_SCHEMA),
        ("recall_release", FULL_SCHEMA),
    ],
)
def test_every_column_of_a_product_is_described(asset: str, schema) -> None:
    table = column_schema(schema, asset)
    missing = [c.name for c in table.columns if not c.description]
    assert not missing, f"{asset}: columns without a description: {missing}"


def test_the_card_columns_say_what_the_card_says() -> None:
    hotpot = {c.name: c.description for c in column_schema(MULTIHOP_SCHEMA, "multihop_questions").columns}
    assert "bridge" in hotpot["type"] and "comparison" in hotpot["type"]
    assert "sent_id" in hotpot["supporting_facts"]
    assert "easy" in hotpot["level"]
    assert "SHA-256 of the title" in columns.describe("corpus_filtered_qwen_v2", ["id"])["id"]
    assert "<ref" in columns.describe("qa/rag_sft", ["messages"])["messages"]
    assert columns.describe("no_such_asset", ["verdict", "whatever"]) == {
        "verdict": columns.SHARED["verdict"]
    }


def test_a_materialized_asset_shows_column_descriptions(tmp_home: Path) -> None:
    """The Columns metadata of a real materialization (abstracts on the sample snapshot)."""
    from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
    from ragsft_assets.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    install_snapshot("sample.fr", sample_folder())
    instance.add_dynamic_partitions("snapshot", ["sample.fr"])
    job = defs.get_repository_def().get_implicit_job_def_for_assets([dg.AssetKey("abstracts")])
    assert job is not None
    result = job.execute_in_process(
        instance=instance,
        partition_key="sample.fr",
        asset_selection=[dg.AssetKey("snapshot_files"), dg.AssetKey("abstracts")],
    )
    assert result.success
    (event,) = [
        e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("abstracts")
    ]
    schema = event.materialization.metadata["dagster/column_schema"].value
    described = {c.name: c.description for c in schema.columns}
    for name in ("id", "title", "text", "sentences", "qid"):  # the card's five corpus columns
        assert described[name] == columns.CORPUS[name]
    assert all(described.values()), described


def test_recall_release_and_rewrites_show_the_cards_fields(runs) -> None:  # noqa: F811 - the fixture
    """recall_release's Columns are the -sft fields (and the -full ones beside them), described."""
    first = runs[0]
    md = first.asset_materializations_for_node("recall_release")[0].metadata
    sft = {c.name: c.description for c in md["dagster/column_schema"].value.columns}
    assert list(sft) == SFT_SCHEMA.names and all(sft.values()), sft
    full = {c.name: c.description for c in md["columns_full"].value.columns}
    assert list(full) == FULL_SCHEMA.names and "claim_id" in full["claims"]
    rewrites = first.asset_materializations_for_node("rewrites")[0].metadata
    described = {c.name: c.description for c in rewrites["dagster/column_schema"].value.columns}
    assert described["filter"] == columns.RECALL["filter"]
