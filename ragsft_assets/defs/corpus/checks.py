"""Asset checks of the corpus: one small check per invariant, blocking where downstream must stop.

Empty data is no pass: a stage that had input and produced no row (abstracts from dump lines that
were all dropped, a link graph from abstracts with no edge, pairs from bridge edges with no pair)
fails its check, or warns where snapshot.json allows empty output (``allow_empty_output``), and
the check's description and metadata say which.
"""

import dagster as dg

from ragsft_assets.corpus import invariants
from ragsft_assets.defs.corpus.assets import abstracts, bridge_pairs, link_graph
from ragsft_assets.defs.multihop.checks import empty_output
from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore

EXAMPLES = 5


def _result(failures: list, what: str, empty: str = "", allowed: bool = False) -> dg.AssetCheckResult:
    md = {
        "failures": len(failures),
        "examples": dg.MetadataValue.json(
            [list(f) if isinstance(f, tuple) else f for f in failures[:EXAMPLES]]
        ),
        "checked": what,
    }
    if empty:
        md.update({"empty_output": empty, "allow_empty_output": allowed})
    return dg.AssetCheckResult(
        passed=not failures and not empty,
        severity=dg.AssetCheckSeverity.WARN if empty and allowed else dg.AssetCheckSeverity.ERROR,
        description=empty or None,
        metadata=md,
    )


def _allowed(snapshots: SnapshotSource, key: str) -> bool:
    return bool(snapshots.config(key).get("allow_empty_output"))


@dg.asset_check(asset=abstracts, blocking=True, partitions_def=snapshot_partitions)
def abstracts_ids_unique_and_derived(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.AssetCheckResult:
    """Ids are unique and equal the 24-hex SHA-256 prefix of the title; some abstract is kept when
    the dump had records (else it fails, or warns where snapshot.json allows empty output)."""
    key = context.partition_key
    table = store.read(key, "abstracts")
    failures = [("duplicate", i) for i in invariants.duplicate_ids(table)]
    failures += [("id_not_sha256_of_title", i, t) for i, t in invariants.ids_not_matching_titles(table)]
    records = table.num_rows + _dropped(store, key, "abstracts")
    allowed = _allowed(snapshots, key)
    empty = empty_output("abstracts", records, table.num_rows, allowed, "dump records")
    return _result(failures, f"{table.num_rows} rows", empty, allowed)


def _dropped(store: ArtifactStore, key: str, stage: str) -> int:
    """Candidates a stage's ledger dropped (0 without a ledger)."""
    path = store.root / key / "_ledger" / f"{stage}.parquet"
    if not path.is_file():
        return 0
    verdicts = store.read(key, "_ledger", stage).column("verdict").to_pylist()
    return sum(v != "kept" for v in verdicts)


@dg.asset_check(asset=abstracts, blocking=True, partitions_def=snapshot_partitions)
def abstracts_one_split_per_document(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """No document appears in two splits."""
    table = store.read(context.partition_key, "abstracts")
    failures = [(i, ",".join(s)) for i, s in invariants.documents_in_several_splits(table)]
    return _result(failures, f"{table.num_rows} rows")


@dg.asset_check(asset=link_graph, blocking=True, partitions_def=snapshot_partitions)
def link_graph_edges_within_split(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.AssetCheckResult:
    """Every edge's endpoints exist in abstracts and share the edge's split; some edge exists when
    abstracts have links (else it fails, or warns where snapshot.json allows empty output)."""
    key = context.partition_key
    graph = store.read(key, "link_graph")
    corpus = store.read(key, "abstracts")
    failures = invariants.edges_outside_corpus_split(graph, corpus)
    ids = set(corpus.column("id").to_pylist())
    links = sum(  # links between two abstracts of the corpus: what edges are made of
        1 for row in corpus.column("links").to_pylist() for link in row or () if link.get("target_id") in ids
    )
    allowed = _allowed(snapshots, key)
    empty = empty_output("link_graph", links, graph.num_rows, allowed, "links between abstracts")
    return _result(failures, f"{graph.num_rows} edges", empty, allowed)


@dg.asset_check(asset=bridge_pairs, blocking=True, partitions_def=snapshot_partitions)
def bridge_pairs_follow_bridge_edges(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.AssetCheckResult:
    """Every pair (a, b) is a bridge edge a -> b of the link graph; some pair is drawn when the graph
    has bridge edges (else it fails, or warns where snapshot.json allows empty output)."""
    key = context.partition_key
    pairs = store.read(key, "bridge_pairs")
    graph = store.read(key, "link_graph")
    failures = invariants.pairs_without_edge(pairs, graph)
    bridge_edges = sum(bool(b) for b in graph.column("is_bridge").to_pylist()) if graph.num_rows else 0
    allowed = _allowed(snapshots, key)
    empty = empty_output("bridge_pairs", bridge_edges, pairs.num_rows, allowed, "bridge edges")
    return _result(failures, f"{pairs.num_rows} pairs", empty, allowed)


CORPUS_CHECKS = [
    abstracts_ids_unique_and_derived,
    abstracts_one_split_per_document,
    link_graph_edges_within_split,
    bridge_pairs_follow_bridge_edges,
]
