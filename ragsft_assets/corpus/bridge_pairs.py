"""The ``bridge_pairs`` table: seeded, reproducible draws of (source a, bridge b) pairs from the graph.

A pair is one (a, b) with an edge a -> b into the bridge set; when a cites b in several sentences the
first sentence (and its alias) is the pair's. Each pair gets a uniform draw from (seed, stage, pair id),
never from processing order; the ``max_pairs`` pairs with the smallest draws are kept (all when
``max_pairs`` is None), so the same graph and seed give the same pairs, byte for byte, and a larger
``max_pairs`` only adds pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ragsft_assets.ids import DEFAULT_SEED, derived_id, item_uniform

STAGE = "bridge_pairs"
NOT_DRAWN = "not_drawn"

BRIDGE_PAIRS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("a_id", pa.string()),
        ("a_title", pa.string()),
        ("b_id", pa.string()),
        ("b_title", pa.string()),
        ("alias", pa.string()),
        ("a_sentence", pa.int32()),
        ("split", pa.string()),
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
        The pairs sorted by id, a funnel (``bridge_edges``, ``pairs``, ``not_drawn``, ``drawn``) and
        the ids of the pairs that were not drawn.
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
    pairs = []
    for (a, b), r in first.items():
        pid = pair_key(a, b)
        pairs.append((item_uniform(cfg.seed, STAGE, pid), pid, r))
    pairs.sort(key=lambda x: (x[0], x[1]))
    limit = len(pairs) if cfg.max_pairs is None else max(0, cfg.max_pairs)
    drawn, rest = pairs[:limit], pairs[limit:]
    drawn.sort(key=lambda x: x[1])
    cols = {
        "id": [p[1] for p in drawn],
        "a_id": [p[2][0] for p in drawn],
        "a_title": [p[2][1] for p in drawn],
        "b_id": [p[2][2] for p in drawn],
        "b_title": [p[2][3] for p in drawn],
        "alias": [p[2][4] for p in drawn],
        "a_sentence": [p[2][5] for p in drawn],
        "split": [p[2][6] for p in drawn],
    }
    funnel = {"bridge_edges": bridge.num_rows, "pairs": len(pairs), NOT_DRAWN: len(rest), "drawn": len(drawn)}
    return pa.table(cols, schema=BRIDGE_PAIRS_SCHEMA), funnel, sorted(p[1] for p in rest)
