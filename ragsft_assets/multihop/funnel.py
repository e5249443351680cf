"""The multihop funnel, from pairs drawn to questions kept, as one ordered mapping.

Every number comes from the stage tables, so the funnel adds up by construction:
generated = slots - unreadable - missing; judged = generated - dropped before
the judge; kept = judged - rejected by the judge - dropped by the caps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pyarrow as pa

from ragsft_assets.multihop.ablations import (
    CARD_CALLS_PER_JUDGED,
    REJECTION_REASONS,
    judge_call_count,
    outcomes_from_verdicts,
)
from ragsft_assets.multihop.caps import CAP_REASONS
from ragsft_assets.multihop.distractors import TOO_FEW
from ragsft_assets.multihop.question_checks import REASONS as CHECK_REASONS
from ragsft_assets.multihop.question_checks import reason_counts

OVER_LIMIT = "over_judge_limit"


def build_funnel(
    drafts: pa.Table,
    checks: pa.Table,
    distractors: pa.Table,
    verdicts: pa.Table,
    caps: Mapping[str, str],
    n_ablations: int = 4,
) -> dict[str, int | float]:
    """The funnel table: counts per step and per rejection reason, judge calls, calls per judged question."""
    status = Counter(drafts["status"].to_pylist())
    pairs = len(set(drafts["pair_id"].to_pylist()))
    f: dict[str, int | float] = {"pairs drawn": pairs, "draft slots": drafts.num_rows}
    f["generation unreadable"] = status.get("unreadable", 0)
    f["generation missing"] = status.get("missing", 0)
    f["questions generated"] = status.get("ok", 0)
    for reason, n in reason_counts(checks, CHECK_REASONS).items():
        f[f"dropped: {reason}"] = n
    dist_verdicts = Counter(distractors["reason"].to_pylist())
    f[f"dropped: {TOO_FEW}"] = dist_verdicts.get(TOO_FEW, 0)
    outcomes = outcomes_from_verdicts(verdicts)
    reached = sum(1 for v in distractors["verdict"].to_pylist() if v == "kept")
    f[f"dropped: {OVER_LIMIT}"] = reached - len(outcomes)
    f["dropped before judge"] = f["questions generated"] - len(outcomes)
    f["judged"] = len(outcomes)
    rejected = Counter(reason for verdict, reason in outcomes.values() if verdict != "kept")
    for reason in REJECTION_REASONS:
        f[f"rejected: {reason}"] = rejected.get(reason, 0)
    f["passed ablations"] = sum(1 for verdict, _ in outcomes.values() if verdict == "kept")
    cap_counts = Counter(caps.values())
    for reason in CAP_REASONS:
        f[f"dropped: {reason}"] = cap_counts.get(reason, 0)
    f["kept"] = cap_counts.get("kept", 0)
    calls = judge_call_count(verdicts)
    f["judge calls"] = calls
    f["plain 4-call run calls"] = n_ablations * len(outcomes)
    f["judge calls per judged question"] = round(calls / len(outcomes), 3) if outcomes else 0.0
    f["card judge calls per judged question"] = CARD_CALLS_PER_JUDGED
    return f
