"""The corpus assets in-process: real records, a synthetic interlinked snapshot, the sample, bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli.snapshots import install_snapshot, sample_folder, snapshots
from ragsft_assets.corpus import invariants
from ragsft_assets.defs.corpus import abstracts, bridge_pairs, defs, link_graph
from ragsft_assets.ids import doc_id
from ragsft_assets.resources.snapshots import SnapshotNotFoundError, SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.corpus_fixtures import REAL_FRWIKI, interlinked_records, make_record, write_jsonl

ASSETS = [abstracts, link_graph, bridge_pairs]


def _materialize(home: Path, key: str, run_config: dict | None = None, selection: list | None = None):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [key])
    return dg.materialize(
        selection or ASSETS,
        resources={"store": ArtifactStore(home=str(home)), "snapshots": SnapshotSource(home=str(home))},
        partition_key=key,
        instance=instance,
        run_config=run_config or {"ops": {"abstracts": {"config": {"workers": 1}}}},
        raise_on_error=False,
    )


def _metadata(result: dg.ExecuteInJobResult, asset: str) -> dict:
    for ev in result.get_asset_materialization_events():
        if ev.asset_key == dg.AssetKey(asset):
            return {k: v.value for k, v in ev.step_materialization_data.materialization.metadata.items()}
    raise AssertionError(f"no materialization of {asset}")


def _asset_bytes(home: Path, key: str) -> dict[str, bytes]:
    root = home / "assets" / key
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def test_defs_load() -> None:
    full = dg.Definitions.merge(
        defs, dg.Definitions(resources={"store": ArtifactStore(), "snapshots": SnapshotSource()})
    )
    keys = sorted(k.to_user_string() for k in full.resolve_asset_graph().get_all_asset_keys())
    assert keys == ["abstracts", "bridge_pairs", "link_graph", "snapshot_files"]
    assert len(list(full.resolve_asset_graph().asset_check_keys)) == 4


def test_real_records_materialize(tmp_path: Path) -> None:
    install_snapshot("20240916.fr", REAL_FRWIKI.parent, tmp_path)
    result = _materialize(
        tmp_path, "20240916.fr", {"ops": {"abstracts": {"config": {"workers": 1, "min_chars": 100}}}}
    )
    assert result.success
    md = _metadata(result, "abstracts")
    assert md["dagster/row_count"] == 3  # Manoir de Kergurion's abstract is one short sentence
    assert "| too_short | 1 |" in md["funnel"]
    rows = ArtifactStore(home=str(tmp_path)).read("20240916.fr", "abstracts").to_pylist()
    assert {r["title"] for r in rows} == {"Esochí", "Néo Kallyndíri", "Fakarava (Polynésie française)"}
    assert all(r["id"] == doc_id(r["title"]) and r["text"] == " ".join(r["sentences"]) for r in rows)


@pytest.fixture(scope="module")
def ring_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("ring_home")
    folder = write_jsonl(home / "src" / "dump.jsonl", interlinked_records(30)).parent
    (folder / "snapshot.json").write_text('{"split_shares": [0.8, 0.1, 0.1]}')
    install_snapshot("ring.fr", folder, home)
    return home


def test_synthetic_snapshot_materializes_with_checks(ring_home: Path) -> None:
    result = _materialize(ring_home, "ring.fr")
    assert result.success
    checks = {ev.check_name: ev.passed for ev in result.get_asset_check_evaluations()}
    assert checks == {c: True for c in checks} and len(checks) == 4
    store = ArtifactStore(home=str(ring_home))
    graph = store.read("ring.fr", "link_graph")
    pairs = store.read("ring.fr", "bridge_pairs")
    assert graph.num_rows > 20 and pairs.num_rows > 10
    assert set(graph.column("split").to_pylist()) >= {"train"}
    md = _metadata(result, "abstracts")
    assert md["seed"] == 20260731 and md["config"]["split_shares"] == [0.8, 0.1, 0.1]
    assert set(md["rows_per_split"]) <= {"train", "validation", "test"}
    assert "wall_time_s" in md and "preview" in md
    ledger = pq.read_table(ring_home / "assets" / "ring.fr" / "_ledger" / "abstracts.parquet")
    assert ledger.num_rows == 31 and set(ledger.column("verdict").to_pylist()) == {"kept"}


def test_rerun_is_byte_identical(ring_home: Path, tmp_path: Path) -> None:
    first = _asset_bytes(ring_home, "ring.fr") or None
    if first is None:
        assert _materialize(ring_home, "ring.fr").success
        first = _asset_bytes(ring_home, "ring.fr")
    # Another home, two workers: same bytes.
    shutil.copytree(ring_home / "snapshots", tmp_path / "snapshots")
    result = _materialize(tmp_path, "ring.fr", {"ops": {"abstracts": {"config": {"workers": 2}}}})
    assert result.success
    assert _asset_bytes(tmp_path, "ring.fr") == first


def test_missing_snapshot_says_how_to_add_it(tmp_path: Path) -> None:
    result = _materialize(tmp_path, "20240101.fr", selection=[abstracts])
    assert not result.success
    with pytest.raises(SnapshotNotFoundError) as err:
        SnapshotSource(home=str(tmp_path)).files("20240101.fr")
    message = str(err.value)
    assert str(tmp_path / "snapshots" / "20240101.fr") in message
    assert "ragsft snapshots add 20240101.fr --from FOLDER" in message


def test_too_many_bad_lines_fail_naming_file_and_line(tmp_path: Path) -> None:
    good = make_record("Valrenne", "Valrenne est une ville. " * 20, identifier=1)
    write_jsonl(tmp_path / "snapshots" / "bad.fr" / "dump.jsonl", [good, b"{broken", b"\xff"])
    result = _materialize(tmp_path, "bad.fr", selection=[abstracts])
    assert not result.success
    failure = next(ev for ev in result.all_events if ev.event_type_value == "STEP_FAILURE")
    text = str(failure.step_failure_data.error)
    assert "dump.jsonl:2" in text and "max_bad_share" in text
    # Raising the limit lets the run pass and the bad lines are counted in metadata.
    ok = _materialize(
        tmp_path,
        "bad.fr",
        {"ops": {"abstracts": {"config": {"workers": 1, "max_bad_share": 0.9}}}},
        [abstracts],
    )
    assert ok.success and _metadata(ok, "abstracts")["bad_lines"] == 2


def test_invariants_catch_broken_tables(ring_home: Path) -> None:
    store = ArtifactStore(home=str(ring_home))
    if not store.files("ring.fr", "link_graph"):
        assert _materialize(ring_home, "ring.fr").success
    table = store.read("ring.fr", "abstracts")
    doubled = table.slice(0, 2).set_column(
        table.schema.get_field_index("split"), "split", [["train", "test"]]
    )
    doubled = doubled.set_column(0, "id", [[doubled["id"][0].as_py()] * 2])
    assert invariants.duplicate_ids(doubled) and invariants.documents_in_several_splits(doubled)
    assert invariants.ids_not_matching_titles(doubled)  # row 2 carries row 1's id
    graph = store.read("ring.fr", "link_graph")
    assert invariants.edges_outside_corpus_split(graph, table) == []
    assert len(invariants.edges_outside_corpus_split(graph, table.slice(0, 1))) > 0


def test_cli_add_list_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    runner = CliRunner()
    out = runner.invoke(snapshots, ["add", "sample.fr", "--sample"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "snapshots" / "sample.fr" / "snapshot.json").is_file()
    assert (tmp_path / "dagster" / "dagster.yaml").is_file()
    instance = dg.DagsterInstance.from_config(str(tmp_path / "dagster"))
    assert instance.get_dynamic_partitions("snapshot") == ["sample.fr"]
    assert "sample.fr\tfolder, partition" in runner.invoke(snapshots, ["list"]).output
    assert runner.invoke(snapshots, ["add", "Not A Key", "--sample"]).exit_code != 0
    assert runner.invoke(snapshots, ["remove", "sample.fr"]).exit_code == 0
    assert not (tmp_path / "snapshots" / "sample.fr").exists()
    assert dg.DagsterInstance.from_config(str(tmp_path / "dagster")).get_dynamic_partitions("snapshot") == []


def test_sample_snapshot_funnel(tmp_path: Path) -> None:
    install_snapshot("sample.fr", sample_folder(), tmp_path)
    result = _materialize(tmp_path, "sample.fr")
    assert result.success
    assert all(ev.passed for ev in result.get_asset_check_evaluations())
    store = ArtifactStore(home=str(tmp_path))
    table = store.read("sample.fr", "abstracts")
    funnel = _metadata(result, "abstracts")["funnel"]
    # Every awkward case the sample's README lists shows up in the funnel.
    for reason in [
        "malformed_line",
        "disambiguation_page",
        "list_page",
        "chronology_page",
        "index_page",
        "glossary_page",
        "year_page",
        "date_page",
        "missing_abstract",
        "too_short",
        "duplicate_title",
    ]:
        count = int(
            next(line for line in funnel.splitlines() if line.startswith(f"| {reason} |")).split("|")[2]
        )
        assert count > 0, reason
    link_funnel = _metadata(result, "abstracts")["link_funnel"]
    for reason in ["link_redlink", "link_external", "link_anchor_not_in_abstract"]:
        assert f"| {reason} | 0 |" not in link_funnel
    rows = {r["title"]: r for r in table.to_pylist()}
    assert rows["Lanvière"]["revision"] == 218002321  # the newer of the two duplicate records
    assert "Tourte valrennaise" in rows and "Halle aux grains de Valrenne" not in rows
    splits = {s: sum(1 for r in rows.values() if r["split"] == s) for s in ("train", "validation", "test")}
    assert min(splits.values()) >= 10  # enough documents per split for 8 distractors
    # Redirect-like targets: lowercase first letter resolves; the unaccented variant does not exist here.
    vache = [link["target_title"] for link in rows["Vache sauvannaise"]["links"]]
    assert "Fromage de Sauvanne" in vache
    graph = store.read("sample.fr", "link_graph").to_pylist()
    ecole = {
        (e["source_title"], e["target_title"]) for e in graph if e["source_title"] == "École de Valrenne"
    }
    assert ("École de Valrenne", "Étienne Marchal") not in ecole  # only inside "tels que ..., ... et ..."
    assert _metadata(result, "link_graph")["funnel"].count("| enumeration | 0 |") == 0


def test_failed_blocking_check_stops_downstream(ring_home: Path, tmp_path: Path, monkeypatch) -> None:
    shutil.copytree(ring_home / "snapshots", tmp_path / "snapshots")
    monkeypatch.setattr(
        invariants, "documents_in_several_splits", lambda table: [("someid", ["test", "train"])]
    )
    result = _materialize(tmp_path, "ring.fr")
    assert not result.success
    checks = {ev.check_name: ev.passed for ev in result.get_asset_check_evaluations()}
    assert checks["one_split_per_document"] is False
    materialized = {ev.asset_key.to_user_string() for ev in result.get_asset_materialization_events()}
    assert materialized == {"abstracts"}  # link_graph and bridge_pairs never ran


def test_install_snapshot_brings_the_topic_files(tmp_path: Path) -> None:
    folder = write_jsonl(tmp_path / "src" / "dump.jsonl", interlinked_records(3)).parent
    (folder / "topics.tsv").write_text("Alpha\tScience\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not part of the snapshot\n", encoding="utf-8")
    target = install_snapshot("topics.fr", folder, tmp_path / "home")
    # and the manifest `snapshots add` writes last (the sensor's sign of a complete folder)
    assert sorted(p.name for p in target.iterdir()) == ["dump.jsonl", "snapshot-added.json", "topics.tsv"]
    assert (target / "topics.tsv").read_text(encoding="utf-8") == "Alpha\tScience\n"
