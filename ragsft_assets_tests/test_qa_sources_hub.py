"""`ragsft sources add KEY --hub`: streaming through `datasets` from a local folder laid out like the
hub's `hotpot_qa` dataset (README configs, `distractor/` Parquet per split), no network."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.corpus import hub_snapshot as hs
from ragsft_assets.corpus.hub_snapshot import HUB_MANIFEST, snapshot_revision
from ragsft_assets.release.manifest import source_info
from ragsft_assets.sources.hub import export_hub_source, open_hub_split
from ragsft_assets.sources.read import PRESETS, read_source, read_source_folder
from ragsft_assets_tests.test_rag_sft_assets import DATA

KEY = "hotpotqa.en"
README = """---
configs:
- config_name: distractor
  data_files:
  - split: train
    path: distractor/train-*.parquet
  - split: validation
    path: distractor/validation-*.parquet
---
"""


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 70 real records in the hub's hotpot_qa layout: 60 train, 10 validation."""
    table = read_source(DATA, PRESETS["hotpotqa"]).table.drop_columns(["split"])
    root = tmp_path / "hotpot_qa"
    (root / "distractor").mkdir(parents=True)
    pq.write_table(table.slice(0, 60), root / "distractor" / "train-00000-of-00001.parquet")
    pq.write_table(table.slice(60), root / "distractor" / "validation-00000-of-00001.parquet")
    (root / "README.md").write_text(README, encoding="utf-8")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    return root


def test_sources_add_hub_streams_every_split(hub: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    runner = CliRunner(env={"RAGSFT_HOME": str(home), "DAGSTER_HOME": None})
    res = runner.invoke(main, ["sources", "add", KEY, "--hub", str(hub), "--lines-per-file", "25"])
    assert res.exit_code == 0, res.output
    assert "70 question(s)" in res.output and "train: 60 records in 3 shard(s)" in res.output
    folder = home / "sources" / KEY
    assert sorted(p.name for p in folder.glob("*.jsonl.gz")) == [
        "train-00000.jsonl.gz",
        "train-00001.jsonl.gz",
        "train-00002.jsonl.gz",
        "validation-00000.jsonl.gz",
    ]
    read = read_source_folder(folder)
    splits = read.table["split"].to_pylist()
    assert (splits.count("train"), splits.count("validation")) == (60, 10)
    want = read_source(DATA, PRESETS["hotpotqa"]).table.drop_columns(["split"]).sort_by("id")
    assert read.table.drop_columns(["split"]).sort_by("id").equals(want)  # the hub rows, unchanged
    origin = {
        "source": "hub",
        "dataset": str(hub),
        "config": "distractor",  # the hotpotqa preset's hub config
        "revision": None,  # a local folder has no revision to pin
        "pinned": False,
        "complete": True,
        "records": 70,
        "shards": 4,
    }
    assert snapshot_revision(folder) == origin
    assert source_info(home / "assets", home / "sources", KEY)["origin"] == origin  # what the manifest says
    listed = runner.invoke(main, ["sources", "list"]).output
    # the origin from hub.json (id, config, splits, revision) and source.json (preset, rows)
    assert (
        f"{KEY}\tfolder, partition\thub {hub} config=distractor split=train,validation revision=unpinned; "
        "preset hotpotqa; 70 rows in 4 file(s)\n"
    ) in listed, listed
    state = orjson.loads((folder / HUB_MANIFEST).read_bytes())
    (folder / HUB_MANIFEST).write_bytes(orjson.dumps({**state, "revision": "0b89ac0", "complete": False}))
    listed = runner.invoke(main, ["sources", "list"]).output
    assert "revision=0b89ac0 (export incomplete" in listed, listed
    (folder / HUB_MANIFEST).write_bytes(orjson.dumps(state))
    local = runner.invoke(main, ["sources", "add", "hotpotqa.de", "--from", str(DATA)])
    assert local.exit_code == 0, local.output
    listed = runner.invoke(main, ["sources", "list"]).output
    assert "hotpotqa.de\tfolder, partition\tlocal; preset hotpotqa; 70 rows in 1 file(s)\n" in listed, listed
    again = runner.invoke(main, ["sources", "add", KEY, "--hub", str(hub), "--lines-per-file", "25"])
    assert again.exit_code == 0 and "already exported" in again.output
    other = runner.invoke(main, ["sources", "add", KEY, "--hub", str(hub), "--lines-per-file", "30"])
    assert other.exit_code != 0 and "lines_per_file=25, not 30" in other.output
    both = runner.invoke(main, ["sources", "add", KEY, "--hub", str(hub), "--from", str(DATA)])
    assert both.exit_code != 0 and "exactly one of --from PATH, --hub ID" in both.output
    lone = runner.invoke(main, ["sources", "add", KEY, "--from", str(DATA), "--revision", "v1"])
    assert lone.exit_code != 0 and "go with --hub" in lone.output
    missing = runner.invoke(main, ["sources", "add", "hotpotqa.fr", "--hub", str(hub), "--config", "nope"])
    assert missing.exit_code != 0 and "'nope' not found" in missing.output
    assert not (home / "sources" / "hotpotqa.fr").exists()  # nothing left behind


def test_interrupted_hub_export_resumes_by_shard(
    hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, str | None]] = []

    def open_split(dataset: str, config: str | None, split: str, revision: str | None):
        opened.append((split, revision))
        return open_hub_split(dataset, config, split, None)  # the local folder has no revisions

    kw = {"dataset": str(hub), "config": "distractor", "lines_per_file": 25, "open_split": open_split}
    whole = export_hub_source(KEY, tmp_path / "whole", revision="v1", **kw)
    assert opened == [("train", "v1"), ("validation", "v1")]  # the pinned revision reaches datasets
    calls = {"n": 0}
    real_dumps = orjson.dumps

    class Interrupting:
        @staticmethod
        def dumps(obj: object) -> bytes:
            calls["n"] += 1
            if calls["n"] == 55:  # inside train's third shard
                raise KeyboardInterrupt
            return real_dumps(obj)

    monkeypatch.setattr(hs, "orjson", Interrupting)
    folder = tmp_path / "src"
    with pytest.raises(KeyboardInterrupt):
        export_hub_source(KEY, folder, revision="v1", **kw)
    assert sorted(p.name for p in folder.iterdir()) == [
        HUB_MANIFEST,
        "train-00000.jsonl.gz",
        "train-00001.jsonl.gz",
    ]
    first = (folder / "train-00000.jsonl.gz").stat().st_mtime_ns
    assert snapshot_revision(folder)["complete"] is False
    monkeypatch.setattr(hs, "orjson", orjson)
    lines: list[str] = []
    files = export_hub_source(KEY, folder, progress=lines.append, **kw)
    assert "train: resuming after 2 finished shard(s) (50 records)" in lines[0]
    assert (folder / "train-00000.jsonl.gz").stat().st_mtime_ns == first  # kept, not rewritten
    assert [f.name for f in files] == [f.name for f in whole]
    assert [gzip.decompress(f.read_bytes()) for f in files] == [
        gzip.decompress(f.read_bytes()) for f in whole
    ]
    assert snapshot_revision(folder)["revision"] == "v1" and snapshot_revision(folder)["complete"]
    with pytest.raises(ValueError, match="pinned revision 'v1', not 'v2'"):
        export_hub_source(KEY, folder, revision="v2", **kw)


