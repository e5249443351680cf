"""The multihop funnel, from pairs drawn to questions kept, as one ordered mapping.

Every number comes from the stage tables, so the funnel adds up by construction:
generated = slots - unreadable - missing; judged = generated - dropped before
the judge (local checks, too few distractors, near duplicates, caps, judge limit);
kept = judged - rejected by the judge.
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
    n_ablations: int = 4,
    card_calls_per_judged: float = CARD_CALLS_PER_JUDGED,
) -> dict[str, int | float]:
    """The funnel table: counts per step and per rejection reason, judge calls, calls per judged question.

    The near-duplicate removal and the caps run before the judge (their drops are rows of the
    ``distractors`` table), so ``dropped before judge`` holds them, as the card's arithmetic does.
    Judge calls are also given per ablation round (``judge calls: ab`` ...), the card's table rows.
    """
    status = Counter(drafts["status"].to_pylist())
    pairs = len(set(drafts["pair_id"].to_pylist()))
    f: dict[str, int | float] = {"pairs drawn": pairs, "draft slots": drafts.num_rows}
    f["generation unreadable"] = status.get("unreadable", 0)
    f["generation missing"] = status.get("missing", 0)
    f["questions generated"] = status.get("ok", 0)
    for reason, n in reason_counts(checks, CHECK_REASONS).items():
        f[f"dropped: {reason}"] = n
    dist_reasons = Counter(distractors["reason"].to_pylist())
    f[f"dropped: {TOO_FEW}"] = dist_reasons.get(TOO_FEW, 0)
    for reason in CAP_REASONS:
        f[f"dropped: {reason}"] = dist_reasons.get(reason, 0)
    outcomes = outcomes_from_verdicts(verdicts)
    reached = sum(1 for v in distractors["verdict"].to_pylist() if v == "kept")
    f[f"dropped: {OVER_LIMIT}"] = reached - len(outcomes)
    f["dropped before judge"] = f["questions generated"] - len(outcomes)
    f["judged"] = len(outcomes)
    rejected = Counter(reason for verdict, reason in outcomes.values() if verdict != "kept")
    for reason in REJECTION_REASONS:
        f[f"rejected: {reason}"] = rejected.get(reason, 0)
    f["kept"] = sum(1 for verdict, _ in outcomes.values() if verdict == "kept")
    by_round = round_calls(verdicts)
    for kind, n in by_round.items():
        f[f"judge calls: {kind}"] = n
    calls = judge_call_count(verdicts)
    f["judge calls"] = calls
    f["plain 4-call run calls"] = n_ablations * len(outcomes)
    f["judge calls per judged question"] = round(calls / len(outcomes), 3) if outcomes else 0.0
    f["card judge calls per judged question"] = card_calls_per_judged
    return f


def round_calls(verdicts: pa.Table) -> dict[str, int]:
    """Judge calls per ablation, in the order the rounds ran (calls served by another question's
    identical prompt are not counted)."""
    rows = verdicts.select(["ablation", "round", "shared"]).to_pylist()
    order = sorted({(r["round"], r["ablation"]) for r in rows})
    calls = Counter(r["ablation"] for r in rows if not r["shared"])
    return {kind: calls.get(kind, 0) for _, kind in order}


# The HotpotQA-fr card's funnel (seed 001): its table's rows and numbers ("Paires tirées 200 000",
# "Questions générées 324 944", "Écartées avant le juge 43 722", "Jugées 281 119", "Retenues
# 65 565", "Appels de juge 590 596"), beside which the generated card shows a run's. The rounds'
# calls and the rejections are the card's sentence "l'ablation A+B qui échoue (136 975), B seul qui
# suffit à répondre (48 674), [...] et A seul qui suffit à répondre (25 607)". derived: each round
# judges what the one before passed, 281,119 - 136,975 = 144,144 (B alone), 144,144 - 48,674 =
# 95,470 (A alone), 95,470 - 25,607 = 69,863 (no document), and 281,119 + 144,144 + 95,470 +
# 69,863 = 590,596, the card's total. The card's 32,900 cap drops are inside the 43,722 questions
# removed before the judge (derived: 281,119 + 43,722 = 324,944).
CARD_FUNNEL: tuple[tuple[str, str | tuple[str, ...], int | float | None], ...] = (
    ("pairs drawn", "pairs drawn", 200_000),
    ("questions generated", "questions generated", 324_944),
    ("removed before the judge", "dropped before judge", 43_722),
    ("of which per-bridge and per-source caps", ("dropped: bridge_cap", "dropped: source_cap"), 32_900),
    ("of which near duplicates", "dropped: near_duplicate", None),
    ("judged", "judged", 281_119),
    ("judge calls, A+B", "judge calls: ab", 281_119),
    ("judge calls, B alone", "judge calls: b", 144_144),
    ("judge calls, A alone", "judge calls: a", 95_470),
    ("judge calls, no document", "judge calls: none", 69_863),
    ("judge calls", "judge calls", 590_596),
    ("rejected: A+B fails", "rejected: ab_fails", 136_975),
    ("rejected: B alone suffices", "rejected: b_alone_suffices", 48_674),
    ("rejected: A alone suffices", "rejected: a_alone_suffices", 25_607),
    ("judge calls per judged question", "judge calls per judged question", CARD_CALLS_PER_JUDGED),
    ("kept", "kept", 65_565),
)


def _number(v: int | float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else f"{v:,}"


def card_rows(funnel: Mapping[str, int | float]) -> list[tuple[str, str, str]]:
    """The card's funnel rows ``(row, this run, the card)`` from a :func:`build_funnel` mapping,
    numbers written as the card writes them (``590,596``, ``2.10``; ``-`` where the card gives none)."""
    out: list[tuple[str, str, str]] = []
    for label, keys, card in CARD_FUNNEL:
        value = sum(funnel.get(k, 0) for k in keys) if isinstance(keys, tuple) else funnel.get(keys, 0)
        out.append((label, _number(value), _number(card)))
    return out
