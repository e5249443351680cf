"""The hub path through ``datasets`` on a local folder laid out like wikimedia/structured-wikipedia.

No network: ``RAGSFT_HUB_DATASET`` points the hub loader at a folder with the hub's README configs
(``20240916.fr/*.jsonl``) built from the verbatim test records.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.corpus import hub_snapshot as hs
from ragsft_assets.corpus.hub_snapshot import HUB_MANIFEST, export_hub_snapshot, snapshot_revision

DATA = Path(__file__).parent / "data" / "frwiki_structured" / "frwiki_namespace_0_sample.jsonl"
KEY = "20240916.fr"
README = f"""---
configs:
- config_name: {KEY}
  data_files:
  - split: train
    path: {KEY}/*.jsonl
---
"""


def make_hub_folder(root: Path) -> Path:
    """A dataset folder laid out like the hub dataset: README configs and one folder per config."""
    (root / KEY).mkdir(parents=True)
    shutil.copy(DATA, root / KEY / DATA.name)
    (root / "README.md").write_text(README, encoding="utf-8")
    return root


@pytest.fixture()
def hub_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = make_hub_folder(tmp_path / "hub")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setenv(hs.HUB_DATASET_ENV, str(folder))
    return folder


def _names(folder: Path) -> list[str]:
    out = []
    for f in sorted(folder.glob("*.jsonl.gz")):
        out += [orjson.loads(line)["name"] for line in gzip.decompress(f.read_bytes()).splitlines()]
    return out


def test_export_writes_shards_and_hub_json(hub_folder: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    files = export_hub_snapshot(KEY, tmp_path / "snap", lines_per_file=3, progress=lines.append)
    assert [f.name for f in files] == [
        "frwiki_namespace_0_00000.jsonl.gz",
        "frwiki_namespace_0_00001.jsonl.gz",
    ]
    want = [json.loads(line)["name"] for line in DATA.read_text(encoding="utf-8").splitlines()]
    assert _names(tmp_path / "snap") == want
    info = snapshot_revision(tmp_path / "snap")
    assert info == {
        "source": "hub",
        "dataset": str(hub_folder),
        "config": KEY,
        "revision": None,  # a local folder has no revision to pin
        "pinned": False,
        "complete": True,
        "records": 4,
        "shards": 2,
    }
    assert any("shard frwiki_namespace_0_00001.jsonl.gz written" in line for line in lines)
    assert "export complete" in lines[-1]
    assert snapshot_revision(tmp_path) == {"source": "local"}
    # the release manifest records the origin of the snapshot's files
    from ragsft_assets.release.manifest import source_info

    (tmp_path / "snaps").mkdir()
    (tmp_path / "snap").rename(tmp_path / "snaps" / KEY)
    assert source_info(tmp_path / "assets", tmp_path / "snaps", KEY)["origin"] == info


def test_interrupted_export_resumes_by_shard(
    hub_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = export_hub_snapshot(KEY, tmp_path / "whole", lines_per_file=2)
    calls = {"n": 0}
    real_dumps = orjson.dumps

    class Interrupting:
        @staticmethod
        def dumps(obj: object) -> bytes:
            calls["n"] += 1
            if calls["n"] == 3:  # first record of the second shard
                raise KeyboardInterrupt
            return real_dumps(obj)

    monkeypatch.setattr(hs, "orjson", Interrupting)
    snap = tmp_path / "snap"
    with pytest.raises(KeyboardInterrupt):
        export_hub_snapshot(KEY, snap, lines_per_file=2)
    assert sorted(p.name for p in snap.iterdir()) == ["frwiki_namespace_0_00000.jsonl.gz", HUB_MANIFEST]
    first = (snap / "frwiki_namespace_0_00000.jsonl.gz").stat()
    assert snapshot_revision(snap)["complete"] is False

    monkeypatch.setattr(hs, "orjson", orjson)
    lines: list[str] = []
    files = export_hub_snapshot(KEY, snap, lines_per_file=2, progress=lines.append)
    assert "resuming after 1 finished shard(s) (2 records)" in lines[0]
    # the finished shard was kept, not rewritten; the rest continues after it, byte for byte
    assert (snap / "frwiki_namespace_0_00000.jsonl.gz").stat().st_mtime_ns == first.st_mtime_ns
    assert [f.read_bytes() for f in files] == [f.read_bytes() for f in whole]
    # no clock time in the gzip headers (bytes 4-8 are MTIME): the bytes do not depend on when it ran
    assert all(f.read_bytes()[4:8] == bytes(4) for f in files)
    assert snapshot_revision(snap)["complete"] is True
    with pytest.raises(ValueError, match="lines_per_file=2, not 3"):
        export_hub_snapshot(KEY, snap, lines_per_file=3)


def test_cli_hub_checks_the_key_then_exports(hub_folder: Path, tmp_path: Path, monkeypatch) -> None:
    from ragsft_assets.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    runner = CliRunner()
    bad = runner.invoke(main, ["snapshots", "add", "foo", "--hub"])
    assert bad.exit_code == 2 and "invalid snapshot key 'foo'" in bad.output
    bad = runner.invoke(main, ["snapshots", "add", "sample.fr", "--hub"])
    assert bad.exit_code == 2 and "<YYYYMMDD>.<lang>" in bad.output
    assert not (home / "snapshots").exists()
    ok = runner.invoke(main, ["snapshots", "add", KEY, "--hub"])
    assert ok.exit_code == 0, ok.output
    assert "export complete, 1 shard(s), 4 records" in ok.output
    assert f"partition {KEY} added" in ok.output
    assert (home / "snapshots" / KEY / "frwiki_namespace_0_00000.jsonl.gz").is_file()


def test_sensor_run_with_hub_source_materializes_snapshot_files_then_abstracts(
    hub_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    from ragsft_assets.defs.automation.sensors import build_new_snapshot_sensor
    from ragsft_assets.defs.corpus.assets import abstracts, snapshot_files
    from ragsft_assets.defs.jobs import full_job
    from ragsft_assets.resources.snapshots import SnapshotSource
    from ragsft_assets.resources.store import ArtifactStore

    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    monkeypatch.setenv("RAGSFT_SNAPSHOT_SOURCE", "hub")
    monkeypatch.setenv("RAGSFT_HUB_LANGUAGES", "fr")
    (tmp_path / "dh").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dh"))
    sensor = build_new_snapshot_sensor()  # the real listing: local folders plus the hub's configs
    resources = {"store": ArtifactStore(home=str(home)), "snapshots": SnapshotSource(home=str(home))}
    defs = dg.Definitions(
        assets=[snapshot_files, abstracts], jobs=[full_job], sensors=[sensor], resources=resources
    )
    tick = sensor.evaluate_tick(
        dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=None, definitions=defs)
    )
    assert [r.partition_key for r in tick.run_requests] == [KEY]  # nothing local yet: the hub offers it
    for request in tick.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))

    result = dg.materialize(
        [snapshot_files, abstracts],
        partition_key=KEY,
        instance=instance,
        resources=resources,
        run_config={"ops": {"abstracts": {"config": {"workers": 1, "min_chars": 100}}}},
        tags={"ragsft/trigger": sensor.name},
    )
    assert result.success
    order = [e.asset_key.to_user_string() for e in result.get_asset_materialization_events()]
    assert order == ["snapshot_files", "abstracts"]
    md = result.asset_materializations_for_node("snapshot_files")[0].metadata
    assert md["source"].value == "hub" and md["file_count"].value == 1 and md["revision"].value == "unpinned"
    assert md["file_list"].value[0]["sha256"] and md["total_bytes"].value > 0
    assert result.asset_materializations_for_node("abstracts")[0].metadata["dagster/row_count"].value == 3
    assert (home / "snapshots" / KEY / HUB_MANIFEST).is_file()


def test_resolve_revision_pins_the_default_branch_commit(tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub

    from ragsft_assets.corpus.hub_snapshot import resolve_revision

    asked: list[str] = []

    class FakeApi:
        def dataset_info(self, dataset: str):
            asked.append(dataset)
            if dataset == "down/dataset":
                raise OSError("no network")
            return type("Info", (), {"sha": "a" * 40})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert resolve_revision("wikimedia/structured-wikipedia", None) == "a" * 40
    assert resolve_revision("wikimedia/structured-wikipedia", "b" * 40) == "b" * 40  # given: no lookup
    assert resolve_revision(str(tmp_path), None) is None  # a local folder has no revision
    # unreachable: an error naming the way out, unless unpinned is allowed (then said in hub.json)
    with pytest.raises(hs.UnpinnedSourceError, match="--allow-unpinned") as err:
        resolve_revision("down/dataset", None)
    assert "no network" in str(err.value) and "--revision" in str(err.value)
    assert resolve_revision("down/dataset", None, allow_unpinned=True) is None
    assert asked == ["wikimedia/structured-wikipedia", "down/dataset", "down/dataset"]


def _unreachable_hub(monkeypatch: pytest.MonkeyPatch, hub_folder: Path) -> str:
    """A hub dataset id whose revision cannot be read, streamed from the local hub folder."""
    import huggingface_hub

    class DownApi:
        def dataset_info(self, dataset: str):
            raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "HfApi", DownApi)
    real_open = hs.open_hub_config
    monkeypatch.setattr(
        hs, "open_hub_config", lambda _d, config, rev: real_open(str(hub_folder), config, rev)
    )
    monkeypatch.setenv(hs.HUB_DATASET_ENV, "down/structured-wikipedia")
    return "down/structured-wikipedia"


def test_unpinned_export_fails_unless_allowed_and_is_recorded_everywhere(
    hub_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragsft_assets.cli import main
    from ragsft_assets.release.manifest import source_info

    dataset = _unreachable_hub(monkeypatch, hub_folder)
    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    runner = CliRunner()
    bad = runner.invoke(main, ["snapshots", "add", KEY, "--hub"])
    assert (
        bad.exit_code == 1 and "could not pin a revision" in bad.output and "--allow-unpinned" in bad.output
    )
    assert not list((home / "snapshots" / KEY).glob("*.jsonl.gz"))
    ok = runner.invoke(main, ["snapshots", "add", KEY, "--hub", "--allow-unpinned"])
    assert ok.exit_code == 0, ok.output
    assert "UNPINNED" in ok.output
    origin = snapshot_revision(home / "snapshots" / KEY)
    assert origin["dataset"] == dataset and origin["revision"] is None and origin["pinned"] is False
    # every manifest records the snapshot's origin: unpinned says so
    assert source_info(home / "assets", home / "snapshots", KEY)["origin"]["pinned"] is False


def test_resume_with_another_revision_is_an_error_naming_both(
    hub_folder: Path, tmp_path: Path, monkeypatch
) -> None:
    calls = {"n": 0}
    real_dumps = orjson.dumps

    class Interrupting:
        @staticmethod
        def dumps(obj: object) -> bytes:
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
            return real_dumps(obj)

    seen: list[str | None] = []
    real_open = hs.open_hub_config

    def opening(dataset: str, config: str, revision: str | None):  # noqa: ANN202 - open_hub_config's
        seen.append(revision)
        return real_open(dataset, config, None)  # the local folder has no revisions to stream

    monkeypatch.setattr(hs, "orjson", Interrupting)
    snap = tmp_path / "snap"
    with pytest.raises(KeyboardInterrupt):
        export_hub_snapshot(KEY, snap, lines_per_file=2, revision="a" * 40, open_config=opening)
    monkeypatch.setattr(hs, "orjson", orjson)
    with pytest.raises(ValueError, match=f"pinned revision '{'a' * 40}', not --revision '{'b' * 40}'"):
        export_hub_snapshot(KEY, snap, lines_per_file=2, revision="b" * 40, open_config=opening)
    export_hub_snapshot(KEY, snap, lines_per_file=2, revision="a" * 40, open_config=opening)  # same: resumes
    assert seen == ["a" * 40, "a" * 40] and snapshot_revision(snap)["complete"] is True
    # a first run that was unpinned: a --revision on resume would mix revisions across shards
    calls["n"] = 0
    monkeypatch.setattr(hs, "orjson", Interrupting)
    loose = tmp_path / "loose"
    with pytest.raises(KeyboardInterrupt):
        export_hub_snapshot(KEY, loose, lines_per_file=2, open_config=opening)  # local folder: unpinned
    monkeypatch.setattr(hs, "orjson", orjson)
    with pytest.raises(ValueError, match=f"no revision \\(unpinned\\), not --revision '{'c' * 40}'"):
        export_hub_snapshot(KEY, loose, lines_per_file=2, revision="c" * 40, open_config=opening)
