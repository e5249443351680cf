"""When a rewrite becomes the fixed refusal (Recall Rewrite stage 7), as a pure function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragsft_assets.recall.schema import REFUSAL

NOTHING_REMOVED = "nothing_removed"
REWRITER_SAYS_NOTHING_LEFT = "rewriter_nothing_substantive_left"
NO_FACT_LEFT = "no_known_or_independent_fact_left"
REWRITTEN = "rewritten"


@dataclass(frozen=True)
class ClaimState:
    """What the refusal rule needs of one claim."""

    is_knowledge_dependent: bool
    is_known: bool | None
    contains_specific_fact: bool  # the audit's checklist item, for claims kept without probing


@dataclass(frozen=True)
class Target:
    """The SFT target of one response and the counted reason it took that form."""

    response: str
    is_refusal: bool
    reason: str


def needs_rewriter(claims: Sequence[ClaimState]) -> bool:
    """A response with no unknown claim is kept as it is, with no rewriter call."""
    return any(c.is_knowledge_dependent and c.is_known is False for c in claims)


def decide_target(
    original: str,
    claims: Sequence[ClaimState],
    rewritten: str | None,
    rewriter_says_substantive: bool | None,
    *,
    refusal: str = REFUSAL,
) -> Target:
    """The default rule: refuse when the rewriter says nothing substantive is left, or when no
    known claim and no non-knowledge-dependent factual claim remains.

    Args:
        original: the gold response.
        claims: every claim of the response, with its verdict.
        rewritten: the rewriter's text (None when no rewrite was needed).
        rewriter_says_substantive: the rewriter's own flag (None when no rewrite was needed).
        refusal: the fixed refusal (the recipe's).
    """
    if not needs_rewriter(claims):
        return Target(original, False, NOTHING_REMOVED)
    if rewriter_says_substantive is False or not (rewritten or "").strip():
        return Target(refusal, True, REWRITER_SAYS_NOTHING_LEFT)
    left = any(
        (c.is_knowledge_dependent and c.is_known)
        or (not c.is_knowledge_dependent and c.contains_specific_fact)
        for c in claims
    )
    if not left:
        return Target(refusal, True, NO_FACT_LEFT)
    return Target(rewritten or "", False, REWRITTEN)
