"""Blocking asset checks on ``multihop_questions``: the five release invariants, one check each.

The checks are declared as ``check_specs`` of the asset and their results are
yielded by the materialization itself: that works for partitioned assets on every
Dagster version (separate partitioned asset checks are still a preview feature).
A failing check has ERROR severity and is blocking, so nothing downstream of the
release runs on data that breaks an invariant.

Empty data is no pass: when the production had input (draft slots) and released no question, every
invariant holds vacuously, so each check fails instead (ERROR, blocking) and says so; where the
recipe or the snapshot allows empty output (``allow_empty_output``: the sample's quick demo on a
tiny model, whose questions rarely survive), each warns (WARN, nothing blocked) and says which.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from ragsft_assets.defs.check_results import check_result
from ragsft_assets.multihop import audit

ASSET = "multihop_questions"
EMPTY = (
    " With no question released from a production that had drafts, it fails (ERROR), or warns where "
    "the recipe or snapshot.json allows empty output (allow_empty_output)."
)
DESCRIPTIONS = {
    "context_size": "Every context holds 2 golds + the distractors stage's distractors_k paragraphs "
    "(the card: 2 + 8 = 10).",
    "no_duplicate_document": "No document appears twice in one context.",
    "golds_present": "Both gold documents are in the context and every supporting sentence exists.",
    "answer_in_no_distractor": "The answer occurs in no distractor paragraph (normalized match).",
    "no_document_shared_between_splits": "No document appears in the contexts of two splits.",
}

invariant_check_specs = [
    dg.AssetCheckSpec(name, asset=ASSET, description=DESCRIPTIONS[name] + EMPTY, blocking=True)
    for name in audit.INVARIANTS
]


def empty_output(stage: str, inputs: int, outputs: int, allowed: bool, what: str = "input items") -> str:
    """Why a check over ``stage``'s output must not pass ("" when it may): the stage had ``inputs``
    and produced nothing. Says whether the recipe allows it (a warning) or not (a failure)."""
    if inputs <= 0 or outputs > 0:
        return ""
    verdict = (
        "allowed by allow_empty_output (a warning)"
        if allowed
        else "not allowed: see the stage's funnel and ledger for where every candidate was dropped"
    )
    return f"{stage} produced no row from {inputs} {what}: {verdict}"


def invariant_check_results(
    rows: Sequence[Mapping[str, Any]],
    context_size: int = audit.CONTEXT_SIZE,
    *,
    inputs: int = 0,
    allow_empty: bool = False,
) -> list[dg.AssetCheckResult]:
    """One result per invariant over the released rows (HF layout, with ``split``).

    ``inputs`` are the production's draft slots: with some and no row, no invariant passes
    vacuously: each fails (ERROR), or warns (WARN) when ``allow_empty`` (the recipe's or the
    snapshot's ``allow_empty_output``), its metadata saying which.
    """
    empty = empty_output(ASSET, inputs, len(rows), allow_empty, "draft slots")
    out = []
    for r in audit.check_invariants(rows, context_size):
        md: dict[str, Any] = {
            "questions": len(rows),
            "examples": ", ".join(r.examples),
            "context_size": context_size,
        }
        if empty:
            md.update({"empty_output": empty, "allow_empty_output": allow_empty, "inputs": inputs})
        out.append(
            check_result(
                asset_key=ASSET,
                check_name=r.name,
                passed=r.passed and not empty,
                failures=r.failures,
                severity=dg.AssetCheckSeverity.WARN if empty and allow_empty else dg.AssetCheckSeverity.ERROR,
                description=empty or None,
                metadata=md,
            )
        )
    return out
