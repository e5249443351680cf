"""The release assets in-process with Dagster, and the catalog/explain CLI commands."""

from __future__ import annotations

import dagster as dg
from click.testing import CliRunner

from ragsft_assets.defs.release import defs
from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.release_fixtures import PARTITION, write_world


def test_defs_expose_the_release_group() -> None:
    merged = dg.Definitions.merge(defs, dg.Definitions(resources={"store": ArtifactStore()}))
    graph = merged.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"release", "dataset_card", "release_manifest"} <= keys
    assert {
        graph.get(dg.AssetKey(k)).group_name for k in ("release", "dataset_card", "release_manifest")
    } == {"release"}


def test_card_and_manifest_depend_on_the_audit() -> None:
    for asset in (dataset_card, release_manifest):
        assert dg.AssetKey("multihop_audit") in {d.asset_key for d in asset.specs_by_key[asset.key].deps}


def test_materialize_release_group(tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    result = dg.materialize(
        [release, dataset_card, release_manifest],
        resources={"store": store},
        partition_key=PARTITION,
        instance=instance,
    )
    assert result.success
    folder = tmp_path / "releases" / PARTITION
    assert verify_release(folder).ok
    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [("release_verifies", True)]
    md = result.asset_materializations_for_node("release")[0].metadata
    assert md["dagster/row_count"].value == 14 + 11 + 22
    assert (tmp_path / "catalog.duckdb").is_file()
    # a second run of the group over the same inputs gives the same bytes; only the run's
    # statistics (its run id, host, time) are its own
    stats = folder / "provenance" / "run_stats.json"
    first = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p != stats}
    assert dg.materialize(
        [release, dataset_card, release_manifest], resources={"store": store}, partition_key=PARTITION,
        instance=instance,
    ).success  # fmt: skip
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p != stats} == first
    digests = [
        r.asset_materialization.metadata["root_digest"].value
        for r in instance.fetch_materializations(dg.AssetKey("release_manifest"), limit=2).records
    ]
    assert len(set(digests)) == 1 and len(digests) == 2


def test_release_with_corpus_only_notes_the_rest(tmp_path) -> None:
    import shutil

    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    shutil.rmtree(store.root / PARTITION / "rag_sft")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    result = dg.materialize([release], resources={"store": store}, partition_key=PARTITION, instance=instance)
    md = result.asset_materializations_for_node("release")[0].metadata
    assert md["configs"].value == ["corpus", "default"]
    assert "rag_sft" in md["notes"].value


def test_cli_catalog_and_explain(tmp_path, monkeypatch) -> None:
    from ragsft_assets.cli.release import catalog, explain

    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    runner = CliRunner()
    res = runner.invoke(catalog, ["--rebuild"])
    assert res.exit_code == 0, res.output
    assert f'"{PARTITION}".abstracts' in res.output and "final_decisions" in res.output
    res = runner.invoke(
        catalog, ["--sql", "SELECT reason, count(*) AS n FROM decisions WHERE verdict = 'dropped' GROUP BY 1"]
    )
    assert res.exit_code == 0 and res.output.splitlines() == ["reason\tn", "answer_not_in_b\t11"]
    qid = store.read(PARTITION, "multihop_questions", "validation")["id"][0].as_py()
    res = runner.invoke(explain, [qid, "--partition", PARTITION])
    assert res.exit_code == 0, res.output
    assert f"question {qid}" in res.output and "gold_a" in res.output
    res = runner.invoke(explain, ["f" * 24])
    assert res.exit_code != 0 and "in no partition" in res.output


def test_release_verifies_fails_on_a_file_changed_after_the_write(tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    kw = {"resources": {"store": store}, "partition_key": PARTITION, "instance": instance}
    assert dg.materialize([release, dataset_card], **kw).success
    # Rewritten between `release` and the check: still a valid Parquet file, so re-hashing it
    # alone (what the manifest does) would agree with itself; the write-time hash does not.
    data = tmp_path / "releases" / PARTITION / "corpus" / "train-00000-of-00001.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(data).slice(1), data)
    result = dg.materialize([release_manifest], raise_on_error=False, **kw)
    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [("release_verifies", False)]
    assert checks[0].metadata["changed_since_write"].value == ["corpus/train-00000-of-00001.parquet"]
