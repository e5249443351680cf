"""storage.split_parts / write_split_asset: one file per split, slices where the table is grouped."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ragsft_assets import storage


def _filtered(table: pa.Table) -> list[pa.Table]:
    """The reference: one filter per split."""
    return [table.filter(pc.equal(table["split"], s)) for s in storage.SPLITS]


@pytest.mark.parametrize(
    "splits",
    [
        ["train", "train", "validation", "test", "test"],  # grouped: slices
        ["train", "test"],  # grouped, a split missing
        ["test", "train", "validation", "train"],  # not grouped: filters
        ["train", None, "test"],  # a null split is in no file
        ["train", "other", "test"],  # nor an unknown one
        [],
    ],
)
def test_split_parts_equal_one_filter_per_split(splits: list[str | None]) -> None:
    table = pa.table({"split": pa.array(splits, pa.string()), "n": list(range(len(splits)))})
    parts = storage.split_parts(table)
    assert [p.to_pylist() for p in parts] == [p.to_pylist() for p in _filtered(table)]


def test_a_grouped_table_is_sliced_not_copied(tmp_path: Path) -> None:
    table = pa.table({"split": ["train"] * 3 + ["validation"] + ["test"] * 2, "text": list("abcdef")})
    parts = storage.split_parts(table)
    base = table.column("text").chunk(0).buffers()[2].address
    assert all(p.column("text").chunk(0).buffers()[2].address == base for p in parts if p.num_rows)
    paths = storage.write_split_asset(table, "p.fr", "a", root=tmp_path)
    assert [pq.read_table(paths[s]).column("text").to_pylist() for s in storage.SPLITS] == [
        ["a", "b", "c"],
        ["d"],
        ["e", "f"],
    ]
