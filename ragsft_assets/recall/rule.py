"""The decision rule of Recall Rewrite and its offline re-derivation over a ``-full`` config.

A knowledge-dependent claim is known iff at least ``j_e`` of its probing questions have at least
``k_e`` entailing answers, and at most ``j_c`` have at least ``k_c`` contradicting answers. The rule
is a pure function of the labels, so a ``-full`` record carries all it needs: no model call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENTAILS = "ENTAILS"
CONTRADICTS = "CONTRADICTS"
UNRELATED = "UNRELATED"
LABELS = (ENTAILS, CONTRADICTS, UNRELATED)


@dataclass(frozen=True)
class Thresholds:
    """``j_e/k_e/j_c/k_c``; the default is the paper's 2/1/2/1."""

    j_e: int = 2
    k_e: int = 1
    j_c: int = 2
    k_c: int = 1

    def __post_init__(self) -> None:
        for name in ("j_e", "k_e", "j_c", "k_c"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"threshold {name} must be a non-negative integer, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> Thresholds:
        """``"3/1/1/1"`` -> ``Thresholds(3, 1, 1, 1)``.

        Raises:
            ValueError: when the text is not four non-negative integers separated by ``/``.
        """
        parts = text.split("/")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"thresholds must be j_e/k_e/j_c/k_c, four non-negative integers: {text!r}")
        return cls(*(int(p) for p in parts))

    def __str__(self) -> str:
        return f"{self.j_e}/{self.k_e}/{self.j_c}/{self.k_c}"


DEFAULT_THRESHOLDS = Thresholds()


def is_known(per_question: Sequence[tuple[int, int]], t: Thresholds = Thresholds()) -> bool:
    """The rule on ``(entailing, contradicting)`` answer counts, one pair per probing question."""
    entailed = sum(1 for e, _ in per_question if e >= t.k_e)
    contradicted = sum(1 for _, c in per_question if c >= t.k_c)
    return entailed >= t.j_e and contradicted <= t.j_c


def question_counts(probes: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """``(entailing, contradicting)`` per probe of a ``-full`` claim; other labels count as neither."""
    out = []
    for probe in probes:
        labels = [a.get("label") for a in probe.get("answers") or []]
        out.append((labels.count(ENTAILS), labels.count(CONTRADICTS)))
    return out


@dataclass
class RuleCounts:
    """What ``ragsft recall rule`` prints: claims by verdict and records whose rewrite is stale."""

    records: int = 0
    claims: int = 0
    knowledge_dependent: int = 0
    known: int = 0
    unknown: int = 0
    rewrite_stale: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def rederive(record: Mapping[str, Any], t: Thresholds, counts: RuleCounts | None = None) -> dict[str, Any]:
    """One ``-full`` record under thresholds ``t``: ``is_known``/``is_removed`` per claim, counts,
    ``filter`` and ``rewrite_stale`` (its removed claims changed, so its rewrite needs the rewriter).

    Claims that are not knowledge-dependent are always kept (``is_removed`` false).
    """
    out = dict(record)
    before: set[str] = set()
    after: set[str] = set()
    claims = []
    known = unknown = kd = 0
    for i, claim in enumerate(record.get("claims") or []):
        claim = dict(claim)
        cid = str(claim.get("claim_id", i))
        if claim.get("is_removed"):
            before.add(cid)
        if claim.get("is_knowledge_dependent"):
            kd += 1
            verdict = is_known(question_counts(claim.get("probes") or []), t)
            claim["is_known"] = verdict
            claim["is_removed"] = not verdict
            known += verdict
            unknown += not verdict
            if not verdict:
                after.add(cid)
        else:
            claim["is_removed"] = False
        claims.append(claim)
    stale = before != after
    out.update(
        claims=claims,
        num_claims=len(claims),
        num_knowledge_dependent_claims=kd,
        num_known_claims=known,
        num_unknown_claims=unknown,
        filter=str(t),
        rewrite_stale=stale,
    )
    if counts is not None:
        counts.records += 1
        counts.claims += len(claims)
        counts.knowledge_dependent += kd
        counts.known += known
        counts.unknown += unknown
        counts.rewrite_stale += stale
    return out
