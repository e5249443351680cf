"""Recall Rewrite's data files as the card ships them: "Files are plain JSONL (gzip-compressed where
large), so jq or pandas.read_json(lines=True) work as well."

One JSON object a line, the config's fields in the card's order; a file larger than
:data:`GZIP_OVER_BYTES` is written gzip-compressed (``.jsonl.gz``), with no name and no time in the
gzip header, so the same rows give the same bytes. ``datasets.load_dataset(folder, CONFIG)`` reads
both through the README's ``configs:`` header (its JSON builder decompresses ``.gz`` itself).
The manifest entries and the seeded review sample are computed here from the rows, since the
shared manifest code reads Parquet footers. Dagster-free.
"""

from __future__ import annotations

import gzip
import hashlib
import heapq
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.release.layout import PROVENANCE
from ragsft_assets.release.manifest import REVIEW_SAMPLE, REVIEW_SAMPLE_SIZE, sha256_file
from ragsft_assets.storage import atomic_write_bytes

# ours: the card says "where large" without a size; 8 MiB of JSON lines (a -full config of a few
# hundred examples, with every probe and answer) is where jq and an editor start to be slow, and
# every -sft config of the card's 3,467 rows (about 5 MB) stays plain text.
GZIP_OVER_BYTES = 8 << 20


def jsonl_bytes(table: pa.Table) -> bytes:
    """The table's rows as JSON lines (keys in the schema's order, UTF-8, a newline after each)."""
    return b"".join(orjson.dumps(row) + b"\n" for row in table.to_pylist())


def data_file(config: str, split: str, compressed: bool) -> str:
    """Relative path of a config's split file: ``<config>/<split>.jsonl`` or ``.jsonl.gz``."""
    return f"{config}/{split}.jsonl" + (".gz" if compressed else "")


def write_jsonl_files(
    folder: Path, tables: Mapping[str, Mapping[str, pa.Table]], gzip_over: int = GZIP_OVER_BYTES
) -> dict[str, dict[str, str]]:
    """Write every config's split files under ``folder``; returns ``{config: {split: rel path}}``.

    A file whose JSON lines exceed ``gzip_over`` bytes is gzip-compressed (level 9, ``mtime=0``).
    """
    files: dict[str, dict[str, str]] = {}
    for config, splits in tables.items():
        files[config] = {}
        for split, table in splits.items():
            data = jsonl_bytes(table)
            compressed = len(data) > gzip_over
            rel = data_file(config, split, compressed)
            if compressed:
                data = gzip.compress(data, compresslevel=9, mtime=0)
            atomic_write_bytes(folder / rel, data)
            files[config][split] = rel
    return files


def file_entries(
    folder: Path, data_files: Mapping[str, str], rows: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """The manifest's ``files`` entries of a config (``sha256``, ``bytes``, ``rows``, ``split``)."""
    return {
        rel: {
            "sha256": sha256_file(folder / rel),
            "bytes": (folder / rel).stat().st_size,
            "rows": rows[split],
            "split": split,
        }
        for split, rel in data_files.items()
    }


def write_review_sample(
    folder: Path, config: str, tables: Mapping[str, pa.Table], seed: int, size: int = REVIEW_SAMPLE_SIZE
) -> str:
    """``provenance/<config>/review_sample.jsonl``: the rule of ``manifest.review_sample_rows`` (the
    ``size`` rows whose ``sha256(seed, config, split, id)`` is lowest, in that order, each with its
    ``split``), drawn from the rows in memory (a Recall config is a few thousand rows)."""
    ranked = (
        (hashlib.sha256(f"{seed}\x1f{config}\x1f{split}\x1f{rid}".encode()).digest(), split, i)
        for split, table in sorted(tables.items())
        for i, rid in enumerate(table["id"].to_pylist())
    )
    rows = {split: table.to_pylist() for split, table in tables.items()}
    lines = [
        orjson.dumps(
            {"split": split, "row": rows[split][i]}, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
        )
        for _, split, i in heapq.nsmallest(size, ranked)
    ]
    rel = f"{PROVENANCE}/{config}/{REVIEW_SAMPLE}"
    atomic_write_bytes(folder / rel, b"".join(line + b"\n" for line in lines))
    return rel
