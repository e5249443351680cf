"""Filtered configurations of the released questions: subsets of a parent, row for row.

A filtered configuration never rewrites a question: it is the parent's rows whose id the filters
kept, unchanged. ``subset_rows`` builds it, ``subset_violations`` is the invariant a blocking
check enforces, ``verdicts_table`` is the provenance: one row per (question, filter that saw it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.arrow_schemas import strings

VERDICTS_SCHEMA = pa.schema(
    [
        *strings("id", "filter", "verdict"),
        ("kept", pa.bool_()),
        ("reason", pa.string()),
        ("topic", pa.string()),  # the question's topic (its bridge's category), null where unknown
    ]
)


def subset_rows(parent: pa.Table, keep_ids: Iterable[str]) -> pa.Table:
    """The parent's rows whose id is in ``keep_ids``, in the parent's order, bytes unchanged."""
    keep = pa.array(sorted(set(keep_ids)), pa.string())
    return parent.filter(pc.is_in(parent["id"], value_set=keep))


def subset_violations(child: pa.Table, parent: pa.Table) -> list[tuple[str, str]]:
    """Why ``child`` is not a row-for-row subset of ``parent``: ``[(problem, id)]``, empty when it is.

    Problems: ``schema`` (the schemas differ), ``duplicate_id``, ``not_in_parent``, ``row_differs``
    (same id, some value differs).
    """
    if not child.schema.remove_metadata().equals(parent.schema.remove_metadata()):
        return [("schema", "")]
    out: list[tuple[str, str]] = []
    ids = child["id"].to_pylist()
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            out.append(("duplicate_id", i))
        seen.add(i)
    parent_rows = {r["id"]: r for r in subset_rows(parent, seen).to_pylist()}
    for row in child.to_pylist():
        ref = parent_rows.get(row["id"])
        if ref is None:
            out.append(("not_in_parent", row["id"]))
        elif ref != row:
            out.append(("row_differs", row["id"]))
    return out


def shared_id_violations(child: pa.Table, parent: pa.Table) -> list[tuple[str, str]]:
    """Why ``child`` does not match ``parent`` on the ids they share: :func:`subset_violations`
    without ``not_in_parent``. The HotpotQA-fr card's annotator config (the six-criteria one,
    ``own_rows_allowed`` in published_configs.py) "n'est pas un sous-ensemble de la configuration par
    défaut" (a later, larger production), but "Pour ces identifiants communs le contenu est identique à
    l'octet près": a row of its own is allowed, a changed shared row not."""
    return [v for v in subset_violations(child, parent) if v[0] != "not_in_parent"]


def verdicts_table(
    filters: Mapping[str, Iterable[tuple[str, str, bool, str | None]]],
    topics: Mapping[str, str] | None = None,
) -> pa.Table:
    """Provenance rows ``{filter: [(id, verdict, kept, reason)]}`` as one table sorted by (id, filter order).

    ``topics`` (question id -> topic, where known) fills the ``topic`` column, so the card can give
    the keep rate by topic from the release alone.
    """
    topics = topics or {}
    rows = []
    for order, (name, items) in enumerate(filters.items()):
        for qid, verdict, kept, reason in items:
            row = {"id": qid, "filter": name, "verdict": verdict, "kept": kept, "reason": reason}
            rows.append((qid, order, {**row, "topic": topics.get(qid)}))
    rows.sort(key=lambda r: (r[0], r[1]))
    return pa.Table.from_pylist([r[2] for r in rows], schema=VERDICTS_SCHEMA)
