"""The decision ledger: one schema for every stage.

Each stage writes its rows to ``assets/<partition>/_ledger/<stage>.parquet``;
the final verdict per candidate is a DuckDB view over all of them (the last
stage that decided a candidate, in pipeline order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow as pa

from ragsft_assets.storage import LEDGER_DIR, write_asset

LEDGER_SCHEMA = pa.schema(
    [
        ("partition", pa.string()),
        ("product", pa.string()),  # e.g. "multihop", or an SFT chain's recipe name (rag_sft/recipes.py)
        ("candidate_id", pa.string()),
        ("stage", pa.string()),  # the asset that decided, e.g. "question_checks"
        ("verdict", pa.string()),  # "kept" | "dropped" | "unreadable" | ...
        ("reason", pa.string()),  # short machine-readable reason, e.g. "answer_not_in_b"
        ("detail", pa.string()),  # JSON text with anything else worth keeping
        ("cache_keys", pa.list_(pa.string())),  # LLM cache keys that led to the decision
    ]
)

KEPT = "kept"
DROPPED = "dropped"


@dataclass(slots=True)
class Decision:
    candidate_id: str
    verdict: str
    reason: str = ""
    detail: dict | None = None
    cache_keys: list[str] = field(default_factory=list)


@dataclass(slots=True)
class DecisionLog:
    """What a step that keeps some candidates and drops others records beside its output: one
    ``Decision`` per candidate (its ledger rows) and the funnel's counts."""

    decisions: list[Decision] = field(default_factory=list)
    funnel: Counter = field(default_factory=Counter)


def ledger_table(partition: str, product: str, stage: str, decisions: Iterable[Decision]) -> pa.Table:
    """Build ledger rows for one stage, sorted by candidate id for byte-identical output."""
    rows = sorted(decisions, key=lambda d: (d.candidate_id, d.reason))
    return pa.table(
        {
            "partition": [partition] * len(rows),
            "product": [product] * len(rows),
            "candidate_id": [d.candidate_id for d in rows],
            "stage": [stage] * len(rows),
            "verdict": [d.verdict for d in rows],
            "reason": [d.reason for d in rows],
            "detail": [
                orjson.dumps(d.detail, option=orjson.OPT_SORT_KEYS).decode() if d.detail else None
                for d in rows
            ],
            "cache_keys": [list(d.cache_keys) for d in rows],
        },
        schema=LEDGER_SCHEMA,
    )


def write_ledger(table: pa.Table, partition: str, stage: str, root: Path | None = None) -> Path:
    """Write (replace) one stage's ledger rows for a partition."""
    return write_asset(table.cast(LEDGER_SCHEMA), partition, LEDGER_DIR, stage, root)


def ledger_table_from_arrays(
    partition: str,
    product: str,
    stage: str,
    candidate_id: pa.Array,
    verdict: pa.Array,
    reason: pa.Array,
    detail: pa.Array,
) -> pa.Table:
    """:func:`ledger_table` built from columns instead of :class:`Decision` objects.

    The same table (same rows, same order: a stable sort by candidate id, then reason) as
    ``ledger_table`` of the decisions in the arrays' order whose ``detail`` is the JSON text given
    (null for none) and whose ``cache_keys`` are empty; the sort and the constant columns run in Arrow,
    so a stage deciding hundreds of thousands of candidates does not build one object per row.
    """
    import numpy as np
    import pyarrow.compute as pc

    n = len(candidate_id)
    unsorted = pa.table(
        {"candidate_id": candidate_id, "verdict": verdict, "reason": reason, "detail": detail}
    )
    # Arrow compares strings by their UTF-8 bytes, which orders them as Python does (by code point);
    # the sort is stable, as ``sorted`` is.
    order = pc.sort_indices(unsorted, sort_keys=[("candidate_id", "ascending"), ("reason", "ascending")])
    rows = unsorted.take(order)
    empty_keys = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()))
    return pa.table(
        {
            "partition": pa.repeat(pa.scalar(partition, pa.string()), n),
            "product": pa.repeat(pa.scalar(product, pa.string()), n),
            "candidate_id": rows.column("candidate_id"),
            "stage": pa.repeat(pa.scalar(stage, pa.string()), n),
            "verdict": rows.column("verdict"),
            "reason": rows.column("reason"),
            "detail": rows.column("detail"),
            "cache_keys": empty_keys,
        },
        schema=LEDGER_SCHEMA,
    ).combine_chunks()
