"""The ``link_graph`` table: edges a -> b between abstracts of the corpus, in the same split.

Every link of an abstract is a candidate edge. In this order, edges are dropped with a counted reason:
``target_not_in_corpus`` (the target has no row in ``abstracts``), ``cross_split`` (a and b are in
different splits: an edge must never leak a document across splits), ``in_degree_cap`` (the target is
cited by more than ``in_degree_cap`` distinct sources over the whole corpus, every split — applied
before anything else looks at the
graph, so hubs such as "France" never become bridges), and ``enumeration`` (the alias stands only
inside an enumeration, see :mod:`ragsft_assets.corpus.enumeration`).

``target_in_degree`` is the number of distinct sources with a kept edge to the target. The bridge set
is the given titles when there are some (the vital-articles list for real use), else the ``bridge_top_k``
targets with the highest kept in-degree (ties by id); ``is_bridge`` marks the edges into it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets import leftovers
from ragsft_assets.arrow_schemas import strings
from ragsft_assets.corpus import enumeration
from ragsft_assets.corpus.abstracts import LINK_TYPE
from ragsft_assets.corpus.enumeration import enumeration_flags, may_hold_enumeration
from ragsft_assets.gc_pause import paused_gc
from ragsft_assets.ids import doc_id
from ragsft_assets.worker_pools import closing_pool, start_pool

TARGET_NOT_IN_CORPUS = "target_not_in_corpus"
CROSS_SPLIT = "cross_split"
IN_DEGREE_CAP = "in_degree_cap"
ENUMERATION = "enumeration"
EDGE_KEPT = "kept"
EDGE_REASONS = (TARGET_NOT_IN_CORPUS, CROSS_SPLIT, IN_DEGREE_CAP, ENUMERATION)

DEFAULT_IN_DEGREE_CAP = 1000
# Below this many candidate edges, shipping them to workers costs more than the rule itself (measured:
# 24k edges took 0.7 s in one process and 1.9 s on two; 240k edges gain about a second on two).
PARALLEL_MIN_EDGES = 150_000
# The same once this process's fork server is up (abstracts built here before, as in a run of the
# project's in-process executor): a pool then starts without the imports. Measured on 2 cores, warm
# (ragsft bench corpus, 2026-12): 90k checked edges 1.05 s on two workers vs 1.5 s in one; an earlier
# measurement put 17k edges at 0.6 s either way.
WARM_PARALLEL_MIN_EDGES = 50_000
# The vital articles level 4 hold 10,000 titles: without a list, take as many of the most linked-to.
DEFAULT_BRIDGE_TOP_K = 10_000

LINK_LIST = pa.list_(LINK_TYPE)  # the abstracts' links column, one struct definition
LINK_GRAPH_SCHEMA = pa.schema(
    [
        *strings("source_id", "source_title", "target_id", "target_title", "alias"),
        ("sentence", pa.int32()),
        *strings("sentence_text", "split"),
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
    worker_cpu_s: float = 0.0  # CPU seconds of the enumeration pool's workers (0 without a pool)


def select_bridges(in_degree: dict[str, int], titles: Iterable[str], top_k: int) -> set[str]:
    """The bridge ids: the given titles' ids, or the ``top_k`` most linked-to ids (ties by id)."""
    titles = list(titles)
    if titles:
        return {doc_id(t) for t in titles}
    ranked = sorted((tid for tid, d in in_degree.items() if d > 0), key=lambda t: (-in_degree[t], t))
    return set(ranked[: max(0, top_k)])


def top_linked(target_ids: pa.Array, in_degree: pa.Array, top_k: int) -> set[str]:
    """:func:`select_bridges` without titles, in Arrow: the ``top_k`` ids of highest in-degree (ties by id).

    Arrow orders strings by their UTF-8 bytes, as Python orders them (by code point), so the set is the
    one ``sorted`` gives; no Python object per target is built.
    """
    ranked = pa.table({"id": target_ids, "degree": in_degree}).filter(pc.greater(in_degree, 0))
    order = pc.sort_indices(ranked, sort_keys=[("degree", "descending"), ("id", "ascending")])
    return set(ranked.column("id").take(order[: max(0, top_k)]).to_pylist())


