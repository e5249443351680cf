"""OASST1 reader: the 100 shared trees give 94 rows (5 only synthetic top replies, 1 without ranks)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ragsft_assets.recall.oasst import (
    SKIP_NO_RANKS,
    SKIP_ONLY_SYNTHETIC,
    pairs_from_trees,
    read_tree_export,
    trees_from_message_rows,
)

TREES = Path(__file__).parent / "data" / "oasst1" / "oasst_en_100_trees.jsonl"


def test_shared_trees_give_94_rows() -> None:
    res = read_tree_export(TREES)
    assert res.trees == 100 and len(res.pairs) == 94
    assert dict(res.skipped) == {SKIP_ONLY_SYNTHETIC: 5, SKIP_NO_RANKS: 1}
    assert [p.id for p in res.pairs[:2]] == ["oasst1-0000", "oasst1-0001"] and res.pairs[
        -1
    ].id == "oasst1-0093"
    assert len({p.source_id for p in res.pairs}) == 94 and all(len(p.source_id) == 24 for p in res.pairs)
    # the kept reply is rank 0, human, not deleted: check against the raw trees
    raw = {t["message_tree_id"]: t for t in map(orjson.loads, TREES.read_bytes().splitlines())}
    for p in res.pairs:
        reply = next(
            r for r in raw[p.message_tree_id]["prompt"]["replies"] if r["message_id"] == p.reply_message_id
        )
        assert reply["rank"] == 0 and not reply["synthetic"] and not reply["deleted"]
    assert read_tree_export(TREES).pairs == res.pairs  # same export, same ids


def _message_rows() -> list[dict]:
    """The export flattened into the hub's message rows (first turn and its replies)."""
    rows = []
    for tree in map(orjson.loads, TREES.read_bytes().splitlines()):
        root = dict(tree["prompt"])
        replies = root.pop("replies")
        rows.append({**root, "parent_id": None, "message_tree_id": tree["message_tree_id"]})
        rows.extend(
            {**{k: v for k, v in r.items() if k != "replies"}, "message_tree_id": tree["message_tree_id"]}
            for r in replies
        )
    return rows


def test_message_rows_give_the_same_pairs() -> None:
    """Hub rows are flat messages; flattening the export and rebuilding gives the same pairs."""
    rows = _message_rows()
    assert pairs_from_trees(trees_from_message_rows(rows)).pairs == read_tree_export(TREES).pairs


def test_hub_input_through_datasets_on_a_local_hub_layout(tmp_path: Path, monkeypatch) -> None:
    """`hub: true` reads OpenAssistant/oasst1's message rows through `datasets` (here a local folder
    laid out like the hub dataset, no network) and gives the export's pairs and skips."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragsft_assets.defs.recall.assets import RecallConfig, read_pairs
    from ragsft_assets.recall import oasst

    hub = tmp_path / "oasst1"
    (hub / "data").mkdir(parents=True)
    rows = _message_rows()
    columns = sorted({k for r in rows for k in r})  # as the hub: every column, null where unset (rank)
    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows])
    pq.write_table(table, hub / "data" / "train-00000-of-00001.parquet")
    monkeypatch.setattr(oasst, "HUB_DATASET", str(hub))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    read = read_pairs(RecallConfig(hub=True))
    local = read_tree_export(TREES)
    assert read.pairs == local.pairs and len(read.pairs) == 94
    assert read.skipped == local.skipped and read.trees == 100


def test_bad_line_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"prompt": {}}\nnot json\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not valid JSON"):
        read_tree_export(bad)
