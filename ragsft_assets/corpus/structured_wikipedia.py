"""Reading dumps in the wikimedia/structured-wikipedia schema, streaming, with bad-line accounting.

Records are JSON objects (``name``, ``identifier``, ``url``, ``abstract``, ``version.identifier``,
``main_entity.identifier``, ``sections[].has_parts[]`` with ``links[{url, text}]``, ``in_language``...).
A snapshot folder holds ``*.jsonl``, ``*.jsonl.gz`` (or ``.ndjson``) and/or ``*.parquet`` files; they
are read in sorted file order, line by line, never whole.

Bad lines are not exceptions: :func:`decode_line` returns a :class:`BadLine` with a reason
(``not_utf8``, ``malformed_line``) that the caller counts.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.corpus.snapshot_layout import (  # noqa: F401 - re-exported for the readers' callers
    DUMP_SUFFIXES,
    HUB_DATASET,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    XML_SUFFIXES,
    CorruptDumpError,
    dump_files,
)

try:  # msgspec skips the fields we do not need without building them: ~5x faster than a full decode
    import msgspec
except ImportError:  # pragma: no cover - the full orjson decode gives the same records, slower
    msgspec = None


NOT_UTF8 = "not_utf8"
MALFORMED_LINE = "malformed_line"


@dataclass(slots=True, frozen=True)
class BadLine:
    """A line that could not be decoded into a record."""

    reason: str
    detail: str


def is_parquet(path: Path) -> bool:
    return path.name.endswith(PARQUET_SUFFIXES)


def is_xml_dump(path: Path) -> bool:
    return path.name.endswith(XML_SUFFIXES)


def iter_xml_dump_records(path: Path, batch_size: int = 2000) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Yield ``(first_record_number, records)`` batches of a MediaWiki XML dump, as structured records.

    The language comes from the file name (``frwiki-20240901-pages-articles.xml.bz2`` -> ``fr``).
    """
    from ragsft_assets.corpus.wikitext_dump import iter_dump_records

    lang = path.name.split("wiki-", 1)[0] if "wiki-" in path.name else None
    batch: list[dict[str, Any]] = []
    first = 1
    for record in iter_dump_records(path, lang=lang):
        batch.append(record)
        if len(batch) >= batch_size:
            yield first, batch
            first += len(batch)
            batch = []
    if batch:
        yield first, batch


