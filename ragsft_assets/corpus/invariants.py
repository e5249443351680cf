"""Invariants of the corpus tables, as plain functions (the asset checks call them).

Each returns the offending items (empty = the invariant holds), a few of which go into the check's
metadata.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa

from ragsft_assets.ids import doc_id


def duplicate_ids(abstracts: pa.Table) -> list[str]:
    """Ids that occur in more than one row."""
    counts = Counter(abstracts.column("id").to_pylist())
    return sorted(i for i, n in counts.items() if n > 1)


def ids_not_matching_titles(abstracts: pa.Table) -> list[tuple[str, str]]:
    """``(id, title)`` of rows whose id is not the 24-hex SHA-256 prefix of the title."""
    return [
        (i, t)
        for i, t in zip(
            abstracts.column("id").to_pylist(), abstracts.column("title").to_pylist(), strict=True
        )
        if i != doc_id(t)
    ]


def documents_in_several_splits(abstracts: pa.Table) -> list[tuple[str, list[str]]]:
    """``(id, splits)`` of documents that appear in more than one split."""
    splits: defaultdict[str, set[str]] = defaultdict(set)
    for i, s in zip(abstracts.column("id").to_pylist(), abstracts.column("split").to_pylist(), strict=True):
        splits[i].add(s)
    return sorted((i, sorted(s)) for i, s in splits.items() if len(s) > 1)


def edges_outside_corpus_split(graph: pa.Table, abstracts: pa.Table) -> list[tuple[str, str, str]]:
    """``(source_id, target_id, split)`` of edges whose endpoints are not both in that split."""
    split_of = dict(
        zip(abstracts.column("id").to_pylist(), abstracts.column("split").to_pylist(), strict=True)
    )
    return [
        (s, t, sp)
        for s, t, sp in zip(
            graph.column("source_id").to_pylist(),
            graph.column("target_id").to_pylist(),
            graph.column("split").to_pylist(),
            strict=True,
        )
        if split_of.get(s) != sp or split_of.get(t) != sp
    ]


def pairs_without_edge(pairs: pa.Table, graph: pa.Table) -> list[str]:
    """Ids of bridge pairs with no bridge edge a -> b in the graph."""
    edges = {
        (s, t)
        for s, t, b in zip(
            graph.column("source_id").to_pylist(),
            graph.column("target_id").to_pylist(),
            graph.column("is_bridge").to_pylist(),
            strict=True,
        )
        if b
    }
    return [
        i
        for i, a, b in zip(
            pairs.column("id").to_pylist(),
            pairs.column("a_id").to_pylist(),
            pairs.column("b_id").to_pylist(),
            strict=True,
        )
        if (a, b) not in edges
    ]
