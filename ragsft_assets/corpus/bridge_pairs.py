"""The ``bridge_pairs`` table: seeded, reproducible draws of (source a, bridge b) pairs from the graph.

A pair is one (a, b) with an edge a -> b into the bridge set; when a cites b in several sentences the
first sentence (and its alias) is the pair's. Pairs are drawn bridge first, as in Algorithm 1 of the
HotpotQA paper (the bridge branch): the bridge b is drawn from the bridge set, then the source a among
the articles whose abstract links to b. Drawing uniformly over edges instead would over-weight the
popular bridges (a bridge cited by 50 sources would come 50 times as often as one cited once).

Concretely, without replacement and in rounds: every bridge gets a uniform draw from (seed, stage,
bridge id) and every pair one from (seed, stage, pair id); a bridge's sources are ranked by their
draw, and the pairs are ordered by (rank of the source within its bridge, the bridge's draw). Round 1
takes one source of every bridge in the bridges' drawn order, round 2 a second source of the bridges
that have one, and so on. The first ``max_pairs`` pairs of that order are kept (all when ``max_pairs``
is None): the same graph and seed give the same pairs, byte for byte, and a larger ``max_pairs`` only
adds pairs. Draws never depend on processing order.

The draw is made once, here: each pair's ``draw`` column is its position in that order (0 first).
Downstream stages that take fewer pairs (``question_drafts``' ``max_pairs``) take the first ones of
this order (:func:`first_drawn`) and never draw again, so Algorithm 1 holds whatever the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ragsft_assets.arrow_schemas import strings
from ragsft_assets.ids import DEFAULT_SEED, derived_id, item_uniform

STAGE = "bridge_pairs"
NOT_DRAWN = "not_drawn"

BRIDGE_PAIRS_SCHEMA = pa.schema(
    [
        *strings("id", "a_id", "a_title", "b_id", "b_title", "alias"),
        ("a_sentence", pa.int32()),
        ("split", pa.string()),
        ("draw", pa.int64()),  # position in the seeded bridge-first order (0 = drawn first)
    ]
)


@dataclass(frozen=True, slots=True)
class BridgePairsConfig:
    seed: int = DEFAULT_SEED
    max_pairs: int | None = None


def pair_key(a_id: str, b_id: str) -> str:
    """The id of the pair (a, b)."""
    return derived_id("bridge_pair", a_id, b_id)


def draw_bridge_pairs(graph: pa.Table, cfg: BridgePairsConfig) -> tuple[pa.Table, dict[str, int], list[str]]:
    """Draw pairs from the bridge edges of ``graph``.

    Returns:
        The pairs sorted by id, a funnel (``bridge_edges``, ``bridges``, ``pairs``, ``not_drawn``,
        ``drawn``) and the ids of the pairs that were not drawn.
    """
    bridge = graph.filter(graph.column("is_bridge")) if graph.num_rows else graph
    rows = bridge.select(
        ["source_id", "source_title", "target_id", "target_title", "alias", "sentence", "split"]
    )
    first: dict[tuple[str, str], tuple] = {}
    for r in zip(*(c.to_pylist() for c in rows.columns), strict=True):
        key = (r[0], r[2])
        if key not in first or r[5] < first[key][5]:
            first[key] = r
    by_bridge: dict[str, list[tuple[float, str, tuple]]] = {}
    for (a, b), r in first.items():
        pid = pair_key(a, b)
        by_bridge.setdefault(b, []).append((item_uniform(cfg.seed, STAGE, pid), pid, r))
    pairs = []
    for b, sources in by_bridge.items():
        bridge_draw = item_uniform(cfg.seed, STAGE, "bridge:" + b)
        sources.sort(key=lambda x: (x[0], x[1]))
        for rank, (_, pid, r) in enumerate(sources):
            pairs.append(((rank, bridge_draw, b), pid, r))
    pairs.sort(key=lambda x: (x[0], x[1]))
    limit = len(pairs) if cfg.max_pairs is None else max(0, cfg.max_pairs)
    ranked = [(draw, *p) for draw, p in enumerate(pairs)]
    drawn, rest = ranked[:limit], ranked[limit:]
    drawn.sort(key=lambda x: x[2])
    cols = {
        "id": [p[2] for p in drawn],
        "a_id": [p[3][0] for p in drawn],
        "a_title": [p[3][1] for p in drawn],
        "b_id": [p[3][2] for p in drawn],
        "b_title": [p[3][3] for p in drawn],
        "alias": [p[3][4] for p in drawn],
        "a_sentence": [p[3][5] for p in drawn],
        "split": [p[3][6] for p in drawn],
        "draw": [p[0] for p in drawn],
    }
    funnel = {
        "bridge_edges": bridge.num_rows,
        "bridges": len(by_bridge),
        "pairs": len(pairs),
        NOT_DRAWN: len(rest),
        "drawn": len(drawn),
    }
    return pa.table(cols, schema=BRIDGE_PAIRS_SCHEMA), funnel, sorted(p[2] for p in rest)


def first_drawn(pairs: pa.Table, n: int | None, usable: pa.Array | None = None) -> pa.Table:
    """The first ``n`` pairs of the seeded draw order (all when ``n`` is None), sorted by id.

    ``usable`` (booleans, one per row) leaves out pairs a stage cannot use (e.g. a document missing
    from the abstracts) before counting. No new draw: the order is the ``draw`` column.

    Raises:
        ValueError: a table without the ``draw`` column (written before the draw was recorded):
            re-materialize ``bridge_pairs``.
    """
    if "draw" not in pairs.column_names:
        raise ValueError(
            "bridge_pairs has no `draw` column (written by an older version): re-materialize bridge_pairs"
        )
    if usable is not None:
        pairs = pairs.filter(usable)
    ordered = pairs.sort_by([("draw", "ascending"), ("id", "ascending")])
    if n is not None:
        ordered = ordered.slice(0, max(0, n))
    return ordered.sort_by("id")
