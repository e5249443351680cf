"""Asset checks of the corpus: one small check per invariant, blocking where downstream must stop.

One style for every check of the project: a check is an ``AssetCheckSpec`` of its asset
(``check_specs``) and its result is returned by the materialization itself, as
``defs/multihop/checks.py`` does; no separate partitioned ``@asset_check`` (a Dagster preview
feature that warns at every load). The result is linked to the partition's materialization.
Check names are short: the asset's name is already their prefix in Dagster (``abstracts`` /
``ids_unique_and_derived``).

Empty data is no pass: a stage that had input and produced no row (abstracts from dump lines that
were all dropped, a link graph from abstracts with no edge, pairs from bridge edges with no pair)
fails its check, or warns where snapshot.json allows empty output (``allow_empty_output``), and
the check's description and metadata say which.
"""

from collections.abc import Callable

import dagster as dg

from ragsft_assets.corpus import invariants
from ragsft_assets.defs.check_results import FAILURES, check_result
from ragsft_assets.defs.multihop.checks import empty_output
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore

EXAMPLES = 5

Check = Callable[[ArtifactStore, SnapshotSource, str], dg.AssetCheckResult]


def _result(failures: list, what: str, empty: str = "", allowed: bool = False) -> dg.AssetCheckResult:
    md = {
        "examples": dg.MetadataValue.json(
            [list(f) if isinstance(f, tuple) else f for f in failures[:EXAMPLES]]
        ),
        "checked": what,
    }
    if empty:
        md.update({"empty_output": empty, "allow_empty_output": allowed})
    return check_result(
        passed=not failures and not empty,
        failures=len(failures),
        severity=dg.AssetCheckSeverity.WARN if empty and allowed else dg.AssetCheckSeverity.ERROR,
        description=empty or None,
        metadata=md,
    )


def _allowed(snapshots: SnapshotSource, key: str) -> bool:
    return bool(snapshots.config(key).get("allow_empty_output"))


def _dropped(store: ArtifactStore, key: str, stage: str) -> int:
    """Candidates a stage's ledger dropped (0 without a ledger)."""
    path = store.root / key / "_ledger" / f"{stage}.parquet"
    if not path.is_file():
        return 0
    verdicts = store.read(key, "_ledger", stage).column("verdict").to_pylist()
    return sum(v != "kept" for v in verdicts)


def ids_unique_and_derived(store: ArtifactStore, snapshots: SnapshotSource, key: str) -> dg.AssetCheckResult:
    """Ids are unique and equal the 24-hex SHA-256 prefix of the title; some abstract is kept when
    the dump had records (else it fails, or warns where snapshot.json allows empty output)."""
    table = store.read(key, "abstracts")
    failures = [("duplicate", i) for i in invariants.duplicate_ids(table)]
    failures += [("id_not_sha256_of_title", i, t) for i, t in invariants.ids_not_matching_titles(table)]
    records = table.num_rows + _dropped(store, key, "abstracts")
    allowed = _allowed(snapshots, key)
    empty = empty_output("abstracts", records, table.num_rows, allowed, "dump records")
    return _result(failures, f"{table.num_rows} rows", empty, allowed)


def one_split_per_document(store: ArtifactStore, snapshots: SnapshotSource, key: str) -> dg.AssetCheckResult:
    """No document appears in two splits."""
    table = store.read(key, "abstracts")
    failures = [(i, ",".join(s)) for i, s in invariants.documents_in_several_splits(table)]
    return _result(failures, f"{table.num_rows} rows")


def edges_within_split(store: ArtifactStore, snapshots: SnapshotSource, key: str) -> dg.AssetCheckResult:
    """Every edge's endpoints exist in abstracts and share the edge's split; some edge exists when
    abstracts have links (else it fails, or warns where snapshot.json allows empty output)."""
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


def follow_bridge_edges(store: ArtifactStore, snapshots: SnapshotSource, key: str) -> dg.AssetCheckResult:
    """Every pair (a, b) is a bridge edge a -> b of the link graph; some pair is drawn when the graph
    has bridge edges (else it fails, or warns where snapshot.json allows empty output)."""
    pairs = store.read(key, "bridge_pairs")
    graph = store.read(key, "link_graph")
    failures = invariants.pairs_without_edge(pairs, graph)
    bridge_edges = sum(bool(b) for b in graph.column("is_bridge").to_pylist()) if graph.num_rows else 0
    allowed = _allowed(snapshots, key)
    empty = empty_output("bridge_pairs", bridge_edges, pairs.num_rows, allowed, "bridge edges")
    return _result(failures, f"{pairs.num_rows} pairs", empty, allowed)


# asset -> its checks, in order; a check's name is its function's name
CHECKS: dict[str, tuple[Check, ...]] = {
    "abstracts": (ids_unique_and_derived, one_split_per_document),
    "link_graph": (edges_within_split,),
    "bridge_pairs": (follow_bridge_edges,),
}


def check_specs(asset: str) -> list[dg.AssetCheckSpec]:
    """The blocking checks of ``asset``, for its ``check_specs``."""
    return [
        dg.AssetCheckSpec(c.__name__, asset=asset, description=(c.__doc__ or "").strip(), blocking=True)
        for c in CHECKS[asset]
    ]


def check_results(
    asset: str, store: ArtifactStore, snapshots: SnapshotSource, key: str
) -> list[dg.AssetCheckResult]:
    """The results of ``asset``'s checks on partition ``key``, for its ``MaterializeResult``."""
    out = []
    for check in CHECKS[asset]:
        r = check(store, snapshots, key)
        out.append(
            check_result(
                asset_key=asset,
                check_name=check.__name__,
                passed=r.passed,
                failures=r.metadata[FAILURES].value,
                partition=key,
                severity=r.severity,
                description=r.description,
                metadata=r.metadata,
            )
        )
    return out
