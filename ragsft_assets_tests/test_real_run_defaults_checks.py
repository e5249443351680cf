"""Empty data is no pass (issue 34): a corpus stage that had input and produced no row fails its
blocking check, or warns where snapshot.json allows empty output, and the check says which."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import orjson
import pytest

from ragsft_assets.cli.snapshots import install_snapshot
from ragsft_assets.defs.multihop.checks import empty_output
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.corpus_fixtures import make_record, write_jsonl
from ragsft_assets_tests.test_corpus_assets import ASSETS


def test_empty_output_says_which() -> None:
    assert empty_output("s", 0, 0, False) == ""  # no input: nothing to say
    assert empty_output("s", 5, 1, False) == ""  # some output
    assert "not allowed" in empty_output("s", 5, 0, False, "records")
    assert empty_output("s", 5, 0, True, "records").endswith("allowed by allow_empty_output (a warning)")


def _short_records_home(tmp_path: Path, settings: dict | None) -> Path:
    home = tmp_path / "home"
    folder = write_jsonl(
        tmp_path / "src" / "dump.jsonl",
        [make_record(f"Ville{i}", "Trop court.", identifier=i + 1) for i in range(4)],  # all too short
    ).parent
    if settings is not None:
        (folder / "snapshot.json").write_bytes(orjson.dumps(settings))
    install_snapshot("short.fr", folder, home)
    return home


@pytest.mark.parametrize(("settings", "severity"), [(None, "ERROR"), ({"allow_empty_output": True}, "WARN")])
def test_abstracts_from_records_that_all_drop_do_not_pass(
    tmp_path: Path, settings: dict | None, severity: str
) -> None:
    home = _short_records_home(tmp_path, settings)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", ["short.fr"])
    result = dg.materialize(
        [ASSETS[0]],
        resources={"store": ArtifactStore(home=str(home)), "snapshots": SnapshotSource(home=str(home))},
        partition_key="short.fr",
        instance=instance,
        run_config={"ops": {"abstracts": {"config": {"workers": 1, "max_bad_share": 1.0}}}},
        raise_on_error=False,
        selection=[ASSETS[0].key],
    )
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    ids = checks["ids_unique_and_derived"]
    assert not ids.passed and ids.severity.value == severity
    assert ids.description.startswith("abstracts produced no row from 4 dump records")
    assert ids.metadata["allow_empty_output"].value is (severity == "WARN")
    assert result.success is (severity == "WARN")  # ERROR blocks the run; WARN lets it go on
