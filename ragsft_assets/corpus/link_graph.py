"""The ``link_graph`` table: edges a -> b between abstracts of the corpus, in the same split.

Every link of an abstract is a candidate edge. In this order, edges are dropped with a counted reason:
``target_not_in_corpus`` (the target has no row in ``abstracts``), ``cross_split`` (a and b are in
different splits: an edge must never leak a document across splits), ``in_degree_cap`` (the target is
cited by more than ``in_degree_cap`` distinct sources — applied before anything else looks at the
graph, so hubs such as "France" never become bridges), and ``enumeration`` (the alias stands only
inside an enumeration, see :mod:`ragsft_assets.corpus.enumeration`).

``target_in_degree`` is the number of distinct sources with a kept edge to the target. The bridge set
is the given titles when there are some (the vital-articles list for real use), else the ``bridge_top_k``
targets with the highest kept in-degree (ties by id); ``is_bridge`` marks the edges into it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.corpus.enumeration import enumeration_flags
from ragsft_assets.ids import doc_id

TARGET_NOT_IN_CORPUS = "target_not_in_corpus"
CROSS_SPLIT = "cross_split"
IN_DEGREE_CAP = "in_degree_cap"
ENUMERATION = "enumeration"
EDGE_KEPT = "kept"
EDGE_REASONS = (TARGET_NOT_IN_CORPUS, CROSS_SPLIT, IN_DEGREE_CAP, ENUMERATION)

DEFAULT_IN_DEGREE_CAP = 1000
# Below this many candidate edges, shipping them to workers costs more than the rule itself (measured:
# 24k edges took 0.7 s in one process and 1.9 s on two).
PARALLEL_MIN_EDGES = 500_000
# The vital articles level 4 hold 10,000 titles: without a list, take as many of the most linked-to.
DEFAULT_BRIDGE_TOP_K = 10_000

LINK_LIST = pa.list_(
    pa.struct(
        [
            ("target_title", pa.string()),
            ("target_id", pa.string()),
            ("anchor", pa.string()),
            ("sentence", pa.int32()),
        ]
    )
)
LINK_GRAPH_SCHEMA = pa.schema(
    [
        ("source_id", pa.string()),
        ("source_title", pa.string()),
        ("target_id", pa.string()),
        ("target_title", pa.string()),
        ("alias", pa.string()),
        ("sentence", pa.int32()),
        ("sentence_text", pa.string()),
        ("split", pa.string()),
        ("target_in_degree", pa.int32()),
        ("is_bridge", pa.bool_()),
    ]
)


@dataclass(frozen=True, slots=True)
class LinkGraphConfig:
    """Knobs of the link graph."""

    in_degree_cap: int = DEFAULT_IN_DEGREE_CAP
    bridge_titles: tuple[str, ...] = ()
    bridge_top_k: int = DEFAULT_BRIDGE_TOP_K


@dataclass(slots=True)
class LinkGraphBuild:
    """The edge table, its funnel, the bridge ids and the dropped in-corpus edges."""

    table: pa.Table
    funnel: dict[str, int]
    bridge_ids: list[str]
    dropped: list[tuple[str, str, str, int, str]]  # (source_id, target_id, alias, sentence, reason)


def select_bridges(in_degree: dict[str, int], titles: Iterable[str], top_k: int) -> set[str]:
    """The bridge ids: the given titles' ids, or the ``top_k`` most linked-to ids (ties by id)."""
    titles = list(titles)
    if titles:
        return {doc_id(t) for t in titles}
    ranked = sorted((tid for tid, d in in_degree.items() if d > 0), key=lambda t: (-in_degree[t], t))
    return set(ranked[: max(0, top_k)])


