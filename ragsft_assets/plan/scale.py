"""Stages whose keep rate depends on the run's size, not only on its items: the per-entity caps.

At most 2 questions per bridge and 3 per source (``multihop/caps.py``) bind rarely in a sample of
50 pairs and often on a whole snapshot, where many pairs share a bridge. The plan replays the
caps' own rule (``apply_caps``) on stand-in questions, once for the sample's pairs and once for
every pair of the partition, each pair drafting as many questions as a sampled pair did, and
scales the capping stage's keep rate by the ratio of the two.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragsft_assets.ids import item_uniform
from ragsft_assets.multihop.caps import BRIDGE_CAP, SOURCE_CAP, CapCandidate, apply_caps

CAP_REASONS = (BRIDGE_CAP, SOURCE_CAP)


def _kept_share(pairs: Sequence[tuple[str, str]], counts: Sequence[int], seed: int) -> float:
    candidates = [
        CapCandidate(f"{i}:{k}", f"q{i}:{k}", f"a{i}:{k}", a, b)  # distinct texts: no near duplicate
        for i, ((a, b), q) in enumerate(zip(pairs, counts, strict=True))
        for k in range(q)
    ]
    if not candidates:
        return 1.0
    decided = apply_caps(candidates, seed)
    return sum(v == "kept" for v in decided.values()) / len(candidates)


def cap_keep_factor(
    sample_pairs: Sequence[tuple[str, str]],
    sample_counts: Sequence[int],
    all_pairs: Sequence[tuple[str, str]],
    seed: int,
) -> float:
    """How much the caps' keep rate on every pair differs from the sample's (a multiplier).

    ``sample_pairs`` are the sample's ``(a_id, b_id)`` and ``sample_counts`` how many of each pair's
    questions reached the caps; every pair of ``all_pairs`` gets the count of a sampled pair drawn
    from the seed and its own position. 1.0 when the sample reached no cap stage.
    """
    return cap_keep_factors(sample_pairs, sample_counts, all_pairs, seed)[len(all_pairs)]


def cap_keep_factors(
    sample_pairs: Sequence[tuple[str, str]],
    sample_counts: Sequence[int],
    all_pairs: Sequence[tuple[str, str]],
    seed: int,
    runs: Sequence[int] = (),
) -> dict[int, float]:
    """:func:`cap_keep_factor` for a run of every pair of ``all_pairs`` and, for each size ``m`` of
    ``runs``, how much that run's caps keep against one of the first ``m`` pairs (a partial run's,
    whose questions the run caps again: a share of them it will not ask again). Keyed by size."""
    sizes = sorted({len(all_pairs), *(m for m in runs if 0 < m <= len(all_pairs))})
    if not sample_pairs or not any(sample_counts):
        return dict.fromkeys(sizes, 1.0)
    n = len(sample_counts)
    drawn = [
        sample_counts[min(n - 1, int(item_uniform(seed, "plan_caps", f"{i}") * n))]
        for i in range(len(all_pairs))
    ]
    full_share = _kept_share(all_pairs, drawn, seed)
    sample_share = _kept_share(sample_pairs, sample_counts, seed)
    out = {len(all_pairs): full_share / sample_share if sample_share > 0 else 1.0}
    for m in sizes[:-1]:
        share = _kept_share(all_pairs[:m], drawn[:m], seed)
        out[m] = full_share / share if share > 0 else 1.0
    return out
