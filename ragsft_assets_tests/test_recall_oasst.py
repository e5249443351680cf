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


def test_message_rows_give_the_same_pairs() -> None:
    """Hub rows are flat messages; flattening the export and rebuilding gives the same pairs."""
    rows = []
    for tree in map(orjson.loads, TREES.read_bytes().splitlines()):
        root = dict(tree["prompt"])
        replies = root.pop("replies")
        rows.append({**root, "parent_id": None, "message_tree_id": tree["message_tree_id"]})
        rows.extend({k: v for k, v in r.items() if k != "replies"} for r in replies)
    assert pairs_from_trees(trees_from_message_rows(rows)).pairs == read_tree_export(TREES).pairs


def test_bad_line_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"prompt": {}}\nnot json\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not valid JSON"):
        read_tree_export(bad)
