"""Asset checks of the corpus: one small check per invariant, blocking where downstream must stop."""

import dagster as dg

from ragsft_assets.corpus import invariants
from ragsft_assets.defs.corpus.assets import abstracts, bridge_pairs, link_graph
from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.resources.store import ArtifactStore

EXAMPLES = 5


def _result(failures: list, what: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not failures,
        metadata={
            "failures": len(failures),
            "examples": dg.MetadataValue.json(
                [list(f) if isinstance(f, tuple) else f for f in failures[:EXAMPLES]]
            ),
            "checked": what,
        },
    )


@dg.asset_check(asset=abstracts, blocking=True, partitions_def=snapshot_partitions)
def abstracts_ids_unique_and_derived(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Ids are unique and equal the 24-hex SHA-256 prefix of the title."""
    table = store.read(context.partition_key, "abstracts")
    failures = [("duplicate", i) for i in invariants.duplicate_ids(table)]
    failures += [("id_not_sha256_of_title", i, t) for i, t in invariants.ids_not_matching_titles(table)]
    return _result(failures, f"{table.num_rows} rows")


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
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Every edge's endpoints exist in abstracts and share the edge's split."""
    key = context.partition_key
    graph = store.read(key, "link_graph")
    failures = invariants.edges_outside_corpus_split(graph, store.read(key, "abstracts"))
    return _result(failures, f"{graph.num_rows} edges")


@dg.asset_check(asset=bridge_pairs, blocking=True, partitions_def=snapshot_partitions)
def bridge_pairs_follow_bridge_edges(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Every pair (a, b) is a bridge edge a -> b of the link graph."""
    key = context.partition_key
    pairs = store.read(key, "bridge_pairs")
    failures = invariants.pairs_without_edge(pairs, store.read(key, "link_graph"))
    return _result(failures, f"{pairs.num_rows} pairs")


CORPUS_CHECKS = [
    abstracts_ids_unique_and_derived,
    abstracts_one_split_per_document,
    link_graph_edges_within_split,
    bridge_pairs_follow_bridge_edges,
]
