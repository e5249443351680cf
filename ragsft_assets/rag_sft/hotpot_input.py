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

from ragsft_assets.multihop.hotpot_format import original_to_hf, records_table


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


def original_to_hf_table(rows: Sequence[Mapping[str, Any]], split: str = "train") -> pa.Table:
    """Original-layout dicts as an HF-layout table with a split (for feeding real HotpotQA to the stage)."""
    return records_table([{**original_to_hf(row), "split": split} for row in rows])