def _enumeration_flags(pairs: list[tuple[str, str]], workers: int) -> list[bool]:
    """The enumeration rule over every candidate edge, on ``workers`` processes for large graphs."""
    if workers <= 1 or len(pairs) < PARALLEL_MIN_EDGES:
        return enumeration_flags(pairs)
    from ragsft_assets.corpus.build import worker_context

    size = max(1000, len(pairs) // (workers * 4))
    chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    with worker_context().Pool(workers) as pool:
        return [flag for part in pool.map(enumeration_flags, chunks) for flag in part]


def build_link_graph(abstracts: pa.Table, cfg: LinkGraphConfig, *, workers: int = 1) -> LinkGraphBuild:
    """Build the edges of the corpus graph (see module doc), sorted by (source_id, target_id, sentence).

    Joins, counts and sorting run in Arrow (C++); only the enumeration rule, on the edges that
    survive the corpus, split and cap filters, runs in Python.

    Args:
        abstracts: the abstracts table (every split together).
        cfg: the in-degree cap and the bridge rule.
        workers: processes for the enumeration rule (the result does not depend on it).
    """
    abstracts = abstracts.combine_chunks()
    links = abstracts.column("links").chunk(0) if abstracts.num_rows else pa.array([], LINK_LIST)
    parents = pc.list_parent_indices(links)
    flat = pc.list_flatten(links)
    edges = pa.table(
        {
            "source_id": pc.take(abstracts.column("id"), parents),
            "source_title": pc.take(abstracts.column("title"), parents),
            "split": pc.take(abstracts.column("split"), parents),
            "target_id": flat.field("target_id"),
            "target_title": flat.field("target_title"),
            "alias": flat.field("anchor"),
            "sentence": flat.field("sentence"),
            "parent": parents,
        }
    )
    funnel: dict[str, int] = {"links_read": edges.num_rows}
    docs = pa.table({"target_id": abstracts.column("id"), "target_split": abstracts.column("split")})
    joined = edges.join(docs, "target_id", join_type="left outer")
    in_corpus = joined.filter(pc.is_valid(joined.column("target_split")))
    funnel[TARGET_NOT_IN_CORPUS] = joined.num_rows - in_corpus.num_rows
    same = in_corpus.filter(pc.equal(in_corpus.column("split"), in_corpus.column("target_split")))
    funnel[CROSS_SPLIT] = in_corpus.num_rows - same.num_rows

    # The cap counts distinct sources per target before any other rule looks at the edges.
    degree = same.group_by("target_id").aggregate([("source_id", "count_distinct")])
    capped_ids = degree.filter(pc.greater(degree.column("source_id_count_distinct"), cfg.in_degree_cap))
    is_capped = pc.is_in(same.column("target_id"), value_set=capped_ids.column("target_id"))
    capped = same.filter(is_capped)
    candidates = same.filter(pc.invert(is_capped))
    funnel[IN_DEGREE_CAP] = capped.num_rows

    sentences = (
        abstracts.column("sentences").chunk(0) if abstracts.num_rows else pa.array([], pa.list_(pa.string()))
    )
    starts = pc.take(sentences.offsets, candidates.column("parent"))
    index = pc.add(starts, pc.cast(candidates.column("sentence"), pa.int32()))
    sentence_text = pc.take(pc.list_flatten(sentences), index)
    candidates = candidates.append_column("sentence_text", sentence_text)
    pairs = list(zip(sentence_text.to_pylist(), candidates.column("alias").to_pylist(), strict=True))
    in_list = _enumeration_flags(pairs, workers)
    mask = pa.array(in_list, pa.bool_())
    enumerated = candidates.filter(mask)
    kept = candidates.filter(pc.invert(mask))
    funnel[ENUMERATION] = enumerated.num_rows
    funnel[EDGE_KEPT] = kept.num_rows

    kept_degree = kept.group_by("target_id").aggregate([("source_id", "count_distinct")])
    in_degree = dict(
        zip(
            kept_degree.column("target_id").to_pylist(),
            kept_degree.column("source_id_count_distinct").to_pylist(),
            strict=True,
        )
    )
    bridges = select_bridges(in_degree, cfg.bridge_titles, cfg.bridge_top_k)
    degree_col = pc.cast(
        pc.take(
            kept_degree.column("source_id_count_distinct"),
            pc.index_in(kept.column("target_id"), value_set=kept_degree.column("target_id")),
        ),
        pa.int32(),
    )
    bridge_col = pc.is_in(kept.column("target_id"), value_set=pa.array(sorted(bridges), pa.string()))
    table = pa.table(
        {
            "source_id": kept.column("source_id"),
            "source_title": kept.column("source_title"),
            "target_id": kept.column("target_id"),
            "target_title": kept.column("target_title"),
            "alias": kept.column("alias"),
            "sentence": pc.cast(kept.column("sentence"), pa.int32()),
            "sentence_text": kept.column("sentence_text"),
            "split": kept.column("split"),
            "target_in_degree": degree_col,
            "is_bridge": bridge_col,
        },
        schema=LINK_GRAPH_SCHEMA,
    ).sort_by([("source_id", "ascending"), ("target_id", "ascending"), ("sentence", "ascending")])
    funnel["bridges"] = len(bridges)

    dropped = []
    for reason, part in ((IN_DEGREE_CAP, capped), (ENUMERATION, enumerated)):
        for s, t, a, n in zip(
            part.column("source_id").to_pylist(),
            part.column("target_id").to_pylist(),
            part.column("alias").to_pylist(),
            part.column("sentence").to_pylist(),
            strict=True,
        ):
            dropped.append((s, t, a, n, reason))
    dropped.sort()
    return LinkGraphBuild(table.combine_chunks(), funnel, sorted(bridges), dropped)