def distinct_sources(targets: np.ndarray, sources: np.ndarray, n_rows: int) -> np.ndarray:
    """Per corpus row, the number of distinct rows among ``sources`` of the edges into it
    (``targets[i]`` <- ``sources[i]``, both row numbers below ``n_rows``): its in-degree."""
    if not len(targets):
        return np.zeros(n_rows, np.int64)
    # One int64 per (target, source) pair; Arrow's hash-based unique, then a count per target.
    pairs = pc.unique(pa.array(targets.astype(np.int64) * n_rows + sources.astype(np.int64))).to_numpy()
    return np.bincount(pairs // n_rows, minlength=n_rows)


def _ints(array: pa.Array) -> np.ndarray:
    """A null-free integer array as numpy."""
    return array.to_numpy(zero_copy_only=False)


def use_pool(n_pairs: int, workers: int, warm: bool) -> bool:
    """Whether the enumeration rule over ``n_pairs`` edges runs on a pool (``warm``: fork server up)."""
    threshold = WARM_PARALLEL_MIN_EDGES if warm else PARALLEL_MIN_EDGES
    return workers > 1 and n_pairs >= threshold


def _timed_flags(pairs: list[tuple[str, str]]) -> tuple[list[bool], float]:
    """:func:`enumeration_flags` and the CPU seconds it took (a worker entry point)."""
    started = time.process_time()
    flags = enumeration_flags(pairs)
    return flags, time.process_time() - started


def _enumeration_flags(
    sentences: pa.Array, index: pa.Array, aliases: pa.Array, workers: int
) -> tuple[Any, float]:
    """The enumeration rule over every candidate edge (``sentences[index[i]]``, ``aliases[i]``), on
    ``workers`` processes for large graphs.

    Returns the flags and the pool workers' CPU seconds (0 when it ran here).
    """
    from ragsft_assets.corpus.build import fork_server_started, worker_context

    if not use_pool(len(aliases), workers, fork_server_started()):
        return enumeration.flags_of_arrays(sentences, index, aliases), 0.0

    pairs = enumeration.sentence_alias_pairs(sentences, index, aliases)
    size = max(1000, len(pairs) // (workers * 4))
    chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    with closing_pool(start_pool(worker_context(), workers)) as pool:
        parts = pool.map(_timed_flags, chunks)
    return [flag for flags, _ in parts for flag in flags], sum(cpu for _, cpu in parts)


def build_link_graph(abstracts: pa.Table, cfg: LinkGraphConfig, *, workers: int = 1) -> LinkGraphBuild:
    """Build the edges of the corpus graph (see module doc), sorted by (source_id, target_id, sentence).

    The filters, counts and sorting run in Arrow (C++) on compact columns (row and link positions,
    split codes); the text columns are gathered once, for the kept edges. Only the enumeration rule, on
    the edges that survive the corpus, split and cap filters, runs in Python.

    Args:
        abstracts: the abstracts table (every split together; ids are unique).
        cfg: the in-degree cap and the bridge rule.
        workers: processes for the enumeration rule (the result does not depend on it).
    """
    abstracts = abstracts.combine_chunks()
    links = abstracts.column("links").chunk(0) if abstracts.num_rows else pa.array([], LINK_LIST)
    ids = abstracts.column("id")
    split = abstracts.column("split")
    parents = pc.list_parent_indices(links)  # the source row of every link
    flat = pc.list_flatten(links)
    target_id = flat.field("target_id")
    funnel: dict[str, int] = {"links_read": len(flat)}

    # The target's row (ids are unique): null when the target is not in the corpus.
    target_row = pc.index_in(target_id, value_set=ids)
    in_corpus = pc.is_valid(target_row)
    same = pc.and_(in_corpus, pc.equal(pc.take(split, parents), pc.take(split, target_row)).fill_null(False))
    n_in = pc.sum(in_corpus).as_py() or 0
    n_same = pc.sum(same).as_py() or 0
    funnel[TARGET_NOT_IN_CORPUS] = len(flat) - n_in
    funnel[CROSS_SPLIT] = n_in - n_same

    # The cap counts distinct sources per target over the whole corpus (every split: a target's
    # popularity does not depend on how the corpus was split), before any other rule looks at the edges.
    # It drops the same-split edges to an over-cited target (cross-split ones are dropped already).
    in_positions = pc.indices_nonzero(in_corpus)
    degree = distinct_sources(
        _ints(pc.take(target_row, in_positions)), _ints(pc.take(parents, in_positions)), abstracts.num_rows
    )
    positions = pc.indices_nonzero(same)  # link positions of the same-split edges
    is_capped = pa.array(degree[_ints(pc.take(target_row, positions))] > cfg.in_degree_cap, pa.bool_())
    capped = pc.filter(positions, is_capped)
    candidates = pc.filter(positions, pc.invert(is_capped))
    funnel[IN_DEGREE_CAP] = len(capped)
    del degree, is_capped

    sentences = (
        abstracts.column("sentences").chunk(0) if abstracts.num_rows else pa.array([], pa.list_(pa.string()))
    )
    sentence_no = flat.field("sentence")
    cand_parents = pc.take(parents, candidates)
    sentence_index = pc.add(
        pc.take(sentences.offsets, cand_parents), pc.cast(pc.take(sentence_no, candidates), pa.int32())
    )
    flat_sentences = pc.list_flatten(sentences)
    # The rule is False wherever the C++ prefilter says so: run it in Python on the others only.
    to_check = pc.indices_nonzero(pc.take(may_hold_enumeration(flat_sentences), sentence_index))
    with paused_gc():  # ~1 (sentence, alias) tuple per edge, no cycles
        flags, worker_cpu = _enumeration_flags(
            flat_sentences,
            pc.take(sentence_index, to_check),
            pc.take(pc.take(flat.field("anchor"), candidates), to_check),
            workers,
        )
    mask = np.zeros(len(candidates), dtype=bool)
    mask[to_check.to_numpy()] = flags
    mask = pa.array(mask, pa.bool_())
    enumerated = pc.filter(candidates, mask)
    kept = pc.filter(candidates, pc.invert(mask))
    kept_sentence_index = pc.filter(sentence_index, pc.invert(mask))
    funnel[ENUMERATION] = len(enumerated)
    funnel[EDGE_KEPT] = len(kept)
    # Put the kept edges in output order first (on the key columns only): every column is then
    # gathered once, already sorted, instead of built and sorted again. The keys are unique per edge.
    order = pc.sort_indices(
        pa.table(
            {
                "source_id": pc.take(ids, pc.take(parents, kept)),
                "target_id": pc.take(target_id, kept),
                "sentence": pc.take(sentence_no, kept),
            }
        ),
        sort_keys=[("source_id", "ascending"), ("target_id", "ascending"), ("sentence", "ascending")],
    )
    kept = pc.take(kept, order)
    kept_sentence_index = pc.take(kept_sentence_index, order)

    kept_parents = pc.take(parents, kept)
    kept_target_row = _ints(pc.take(target_row, kept))
    kept_degree = distinct_sources(kept_target_row, _ints(kept_parents), abstracts.num_rows)
    if cfg.bridge_titles:
        bridges = select_bridges({}, cfg.bridge_titles, cfg.bridge_top_k)
    else:
        linked = np.flatnonzero(kept_degree)
        bridges = top_linked(pc.take(ids, pa.array(linked)), pa.array(kept_degree[linked]), cfg.bridge_top_k)
    degree_col = pa.array(kept_degree[kept_target_row], pa.int32())
    kept_target_id = pc.take(target_id, kept)
    bridge_col = pc.is_in(kept_target_id, value_set=pa.array(sorted(bridges), pa.string()))
    table = pa.table(
        {
            "source_id": pc.take(ids, kept_parents),
            "source_title": pc.take(abstracts.column("title"), kept_parents),
            "target_id": kept_target_id,
            "target_title": pc.take(flat.field("target_title"), kept),
            "alias": pc.take(flat.field("anchor"), kept),
            "sentence": pc.cast(pc.take(sentence_no, kept), pa.int32()),
            "sentence_text": pc.take(flat_sentences, kept_sentence_index),
            "split": pc.take(split, kept_parents),
            "target_in_degree": degree_col,
            "is_bridge": bridge_col,
        },
        schema=LINK_GRAPH_SCHEMA,
    )
    funnel["bridges"] = len(bridges)

    dropped = []
    for reason, part in ((IN_DEGREE_CAP, capped), (ENUMERATION, enumerated)):
        for s, t, a, n in zip(
            pc.take(ids, pc.take(parents, part)).to_pylist(),
            pc.take(target_id, part).to_pylist(),
            pc.take(flat.field("anchor"), part).to_pylist(),
            pc.take(sentence_no, part).to_pylist(),
            strict=True,
        ):
            dropped.append((s, t, a, n, reason))
    dropped.sort()
    table = table.combine_chunks()
    pa.default_memory_pool().release_unused()  # the intermediates are freed: give their pages back
    return LinkGraphBuild(table, funnel, sorted(bridges), dropped, worker_cpu)


SPILL_PREFIX = ".link_graph.spill-"  # the per-build folder of the spilled edges (build_link_graph_files)
# The spilled candidate edges of build_link_graph_files: output columns, then the compact keys.
_SPILL_SCHEMA = pa.schema(
    [
        *[f for f in LINK_GRAPH_SCHEMA if f.name not in ("target_in_degree", "is_bridge")],
        ("source_row", pa.int64()),
        ("target_row", pa.int64()),
        ("enumerated", pa.bool_()),
    ]
)


def _group_edges(
    group: pa.Table, base: int, ids: pa.Array, split_codes: np.ndarray, workers: int
) -> tuple[pa.Table, np.ndarray, np.ndarray, dict[str, int], float]:
    """The same-split in-corpus edges of one row group of abstracts (rows ``base`` on, in the
    concatenated split files), with their enumeration flag; and every in-corpus link's (target row,
    source row) for the in-degree cap, the group's counts and the pool's CPU seconds."""
    group = group.combine_chunks()
    links = group.column("links").chunk(0) if group.num_rows else pa.array([], LINK_LIST)
    parents = pc.list_parent_indices(links)
    flat = pc.list_flatten(links)
    target_row = pc.index_in(flat.field("target_id"), value_set=ids)
    in_corpus = pc.indices_nonzero(pc.is_valid(target_row))
    src = _ints(pc.take(parents, in_corpus)).astype(np.int64) + base
    tgt = _ints(pc.take(target_row, in_corpus)).astype(np.int64)
    same = split_codes[src] == split_codes[tgt]
    counts = {
        "links_read": len(flat),
        TARGET_NOT_IN_CORPUS: len(flat) - len(in_corpus),
        CROSS_SPLIT: int((~same).sum()),
    }
    positions = pc.take(in_corpus, pa.array(np.flatnonzero(same)))
    sentences = group.column("sentences").chunk(0) if group.num_rows else pa.array([], pa.list_(pa.string()))
    sentence_no = pc.take(flat.field("sentence"), positions)
    cand_parents = pc.take(parents, positions)
    sentence_index = pc.add(pc.take(sentences.offsets, cand_parents), pc.cast(sentence_no, pa.int32()))
    flat_sentences = pc.list_flatten(sentences)
    aliases = pc.take(flat.field("anchor"), positions)
    to_check = pc.indices_nonzero(pc.take(may_hold_enumeration(flat_sentences), sentence_index))
    with paused_gc():  # ~1 (sentence, alias) tuple per edge, no cycles
        flags, cpu = _enumeration_flags(
            flat_sentences, pc.take(sentence_index, to_check), pc.take(aliases, to_check), workers
        )
    mask = np.zeros(len(positions), dtype=bool)
    mask[to_check.to_numpy()] = flags
    edges = pa.table(
        {
            "source_id": pc.take(group.column("id"), cand_parents),
            "source_title": pc.take(group.column("title"), cand_parents),
            "target_id": pc.take(flat.field("target_id"), positions),
            "target_title": pc.take(flat.field("target_title"), positions),
            "alias": aliases,
            "sentence": pc.cast(sentence_no, pa.int32()),
            "sentence_text": pc.take(flat_sentences, sentence_index),
            "split": pc.take(group.column("split"), cand_parents),
            "source_row": pa.array(src[same]),
            "target_row": pa.array(tgt[same]),
            "enumerated": pa.array(mask, pa.bool_()),
        },
        schema=_SPILL_SCHEMA,
    )
    return edges, tgt, src, counts, cpu


def build_link_graph_files(
    abstracts_paths: Sequence[Path],
    cfg: LinkGraphConfig,
    out_path: Path,
    *,
    workers: int = 1,
    tmp_dir: str | None = None,
) -> LinkGraphBuild:
    """:func:`build_link_graph` of the abstracts split files, written to ``out_path``, out of core.

    The abstracts are read a row group at a time; the same-split in-corpus edges go to a temporary
    Arrow file (memory-mapped later) and only compact row numbers stay in memory. The in-degree cap
    is decided once every edge is known, so the enumeration rule also runs on the (rare) capped edges;
    the result is the same. The edges are then sorted on their key columns and written a row group
    at a time (:func:`ragsft_assets.corpus.spill.write_row_groups`).

    Returns the build with ``table`` holding only ``source_id``, ``target_id`` and ``sentence`` of the
    written edges (what the ledger needs), in file order.
    """
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from ragsft_assets.corpus.spill import ROW_GROUP_ROWS, MappedArrow, write_row_groups

    files = [pq.ParquetFile(p) for p in abstracts_paths]
    narrow = pa.concat_tables([f.read(columns=["id", "split"]) for f in files]).combine_chunks()
    ids = narrow.column("id").chunk(0) if narrow.num_rows else pa.array([], pa.string())
    # Equal splits, equal codes (only equality matters: the same-split rule).
    split_codes = _ints(pc.dictionary_encode(narrow.column("split").combine_chunks()).indices).astype(
        np.int32
    )
    del narrow
    funnel: dict[str, int] = {"links_read": 0, TARGET_NOT_IN_CORPUS: 0, CROSS_SPLIT: 0}
    all_tgt: list[np.ndarray] = []
    all_src: list[np.ndarray] = []
    worker_cpu = 0.0
    # Named after this process, as the abstracts' chunk folders: a killed build's spill is removed by the
    # next build once that process is gone; TemporaryDirectory cleans up every other ending.
    parent = Path(tmp_dir) if tmp_dir else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    leftovers.remove_stale(parent, SPILL_PREFIX)
    with tempfile.TemporaryDirectory(prefix=leftovers.owned(SPILL_PREFIX), dir=parent) as spill_dir:
        # One file per row group of abstracts: a gather then gives back each file's pages as it goes
        # (spill.MappedArrow.gather), so the mapped edges resident stay about a row group's.
        spills: list[str] = []
        base = 0
        for f in files:
            for g in range(f.num_row_groups):
                group = f.read_row_group(g, columns=["id", "title", "sentences", "links", "split"])
                edges, tgt, src, counts, cpu = _group_edges(group, base, ids, split_codes, workers)
                base += group.num_rows
                spills.append(os.path.join(spill_dir, f"edges-{len(spills):07d}.arrow"))
                with ipc.new_file(spills[-1], _SPILL_SCHEMA) as writer:
                    writer.write_table(edges)
                all_tgt.append(tgt)
                all_src.append(src)
                worker_cpu += cpu
                for k, v in counts.items():
                    funnel[k] += v
                del group, edges
        n_rows = len(ids)
        degree = distinct_sources(
            np.concatenate(all_tgt) if all_tgt else np.zeros(0, np.int64),
            np.concatenate(all_src) if all_src else np.zeros(0, np.int64),
            n_rows,
        )
        del all_tgt, all_src
        spilled = MappedArrow(spills, _SPILL_SCHEMA)
        compact = spilled.table.select(["source_row", "target_row", "sentence", "enumerated"])
        tgt_rows = _ints(compact.column("target_row").combine_chunks())
        capped = degree[tgt_rows] > cfg.in_degree_cap
        enumerated = _ints(compact.column("enumerated").combine_chunks()).astype(bool) & ~capped
        kept_mask = ~capped & ~enumerated
        funnel[IN_DEGREE_CAP] = int(capped.sum())
        funnel[ENUMERATION] = int(enumerated.sum())
        funnel[EDGE_KEPT] = int(kept_mask.sum())
        kept = np.flatnonzero(kept_mask)
        src_rows = _ints(compact.column("source_row").combine_chunks())
        # Output order (source_id, target_id, sentence) from integers: ids are unique per row, so a
        # row's rank among the ids (Arrow's byte order of strings, as the string sort) stands for its
        # id. The keys are unique per edge: the order is total.
        id_rank = np.empty(n_rows, np.int64)
        id_rank[_ints(pc.sort_indices(ids)).astype(np.int64)] = np.arange(n_rows, dtype=np.int64)
        sentence = _ints(compact.column("sentence").combine_chunks())
        kept = kept[np.lexsort((sentence[kept], id_rank[tgt_rows[kept]], id_rank[src_rows[kept]]))]
        del id_rank, sentence
        kept_degree = distinct_sources(tgt_rows[kept], src_rows[kept], n_rows)
        del src_rows, compact
        if cfg.bridge_titles:
            bridges = select_bridges({}, cfg.bridge_titles, cfg.bridge_top_k)
        else:
            linked = np.flatnonzero(kept_degree)
            bridges = top_linked(
                pc.take(ids, pa.array(linked)), pa.array(kept_degree[linked]), cfg.bridge_top_k
            )
        funnel["bridges"] = len(bridges)
        bridge_set = pa.array(sorted(bridges), pa.string())
        dropped: list[tuple[str, str, str, int, str]] = []
        for reason, mask in ((IN_DEGREE_CAP, capped), (ENUMERATION, enumerated)):
            part = spilled.gather(np.flatnonzero(mask), ["source_id", "target_id", "alias", "sentence"])
            for s, t, a, n in zip(*(part.column(c).to_pylist() for c in part.column_names), strict=True):
                dropped.append((s, t, a, n, reason))
        dropped.sort()
        spilled.drop_pages()
        kept_target_degree = kept_degree[tgt_rows[kept]]
        del tgt_rows, degree

        key_parts: list[pa.Table] = []  # the ledger's columns, kept from each written row group

        def groups() -> Iterable[pa.Table]:
            names = [f.name for f in LINK_GRAPH_SCHEMA if f.name not in ("target_in_degree", "is_bridge")]
            for lo in range(0, len(kept), ROW_GROUP_ROWS):
                part = spilled.gather(kept[lo : lo + ROW_GROUP_ROWS], names)
                spilled.drop_pages()
                cols = {n: part.column(n) for n in names}
                cols["target_in_degree"] = pa.array(kept_target_degree[lo : lo + ROW_GROUP_ROWS], pa.int32())
                cols["is_bridge"] = pc.is_in(part.column("target_id"), value_set=bridge_set)
                key_parts.append(part.select(["source_id", "target_id", "sentence"]))
                yield pa.table(cols, schema=LINK_GRAPH_SCHEMA)
                pa.default_memory_pool().release_unused()

        write_row_groups(out_path, LINK_GRAPH_SCHEMA, groups())
    out_funnel = {k: funnel[k] for k in ("links_read", *EDGE_REASONS, EDGE_KEPT, "bridges")}
    pa.default_memory_pool().release_unused()
    keys = (
        pa.concat_tables(key_parts).combine_chunks()
        if key_parts
        else pa.schema(
            [LINK_GRAPH_SCHEMA.field(n) for n in ("source_id", "target_id", "sentence")]
        ).empty_table()
    )
    return LinkGraphBuild(keys, out_funnel, sorted(bridges), dropped, worker_cpu)
