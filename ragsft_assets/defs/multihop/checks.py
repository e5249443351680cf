"""Blocking asset checks on ``multihop_questions``: the five release invariants, one check each.

The checks are declared as ``check_specs`` of the asset and their results are
yielded by the materialization itself: that works for partitioned assets on every
Dagster version (separate partitioned asset checks are still a preview feature).
A failing check has ERROR severity and is blocking, so nothing downstream of the
release runs on data that breaks an invariant.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from ragsft_assets.multihop import audit

ASSET = "multihop_questions"
DESCRIPTIONS = {
    "context_size": "Every context holds 10 paragraphs (2 golds + 8 distractors).",
    "no_duplicate_document": "No document appears twice in one context.",
    "golds_present": "Both gold documents are in the context and every supporting sentence exists.",
    "answer_in_no_distractor": "The answer occurs in no distractor paragraph (normalized match).",
    "no_document_shared_between_splits": "No document appears in the contexts of two splits.",
}

invariant_check_specs = [
    dg.AssetCheckSpec(name, asset=ASSET, description=DESCRIPTIONS[name], blocking=True)
    for name in audit.INVARIANTS
]


def invariant_check_results(
    rows: Sequence[Mapping[str, Any]], context_size: int = audit.CONTEXT_SIZE
) -> list[dg.AssetCheckResult]:
    """One result per invariant over the released rows (HF layout, with ``split``)."""
    return [
        dg.AssetCheckResult(
            asset_key=ASSET,
            check_name=r.name,
            passed=r.passed,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"questions": len(rows), "failures": r.failures, "examples": ", ".join(r.examples)},
        )
        for r in audit.check_invariants(rows, context_size)
    ]