def test_unpinned_hub_source_fails_unless_allowed(
    hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub whose revision cannot be read: `sources add --hub` stops (naming --allow-unpinned,
    which the command takes), and with it exports, recorded as unpinned."""
    import huggingface_hub

    from ragsft_assets.cli.sources import install_hub_source
    from ragsft_assets.corpus.hub_snapshot import UnpinnedSourceError
    from ragsft_assets.sources.hub import hub_split_names, open_hub_split

    class DownApi:
        def dataset_info(self, dataset: str):  # noqa: ANN201
            raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "HfApi", DownApi)
    seams = {
        "open_split": lambda _d, config, split, rev, **kw: open_hub_split(str(hub), config, split, rev, **kw),
        "list_splits": lambda _d, config, rev, **kw: hub_split_names(str(hub), config, rev, **kw),
    }
    home = tmp_path / "home"
    with pytest.raises(UnpinnedSourceError, match="--allow-unpinned"):
        install_hub_source(KEY, "down/hotpot_qa", preset="hotpotqa", mapping_file=None, home=home, **seams)
    folder, rows = install_hub_source(
        KEY, "down/hotpot_qa", preset="hotpotqa", mapping_file=None, home=home, allow_unpinned=True, **seams
    )
    assert rows == 70
    assert orjson.loads((folder / "hub.json").read_bytes())["revision"] is None
    helped = CliRunner().invoke(main, ["sources", "add", "--help"])
    assert "--allow-unpinned" in helped.output
