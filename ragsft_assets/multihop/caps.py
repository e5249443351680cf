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


def cap_order_key(seed: int, question_id: str) -> tuple[float, str]:
    """Where a question comes in the caps' seeded order (its id alone decides)."""
    return (item_uniform(seed, "caps", question_id), question_id)


class Caps:
    """The caps' greedy decisions, one candidate at a time, in :func:`cap_order_key` order.

    A question is a near duplicate of an already kept one when both have the same normalized
    answer and the Jaccard similarity of their normalized question word sets is at least
    ``near_dup_jaccard`` (comparing only within one answer keeps this linear in practice). Then at
    most ``max_per_bridge`` questions per bridge document b and ``max_per_source`` per source
    document a are kept. A candidate's decision depends only on the candidates before it in the
    order. ``position`` (the candidate's place in that order) lets a stream decide out of order
    (``defs/multihop/stream.py``): the near-duplicate test then looks only at kept questions
    placed before it, as in order; the caps count whatever was kept, so the stream decides a
    question only after every earlier one of its source and bridge documents.
    """

    def __init__(
        self,
        max_per_bridge: int = MAX_PER_BRIDGE,
        max_per_source: int = MAX_PER_SOURCE,
        near_dup_jaccard: float = NEAR_DUP_JACCARD,
    ) -> None:
        self.max_per_bridge, self.max_per_source = max_per_bridge, max_per_source
        self.near_dup_jaccard = near_dup_jaccard
        self._kept_by_answer: dict[str, list[tuple[int, frozenset[str]]]] = {}
        self._per_bridge: Counter[str] = Counter()
        self._per_source: Counter[str] = Counter()

    def decide(self, c: CapCandidate, position: int) -> str:
        """``kept`` or the cap reason that drops ``c``, at ``position`` in the seeded order."""
        words = frozenset(normalize_text(c.question).split())
        same_answer = self._kept_by_answer.setdefault(normalize_text(c.answer), [])
        if any(p < position and jaccard(words, other) >= self.near_dup_jaccard for p, other in same_answer):
            return NEAR_DUPLICATE
        if self._per_bridge[c.b_id] >= self.max_per_bridge:
            return BRIDGE_CAP
        if self._per_source[c.a_id] >= self.max_per_source:
            return SOURCE_CAP
        same_answer.append((position, words))
        self._per_bridge[c.b_id] += 1
        self._per_source[c.a_id] += 1
        return "kept"


def apply_caps(
    candidates: Sequence[CapCandidate],
    seed: int,
    max_per_bridge: int = MAX_PER_BRIDGE,
    max_per_source: int = MAX_PER_SOURCE,
    near_dup_jaccard: float = NEAR_DUP_JACCARD,
) -> dict[str, str]:
    """Decide every candidate (:class:`Caps`, in the seeded order): id -> ``kept`` or the cap
    reason that dropped it."""
    caps = Caps(max_per_bridge, max_per_source, near_dup_jaccard)
    ordered = sorted(candidates, key=lambda c: cap_order_key(seed, c.id))
    return dict(sorted((c.id, caps.decide(c, i)) for i, c in enumerate(ordered)))
