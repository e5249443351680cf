"""The records of an outside question set's data files, one format rule for every reader.

Dagster-free and below both readers (``read``: a preset or a mapping; ``trust_align``: the
Trust-Align layout), which read their files through :func:`read_records`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

SUFFIXES = (".json", ".jsonl", ".jsonl.gz", ".parquet")  # .jsonl.gz: the shards of a hub export


class SourceError(ValueError):
    """A source file that cannot be read: the message names the file, the record and the field."""


def file_format(path: Path) -> str:
    """The format suffix of a data file (``.jsonl.gz`` counts as one), or its last suffix."""
    return ".jsonl.gz" if path.name.endswith(".jsonl.gz") else path.suffix


# ours: Parquet rows are read this many at a time (a row group can be the whole file).
PARQUET_BATCH_ROWS = 1024


def _not_utf8(path: Path, where: str, exc: UnicodeDecodeError) -> SourceError:
    return SourceError(
        f"{path}, {where}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1}): "
        "convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`) and add it again"
    )


def _open_binary(path: Path) -> IO[bytes]:
    if file_format(path) == ".jsonl.gz":
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - closed by the caller's `with`


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) pairs of one file; ``where`` is 'line N', 'record N' or 'row N' (1-based).

    JSON lines (also gzipped) and Parquet are streamed, a line or a batch of rows at a time, so
    memory stays flat whatever the file's size; a ``.json`` file holding one JSON array is parsed
    whole. Text must be UTF-8: anything else, or a damaged gzip stream, fails naming the file.
    """
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        i = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                i += 1
                yield f"row {i}", row
        return
    try:
        with _open_binary(path) as fh:
            head = fh.read(4096).lstrip()[:1]  # the first non-blank byte says array or lines
            fh.seek(0)
            if path.suffix == ".json" and head == b"[":
                data = fh.read()
                try:
                    rows = json.loads(data.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    line = data.count(b"\n", 0, exc.start) + 1
                    raise _not_utf8(path, f"line {line}", exc) from exc
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
                del data
                for i, row in enumerate(rows, 1):
                    yield f"record {i}", row
                return
            for n, raw in enumerate(fh, 1):  # JSON lines (also a .json holding JSON lines)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _not_utf8(path, f"line {n}", exc) from exc
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{path}, line {n}: invalid JSON: {exc.msg}") from exc
                yield f"line {n}", record
    except (EOFError, OSError) as exc:  # a truncated or damaged gzip stream (gzip.BadGzipFile is OSError)
        raise SourceError(
            f"{path}: cannot be read to its end ({type(exc).__name__}: {exc}): fetch it again"
        ) from exc
