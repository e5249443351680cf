"""The decision ledgers of the corpus stages, built from columns (Dagster-free).

``abstracts`` decides every record (kept, or dropped with its reason and title) and ``link_graph``
every in-corpus edge (kept, or dropped with its reason and alias): hundreds of thousands of rows for
a real snapshot, most of them kept. The kept rows are made in Arrow from the output table's columns;
only the dropped rows, with a JSON detail each, pass through Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.gc_pause import paused_gc
from ragsft_assets.ledger import DROPPED, KEPT, ledger_table_from_arrays


def _details(key: str, values: Sequence[str]) -> pa.Array:
    """``{"<key>": value}`` as JSON text per value (what :func:`ragsft_assets.ledger.ledger_table` writes)."""
    return pa.array(
        [orjson.dumps({key: v}, option=orjson.OPT_SORT_KEYS).decode() for v in values], pa.string()
    )


def kept_and_dropped_ledger(
    partition: str,
    product: str,
    stage: str,
    kept_ids: pa.Array | pa.ChunkedArray,
    dropped: Sequence[tuple[str, str, str]],
    detail_key: str,
) -> pa.Table:
    """The ledger of a stage: ``dropped`` ``(candidate id, reason, detail value)`` rows, then ``kept_ids``.

    Equal to ``ledger_table`` of ``[Decision(i, DROPPED, r, {detail_key: v}) for i, r, v in dropped]``
    followed by ``[Decision(i, KEPT) for i in kept_ids]``.
    """
    kept_ids = kept_ids.combine_chunks() if isinstance(kept_ids, pa.ChunkedArray) else kept_ids
    n_kept, n_dropped = len(kept_ids), len(dropped)
    with paused_gc():  # a tuple and a JSON detail per dropped row, no cycles
        drop_cols = list(zip(*dropped, strict=True)) if dropped else [(), (), ()]
        details = _details(detail_key, drop_cols[2])
    return ledger_table_from_arrays(
        partition,
        product,
        stage,
        pa.concat_arrays([pa.array(drop_cols[0], pa.string()), kept_ids.cast(pa.string())]),
        pa.concat_arrays([pa.repeat(pa.scalar(DROPPED), n_dropped), pa.repeat(pa.scalar(KEPT), n_kept)]),
        pa.concat_arrays([pa.array(drop_cols[1], pa.string()), pa.repeat(pa.scalar(""), n_kept)]),
        pa.concat_arrays([details, pa.nulls(n_kept, pa.string())]),
    )


def record_candidates(
    kept_ids: pa.Array | pa.ChunkedArray, rejected: Sequence[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """``rejected`` with each record's own candidate id: ``<id>~<reason>`` where ``id`` is also kept.

    A document id is a hash of the title, so a record dropped as a ``duplicate_title`` (or as
    ``too_short`` beside a longer record of the same title) has the id of the record that was kept.
    Under one id the ledger would say both "kept" and "dropped" at the same stage, and the final
    decision (a drop wins within a stage) would count a shipped abstract as dropped. The suffix
    keeps every record a candidate of its own; a repeat of the same ``(id, reason)`` gets ``~2``...
    """
    kept = set(pc.unique(kept_ids).to_pylist()) if len(kept_ids) else set()
    seen: dict[tuple[str, str], int] = {}
    out = []
    for cid, reason, title in rejected:
        if cid in kept:
            n = seen[(cid, reason)] = seen.get((cid, reason), 0) + 1
            cid = f"{cid}~{reason}" + (f"~{n}" if n > 1 else "")
        out.append((cid, reason, title))
    return out


def abstracts_ledger(
    partition: str, product: str, table: pa.Table, rejected: Sequence[tuple[str, str, str]]
) -> pa.Table:
    """The ``abstracts`` ledger: every rejected ``(id, reason, title)``, then every kept row's id.

    A rejected record whose id is kept too is named ``<id>~<reason>`` (:func:`record_candidates`).
    """
    ids = table.column("id")
    return kept_and_dropped_ledger(
        partition, product, "abstracts", ids, record_candidates(ids, rejected), "title"
    )


def edge_ids(source_id: pa.Array, target_id: pa.Array, sentence: pa.Array) -> pa.Array:
    """``f"{source_id}>{target_id}#{sentence}"`` per edge, in Arrow."""
    return pc.binary_join_element_wise(
        source_id, pa.scalar(">"), target_id, pa.scalar("#"), pc.cast(sentence, pa.string()), pa.scalar("")
    )


def link_graph_ledger(
    partition: str, product: str, table: pa.Table, dropped: Sequence[tuple[str, str, str, int, str]]
) -> pa.Table:
    """The ``link_graph`` ledger: every dropped ``(source, target, alias, sentence, reason)`` edge, then
    every kept edge of ``table``, each named ``source>target#sentence``."""
    kept = edge_ids(table.column("source_id"), table.column("target_id"), table.column("sentence"))
    rows = [(f"{s}>{t}#{n}", reason, alias) for s, t, alias, n, reason in dropped]
    return kept_and_dropped_ledger(partition, product, "link_graph", kept, rows, "alias")
