"""The records of an outside question set's data files, one format rule for every reader.

Dagster-free and below both readers (``read``: a preset or a mapping; ``trust_align``: the
Trust-Align layout), which read their files through :func:`read_records`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUFFIXES = (".json", ".jsonl", ".jsonl.gz", ".parquet")  # .jsonl.gz: the shards of a hub export


class SourceError(ValueError):
    """A source file that cannot be read: the message names the file, the record and the field."""


def file_format(path: Path) -> str:
    """The format suffix of a data file (``.jsonl.gz`` counts as one), or its last suffix."""
    return ".jsonl.gz" if path.name.endswith(".jsonl.gz") else path.suffix


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) pairs of one file; ``where`` is 'line N' or 'record N' (1-based)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"row {i}", row
        return
    if file_format(path) == ".jsonl.gz":
        import gzip

        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    head = text.lstrip()[:1]
    if path.suffix == ".json" and head == "[":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
        for i, row in enumerate(rows, 1):
            yield f"record {i}", row
        return
    for n, line in enumerate(text.splitlines(), 1):  # JSON lines (also a .json holding JSON lines)
        if not line.strip():
            continue
        try:
            yield f"line {n}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}, line {n}: invalid JSON: {exc.msg}") from exc
