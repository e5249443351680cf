"""Near-duplicate removal and per-entity caps on the surviving questions (deterministic).

Questions are visited in a seeded order that depends only on their ids
(``item_uniform(seed, "caps", id)``), so which one of two near-duplicates stays,
or which two questions of a bridge entity stay, never depends on input order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ragsft_assets.ids import item_uniform
from ragsft_assets.multihop.normalize import normalize_text

MAX_PER_BRIDGE = 2
MAX_PER_SOURCE = 3
NEAR_DUP_JACCARD = 0.8
NEAR_DUPLICATE, BRIDGE_CAP, SOURCE_CAP = "near_duplicate", "bridge_cap", "source_cap"
CAP_REASONS = (NEAR_DUPLICATE, BRIDGE_CAP, SOURCE_CAP)


@dataclass(frozen=True, slots=True)
class CapCandidate:
    id: str
    question: str
    answer: str
    a_id: str
    b_id: str


def jaccard(x: frozenset[str], y: frozenset[str]) -> float:
    return len(x & y) / len(x | y) if x or y else 1.0


def apply_caps(
    candidates: Sequence[CapCandidate],
    seed: int,
    max_per_bridge: int = MAX_PER_BRIDGE,
    max_per_source: int = MAX_PER_SOURCE,
    near_dup_jaccard: float = NEAR_DUP_JACCARD,
) -> dict[str, str]:
    """Decide every candidate: id -> ``kept`` or the cap reason that dropped it.

    A question is a near duplicate of an already kept one when both have the same
    normalized answer and the Jaccard similarity of their normalized question word
    sets is at least ``near_dup_jaccard`` (comparing only within one answer keeps
    this linear in practice). Then at most ``max_per_bridge`` questions per bridge
    document b and ``max_per_source`` per source document a are kept.
    """
    ordered = sorted(candidates, key=lambda c: (item_uniform(seed, "caps", c.id), c.id))
    kept_by_answer: dict[str, list[frozenset[str]]] = {}
    per_bridge: Counter[str] = Counter()
    per_source: Counter[str] = Counter()
    decision: dict[str, str] = {}
    for c in ordered:
        words = frozenset(normalize_text(c.question).split())
        same_answer = kept_by_answer.setdefault(normalize_text(c.answer), [])
        if any(jaccard(words, other) >= near_dup_jaccard for other in same_answer):
            decision[c.id] = NEAR_DUPLICATE
        elif per_bridge[c.b_id] >= max_per_bridge:
            decision[c.id] = BRIDGE_CAP
        elif per_source[c.a_id] >= max_per_source:
            decision[c.id] = SOURCE_CAP
        else:
            decision[c.id] = "kept"
            same_answer.append(words)
            per_bridge[c.b_id] += 1
            per_source[c.a_id] += 1
    return dict(sorted(decision.items()))
