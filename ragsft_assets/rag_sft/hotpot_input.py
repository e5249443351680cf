"""Reading HotpotQA-format input in either layout into plain records.

Accepts the Hugging Face ``hotpot_qa`` layout (Arrow: ``supporting_facts`` = {title, sent_id},
``context`` = {title, sentences}) and the original layout (``_id``, ``[[title, sent_id]]``,
``[[title, [sentences]]]``). Kept private to this family: the multihop family owns the
conversions of its own tables (``ragsft_assets/multihop/hotpot_format.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class HotpotRecord:
    """One question with its context paragraphs, layout-independent."""

    id: str
    question: str
    answer: str
    type: str
    level: str
    supporting_titles: tuple[str, ...]  # distinct, in order of first mention
    supporting_facts: tuple[tuple[str, int], ...]
    context: tuple[tuple[str, tuple[str, ...]], ...]  # (title, sentences)
    split: str


def _distinct(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def record_from_original(row: Mapping[str, Any], split: str = "train") -> HotpotRecord:
    """A record from one original-layout dict; raises ValueError/TypeError/KeyError on a bad shape."""
    facts = tuple((str(t), int(s)) for t, s in row["supporting_facts"])
    context = tuple((str(t), tuple(str(s) for s in sents)) for t, sents in row["context"])
    return HotpotRecord(
        id=str(row.get("_id", row.get("id"))),
        question=str(row["question"]),
        answer=str(row["answer"]),
        type=str(row.get("type", "")),
        level=str(row.get("level", "")),
        supporting_titles=_distinct(t for t, _ in facts),
        supporting_facts=facts,
        context=context,
        split=str(row.get("split", split)),
    )


def record_from_hf(row: Mapping[str, Any], split: str = "train") -> HotpotRecord:
    """A record from one Hugging Face-layout row (as ``Table.to_pylist`` gives it)."""
    sf = row["supporting_facts"]
    ctx = row["context"]
    facts = tuple((str(t), int(s)) for t, s in zip(sf["title"], sf["sent_id"], strict=True))
    context = tuple(
        (str(t), tuple(str(s) for s in sents))
        for t, sents in zip(ctx["title"], ctx["sentences"], strict=True)
    )
    return HotpotRecord(
        id=str(row["id"]),
        question=str(row["question"]),
        answer=str(row["answer"]),
        type=str(row.get("type") or ""),
        level=str(row.get("level") or ""),
        supporting_titles=_distinct(t for t, _ in facts),
        supporting_facts=facts,
        context=context,
        split=str(row.get("split") or split),
    )


def read_records(
    rows: Iterable[Mapping[str, Any]], split: str = "train"
) -> tuple[list[HotpotRecord], list[tuple[str, str]]]:
    """Records from rows of either layout; bad rows are returned as ``(row id, error)``, not raised."""
    records, bad = [], []
    for i, row in enumerate(rows):
        rid = str(row.get("_id", row.get("id", f"#{i}"))) if isinstance(row, Mapping) else f"#{i}"
        try:
            if not isinstance(row, Mapping):
                raise TypeError("not an object")
            rec = (
                record_from_hf(row, split)
                if isinstance(row.get("context"), Mapping)
                else record_from_original(row, split)
            )
        except (KeyError, TypeError, ValueError) as exc:
            bad.append((rid, f"{type(exc).__name__}: {exc}"))
            continue
        records.append(rec)
    return records, bad


def records_from_table(table: pa.Table) -> tuple[list[HotpotRecord], list[tuple[str, str]]]:
    """Records from an HF-layout Arrow table (e.g. the ``multihop_questions`` asset)."""
    return read_records(table.to_pylist())


HF_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("type", pa.string()),
        ("level", pa.string()),
        (
            "supporting_facts",
            pa.struct([("title", pa.list_(pa.string())), ("sent_id", pa.list_(pa.int32()))]),
        ),
        (
            "context",
            pa.struct([("title", pa.list_(pa.string())), ("sentences", pa.list_(pa.list_(pa.string())))]),
        ),
        ("split", pa.string()),
    ]
)


def original_to_hf_table(rows: Sequence[Mapping[str, Any]], split: str = "train") -> pa.Table:
    """Original-layout dicts as an HF-layout table (for feeding real HotpotQA to the stage)."""
    out = []
    for row in rows:
        out.append(
            {
                "id": row["_id"],
                "question": row["question"],
                "answer": row["answer"],
                "type": row.get("type", ""),
                "level": row.get("level", ""),
                "supporting_facts": {
                    "title": [t for t, _ in row["supporting_facts"]],
                    "sent_id": [int(s) for _, s in row["supporting_facts"]],
                },
                "context": {
                    "title": [t for t, _ in row["context"]],
                    "sentences": [list(s) for _, s in row["context"]],
                },
                "split": row.get("split", split),
            }
        )
    out.sort(key=lambda r: r["id"])
    return pa.Table.from_pylist(out, schema=HF_SCHEMA)
