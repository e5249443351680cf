"""Every asset check's result carries the partition it checked and a count that plots over runs, and
the release's run log says what it left out in one line, not one per empty split (issue 40).

Dagster's own ``partition`` field of an evaluation is set only for a partitioned check (its preview
feature, which the project does not use), so the UI's Partition column of a check shows "—"; the
partition goes in each result's metadata instead (``defs.check_results``).
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest

import ragsft_assets
from ragsft_assets.cli.console import check_partition
from ragsft_assets.cli.snapshots import install_snapshot
from ragsft_assets.defs.check_results import check_result, verify_failures
from ragsft_assets.defs.corpus import abstracts, bridge_pairs, link_graph
from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
from ragsft_assets.release.notes_log import notes_line
from ragsft_assets.release.verify import VerifyReport
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.corpus_fixtures import interlinked_records, write_jsonl
from ragsft_assets_tests.release_fixtures import PARTITION, write_world


def test_every_check_result_is_built_by_check_result() -> None:
    """One way to build a result, so none lacks its partition: no other ``AssetCheckResult(``."""
    root = Path(ragsft_assets.__file__).parent
    sites = [
        f"{p.relative_to(root)}:{n}"
        for p in sorted(root.rglob("*.py"))
        if p.name != "check_results.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bAssetCheckResult\(", line)
    ]
    assert not sites, f"build these results with defs.check_results.check_result: {sites}"


def test_check_result_leads_with_partition_and_failures() -> None:
    r = check_result(passed=False, failures=2, partition="p.fr", metadata={"examples": "a, b"})
    assert list(r.metadata) == ["partition", "failures", "examples"]
    assert r.metadata["partition"] == dg.MetadataValue.text("p.fr")
    assert r.metadata["failures"] == dg.MetadataValue.int(2)
    # outside a step, with no partition given, there is none to say (a unit test of a check's logic)
    assert "partition" not in check_result(passed=True, failures=0).metadata
    # a metadata "failures" that says the same is kept once; one that disagrees is an error
    assert check_result(passed=True, failures=0, metadata={"failures": 0}).metadata["failures"].value == 0
    with pytest.raises(ValueError, match="failures"):
        check_result(passed=True, failures=0, metadata={"failures": 3})
    with pytest.raises(TypeError, match="count"):
        check_result(passed=True, failures=True)


def test_verify_failures_count_the_reports_problems() -> None:
    assert verify_failures(VerifyReport(checked=3, digest="d", expected_digest="d")) == 0
    bad = VerifyReport(mismatched=["a"], missing=["b", "c"], errors=["e"], digest="x", expected_digest="d")
    assert verify_failures(bad) == 5 and not bad.ok


def _evaluations(result: dg.ExecuteInProcessResult) -> list:
    evs = result.get_asset_check_evaluations()
    assert evs, "no check was evaluated"
    return evs


def test_every_check_evaluation_carries_its_partition(tmp_path: Path) -> None:
    """The corpus's checks (partition given) and the release's (the running step's partition)."""
    key = "ring.fr"
    folder = write_jsonl(tmp_path / "src" / "dump.jsonl", interlinked_records(30)).parent
    (folder / "snapshot.json").write_text('{"split_shares": [0.8, 0.1, 0.1]}')
    install_snapshot(key, folder, tmp_path)
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [key, PARTITION])
    resources = {"store": store, "snapshots": SnapshotSource(home=str(tmp_path))}
    corpus = dg.materialize(
        [abstracts, link_graph, bridge_pairs],
        resources=resources,
        partition_key=key,
        instance=instance,
        run_config={"ops": {"abstracts": {"config": {"workers": 1}}}},
    )
    rel = dg.materialize(
        [release, dataset_card, release_manifest],
        resources=resources,
        partition_key=PARTITION,
        instance=instance,
    )
    for result, partition, n in ((corpus, key, 4), (rel, PARTITION, 1)):
        evs = _evaluations(result)
        assert len(evs) == n
        for ev in evs:
            md = {k: v.value for k, v in ev.metadata.items()}
            assert md["partition"] == partition, (ev.check_name, md)
            assert isinstance(md["failures"], int) and (md["failures"] == 0) == ev.passed, (ev.check_name, md)
            assert check_partition(ev) == partition  # what the console prints for a failed check
            # Dagster links the result to the materialization of that partition
            filt = dg.AssetRecordsFilter(asset_key=ev.asset_key, asset_partitions=[partition])
            mat = instance.fetch_materializations(filt, limit=1).records[0]
            assert ev.target_materialization_data.storage_id == mat.storage_id


def _run_log(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.dagster_event is None]


def test_release_run_log_says_what_was_left_out_in_one_line(tmp_path: Path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    for asset in ("multihop_questions", "rag_sft"):  # no question survived: every split empty
        table = store.read(PARTITION, asset)
        store.write_splits(table.slice(0, 0), PARTITION, asset)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    result = dg.materialize([release], resources={"store": store}, partition_key=PARTITION, instance=instance)
    notes = result.asset_materializations_for_node("release")[0].metadata["notes"].value
    assert notes.count("is empty and left out") == 6  # the metadata keeps every note
    said = [m for m in _run_log(instance, result.run_id) if "left out" in m or "skipped" in m]
    assert len(said) == 1, said
    assert "`default` (multihop_questions)" in said[0] and "`hotpotqa_fr_abstracts_v2` (rag_sft)" in said[0]


def test_notes_line_condenses_the_empty_splits() -> None:
    notes = [
        f"config {c!r}: split {s!r} is empty and left out"
        for c in ("default", "rag_sft")
        for s in ("train", "validation", "test")
    ]
    notes += [
        "config 'default' skipped: asset 'multihop_questions' has no rows",
        "config 'rag_sft' skipped: asset 'rag_sft' has no rows",
        "config 'corpus': split 'test' is empty and left out",
    ]
    assert notes_line(notes) == (
        "left out of the release (9 notes): configs skipped, their asset has no rows: "
        "`default` (multihop_questions), `rag_sft` (rag_sft); config `corpus`: empty split(s) left out: test"
    )
    assert notes_line([]) is None
