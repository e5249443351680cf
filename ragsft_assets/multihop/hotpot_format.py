"""HotpotQA layouts: the Hugging Face ``hotpot_qa`` layout (Parquet) and the original one (JSON lines).

HF layout: ``supporting_facts = {"title": [...], "sent_id": [...]}`` and
``context = {"title": [...], "sentences": [[...], ...]}`` (Arrow lists cannot mix
strings and numbers). Original layout: ``_id``, ``supporting_facts = [[title,
sent_id], ...]``, ``context = [[title, [sentences]], ...]``. The two convert both
ways without loss; the JSON-lines export keeps the original key order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.arrow_schemas import STRING_LIST, strings
from ragsft_assets.ids import item_rng
from ragsft_assets.storage import atomic_write_bytes

HF_SCHEMA = pa.schema(
    [
        *strings("id", "question", "answer", "type", "level"),
        ("supporting_facts", pa.struct([("title", STRING_LIST), ("sent_id", pa.list_(pa.int32()))])),
        ("context", pa.struct([("title", STRING_LIST), ("sentences", pa.list_(STRING_LIST))])),
    ]
)
MULTIHOP_SCHEMA = HF_SCHEMA.append(pa.field("split", pa.string()))
ORIGINAL_KEYS = ("supporting_facts", "level", "question", "context", "answer", "_id", "type")
QUESTION_TYPE, LEVEL = "bridge", "hard"


def build_record(
    qid: str,
    question: str,
    answer: str,
    gold_a: tuple[str, Sequence[str]],
    gold_b: tuple[str, Sequence[str]],
    support_a: Iterable[int],
    support_b: Iterable[int],
    distractors: Sequence[tuple[str, Sequence[str]]],
    seed: int,
) -> dict[str, Any]:
    """One question in the HF layout: golds + distractors shuffled by a draw keyed by the question id."""
    paragraphs = [gold_a, gold_b, *distractors]
    item_rng(seed, "context_order", qid).shuffle(paragraphs)
    facts = [(gold_a[0], i) for i in sorted(set(support_a))] + [
        (gold_b[0], i) for i in sorted(set(support_b))
    ]
    return {
        "id": qid,
        "question": question,
        "answer": answer,
        "type": QUESTION_TYPE,
        "level": LEVEL,
        "supporting_facts": {"title": [t for t, _ in facts], "sent_id": [int(i) for _, i in facts]},
        "context": {"title": [t for t, _ in paragraphs], "sentences": [list(s) for _, s in paragraphs]},
    }


def hf_to_original(row: Mapping[str, Any]) -> dict[str, Any]:
    """HF layout -> original HotpotQA layout (key order of the original files)."""
    sf, ctx = row["supporting_facts"], row["context"]
    rec = {
        "supporting_facts": [[t, int(i)] for t, i in zip(sf["title"], sf["sent_id"], strict=True)],
        "level": row["level"],
        "question": row["question"],
        "context": [[t, list(s)] for t, s in zip(ctx["title"], ctx["sentences"], strict=True)],
        "answer": row["answer"],
        "_id": row["id"],
        "type": row["type"],
    }
    return rec


def original_to_hf(rec: Mapping[str, Any]) -> dict[str, Any]:
    """Original HotpotQA layout -> HF layout."""
    return {
        "id": rec["_id"],
        "question": rec["question"],
        "answer": rec["answer"],
        "type": rec["type"],
        "level": rec["level"],
        "supporting_facts": {
            "title": [t for t, _ in rec["supporting_facts"]],
            "sent_id": [int(i) for _, i in rec["supporting_facts"]],
        },
        "context": {
            "title": [t for t, _ in rec["context"]],
            "sentences": [list(s) for _, s in rec["context"]],
        },
    }


def records_table(rows: Sequence[Mapping[str, Any]], with_split: bool = True) -> pa.Table:
    """HF-layout rows as an Arrow table (``MULTIHOP_SCHEMA`` with split, else ``HF_SCHEMA``), sorted by id."""
    schema = MULTIHOP_SCHEMA if with_split else HF_SCHEMA
    ordered = sorted(rows, key=lambda r: r["id"])
    return pa.Table.from_pylist([{f.name: r[f.name] for f in schema} for r in ordered], schema=schema)


def jsonl_bytes(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """Original-layout JSON lines for HF-layout rows (one object per line, UTF-8, trailing newline)."""
    return b"".join(orjson.dumps(hf_to_original(r)) + b"\n" for r in rows)


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: Path) -> Path:
    """Write the original-layout JSON-lines export atomically."""
    return atomic_write_bytes(path, jsonl_bytes(rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read an original-layout JSON-lines export back into HF-layout rows."""
    lines = Path(path).read_bytes().splitlines()
    return [original_to_hf(orjson.loads(line)) for line in lines if line.strip()]