def open_lines(path: Path) -> Any:
    """A binary file object over a JSON-lines file, transparently gunzipped."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def iter_line_chunks(path: Path, chunk_lines: int = 2000) -> Iterator[tuple[int, list[bytes]]]:
    """Yield ``(first_line_number, lines)`` chunks of a JSON-lines file (line numbers start at 1).

    Lines keep no trailing newline; empty lines are yielded too (they are counted as malformed).
    """
    with open_lines(path) as fh:
        chunk: list[bytes] = []
        first = 1
        n = 0
        lines = enumerate(fh, start=1)
        while True:
            try:
                n, raw = next(lines)
            except StopIteration:
                break
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                # A bare EOFError says neither which file nor what to do: name both.
                raise CorruptDumpError(
                    f"{path}: compressed file is truncated or corrupt after line {n} ({exc}); "
                    "delete it and copy or export it again (e.g. `ragsft snapshots add KEY --hub`)"
                ) from exc
            chunk.append(raw.rstrip(b"\r\n"))
            if len(chunk) >= chunk_lines:
                yield first, chunk
                first = n + 1
                chunk = []
        if chunk:
            yield first, chunk


def decode_line(line: bytes) -> dict[str, Any] | BadLine:
    """Decode one JSON line into a record dict, or say why it is bad.

    Returns:
        The record, or ``BadLine("not_utf8", ...)`` when the bytes are not UTF-8, or
        ``BadLine("malformed_line", ...)`` when they are not one JSON object.
    """
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as uexc:
            return BadLine(NOT_UTF8, f"invalid UTF-8 at byte {uexc.start}")
        return BadLine(MALFORMED_LINE, str(exc)[:200])
    if not isinstance(rec, dict):
        return BadLine(MALFORMED_LINE, f"a JSON {type(rec).__name__}, not an object")
    return rec


if msgspec is not None:

    class _Head(msgspec.Struct):
        name: Any = None

    class _Identified(msgspec.Struct):
        """An object of which the abstracts stage reads only ``identifier`` (``version``, ``main_entity``).

        ``version`` alone is ~800 bytes of nested objects (editor, scores...): building it as dicts
        cost more than the rest of the record's fields together. An object of another JSON type
        fails validation, and the line goes through the full decode like any unusual line.
        """

        identifier: Any = None

    class _Record(msgspec.Struct):
        """The fields the abstracts stage reads; every other field is skipped, not decoded."""

        name: Any = None
        identifier: Any = None
        url: Any = None
        abstract: Any = None
        version: _Identified | None = None
        main_entity: _Identified | None = None
        in_language: Any = None
        sections: list[msgspec.Raw] | None = None

    def _identified(value: _Identified | None) -> dict[str, Any] | None:
        return None if value is None else {"identifier": value.identifier}

    _RECORD_DECODER = msgspec.json.Decoder(_Record)
    _HEAD_DECODER = msgspec.json.Decoder(_Head)
    _ANY_DECODER = msgspec.json.Decoder()


def decode_lead(line: bytes) -> dict[str, Any] | BadLine:
    """Decode what the abstracts stage needs of one line: the top fields and the lead section only.

    The result is the record restricted to ``name``, ``identifier``, ``url``, ``abstract``, ``version``
    and ``main_entity`` (objects reduced to their ``identifier``), ``in_language`` and ``sections`` =
    [the section named ``Abstract``, else the first]. Every later stage reading it sees the same values
    as in a full decode (the infoboxes, the other sections and the rest of ``version`` are skipped
    without being built). Falls back to :func:`decode_line` for anything unusual,
    so bad lines get the same reasons.
    """
    if msgspec is None:
        return decode_line(line)
    try:
        rec = _RECORD_DECODER.decode(line)
        sections = rec.sections
        lead = None
        if sections:
            for raw in sections:
                if _HEAD_DECODER.decode(raw).name == "Abstract":
                    lead = raw
                    break
            lead_section = _ANY_DECODER.decode(lead if lead is not None else sections[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return decode_line(line)
    out: dict[str, Any] = {
        "name": rec.name,
        "identifier": rec.identifier,
        "url": rec.url,
        "version": _identified(rec.version),
        "main_entity": _identified(rec.main_entity),
        "in_language": rec.in_language,
        "abstract": rec.abstract,
    }
    if sections is not None:
        out["sections"] = [lead_section] if sections else []
    return out


def iter_parquet_records(path: Path, batch_size: int = 2000) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Yield ``(first_row_number, records)`` batches of a Parquet dump (row numbers start at 1)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    first = 1
    for batch in pf.iter_batches(batch_size=batch_size):
        rows = batch.to_pylist()
        yield first, rows
        first += len(rows)


def load_from_hub(
    snapshot: str, lang: str, *, streaming: bool = True, cache_dir: str | None = None
) -> Iterator[dict[str, Any]]:
    """Stream the same records from the Hugging Face hub (for real users; tests never call it).

    Args:
        snapshot: the dump date, e.g. ``20240916``.
        lang: the wiki language, e.g. ``fr`` (config ``20240916.fr``).
        streaming: stream instead of downloading the whole config first.
        cache_dir: the ``datasets`` cache folder.

    Yields:
        Records as dicts in the structured-wikipedia schema.
    """
    import datasets  # heavy: imported only when the hub is actually used

    ds = datasets.load_dataset(
        HUB_DATASET, f"{snapshot}.{lang}", split="train", streaming=streaming, cache_dir=cache_dir
    )
    yield from ds


def export_hub_to_folder(snapshot: str, lang: str, folder: Path, lines_per_file: int = 100_000) -> list[Path]:
    """Write hub config ``<snapshot>.<lang>`` as gzipped JSON-lines shards into ``folder``, resumably.

    See :func:`ragsft_assets.corpus.hub_snapshot.export_hub_snapshot` (revision pin, resume by shard).
    """
    from ragsft_assets.corpus.hub_snapshot import export_hub_snapshot

    return export_hub_snapshot(f"{snapshot}.{lang}", folder, lines_per_file=lines_per_file)
