"""The closing summary of a run, from the partition's decision ledger (DuckDB; Dagster-free).

One funnel per family (ledger ``product``), for instance::

    multihop  72 draft slots -> 43 drafts (29 generation_missing) -> 0 past the checks (43 answer_not_in_b)

then the reason that dropped the most candidates (of the question families, when there are any:
the corpus stage drops by design), why the release holds only the corpus config
when no question got through, and one real ``ragsft explain`` command for a dropped candidate.
Every number names what it counts: ``UNITS`` says what one row of each asset is, so that a line
never calls 43 dropped candidates and 7 audit measures both "rows".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ragsft_assets import published_configs
from ragsft_assets.release.decisions import all_rows_sql, ledger_files, stage_rank_sql

# What one row of each asset is (the console's stage lines): one thing per word.
UNITS: dict[str, str] = {
    "snapshot_files": "dump files",
    "abstracts": "abstracts",
    "link_graph": "link edges",
    "bridge_pairs": "bridge pairs",
    "question_drafts": "draft slots",
    "question_checks": "checked drafts",
    "distractors": "questions given distractors",
    "ablation_verdicts": "ablation replies",
    "multihop_questions": "questions",
    "criteria_annotation": "annotated questions",
    "first_hop": "first-hop replies",
    "bridge_judge": "bridge-judge replies",
    "mechanical_rules": "rule verdicts",
    "language_judge": "language-judge replies",
    "multihop_audit": "audit measures",
    "rag_prompts": "prompts",
    "rag_responses": "responses",
    "rag_verdicts": "verdicts",
    "publishability_score": "publishability replies",
    "descriptor_check": "descriptor-check replies",
    "release": "rows shipped",
    **{c.asset: c.unit for c in published_configs.configs()},  # what one row of each config is
}

# (what enters a stage, what its kept candidates are called), for the funnel lines.
STAGE_WORDS: dict[str, tuple[str, str]] = {
    "abstracts": ("records", "abstracts"),
    "link_graph": ("links", "link edges"),
    "bridge_pairs": ("edges", "bridge pairs"),
    "question_drafts": ("draft slots", "drafts"),
    "question_checks": ("drafts", "past the checks"),
    "distractors": ("questions", "with distractors"),
    "ablation_verdicts": ("questions", "past the ablations"),
    "multihop_questions": ("questions", "questions"),
    "rag_prompts": ("questions", "prompts"),
    "rag_responses": ("prompts", "responses"),
    "rag_verdicts": ("responses", "past the verdicts"),
    "rag_sft": ("examples", "SFT examples"),
}

CORPUS_CONFIG = "corpus"
SMALL_MODEL_NOTE = "expected with a 135M model (the embedded SmolLM2-135M-Instruct); see 'Why so few questions' in the README"


@dataclass(frozen=True, slots=True)
class StageCount:
    stage: str
    entered: int  # candidates the stage decided
    kept: int
    dropped: tuple[tuple[str, int], ...]  # (reason, count), most first


@dataclass(slots=True)
class RunSummary:
    partition: str
    funnels: dict[str, list[StageCount]] = field(default_factory=dict)
    top_reason: tuple[str, str, int] | None = None  # (stage, reason, candidates)
    example: tuple[str, str, str] | None = None  # (candidate id, stage, reason) of a dropped candidate
    released_configs: list[str] = field(default_factory=list)


def read_summary(assets_root: Path, partition: str, released_configs: list[str] | None = None) -> RunSummary:
    """The funnels of ``partition``'s ledger, its most frequent drop and one dropped candidate."""
    summary = RunSummary(partition, released_configs=sorted(released_configs or []))
    files = ledger_files(assets_root, partition)
    if not files:
        return summary
    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW l AS {all_rows_sql(files)}")
        rows = con.execute(
            f"""SELECT product, stage, count(DISTINCT candidate_id),
                       count(DISTINCT candidate_id) FILTER (WHERE verdict = 'kept')
                FROM l GROUP BY 1, 2 ORDER BY 1, min({stage_rank_sql()}), 2"""
        ).fetchall()
        drops = con.execute(
            """SELECT product, stage, coalesce(nullif(reason, ''), verdict), count(DISTINCT candidate_id)
               FROM l WHERE verdict <> 'kept' GROUP BY 1, 2, 3 ORDER BY 4 DESC, 3"""
        ).fetchall()
        by_stage: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for product, stage, reason, n in drops:
            by_stage.setdefault((product, stage), []).append((reason, int(n)))
        for product, stage, entered, kept in rows:
            summary.funnels.setdefault(product, []).append(
                StageCount(stage, int(entered), int(kept), tuple(by_stage.get((product, stage), ())))
            )
        # The question families' drops first: the corpus stage's (pairs not drawn at the demo's
        # size, edges of enumerations) are by design and say nothing of what the model wrote.
        ranked = [d for d in drops if d[0] != CORPUS_CONFIG] or drops
        if ranked:
            product, stage, reason, n = ranked[0]
            summary.top_reason = (stage, reason, int(n))
            example = con.execute(
                """SELECT candidate_id FROM l WHERE product = $p AND stage = $s
                   AND coalesce(nullif(reason, ''), verdict) = $r AND verdict <> 'kept'
                   ORDER BY candidate_id LIMIT 1""",
                {"p": product, "s": stage, "r": reason},
            ).fetchone()
            if example:
                summary.example = (example[0], stage, reason)
    finally:
        con.close()
    return summary


def _reasons(dropped: tuple[tuple[str, int], ...], most: int = 3) -> str:
    shown = [f"{n} {reason}" for reason, n in dropped[:most]]
    rest = sum(n for _, n in dropped[most:])
    if rest:
        shown.append(f"{rest} more")
    return f" ({', '.join(shown)})" if shown else ""


def funnel_segments(stages: list[StageCount]) -> list[str]:
    """The funnel of one family, one segment per chain of stages that decide the same candidates.

    A stage whose candidates are the previous stage's kept ones continues the chain
    (``72 draft slots -> 43 drafts (29 generation_missing) -> 0 past the checks (43 ...)``); one
    that decides other things (link edges after abstracts) starts a new segment.
    """
    segments: list[str] = []
    previous_kept: int | None = None
    for s in stages:
        entering, kept_word = STAGE_WORDS.get(s.stage, ("candidates", f"kept by {s.stage}"))
        kept = f"{s.kept:,} {kept_word}{_reasons(s.dropped)}"
        if segments and s.entered == previous_kept:
            segments[-1] += f" -> {kept}"
        else:
            segments.append(f"{s.entered:,} {entering} -> {kept}")
        previous_kept = s.kept
    return segments


def funnel_line(stages: list[StageCount]) -> str:
    """:func:`funnel_segments` on one line, ``; ``-separated."""
    return "; ".join(funnel_segments(stages))


def summary_lines(summary: RunSummary, small_model: bool = False, cli: str = "ragsft") -> list[str]:
    """The summary as console lines: funnels aligned by family, then what to read next."""
    lines = ["funnel (from the decision ledger):"]
    if not summary.funnels:
        return [*lines, "  (no ledger rows: no stage decided a candidate)"]
    width = max(len(p) for p in summary.funnels)
    for product, stages in summary.funnels.items():
        for i, segment in enumerate(funnel_segments(stages)):  # long families: one line per segment
            lines.append(f"  {product if i == 0 else '':<{width}}  {segment}")
    if summary.top_reason:
        stage, reason, n = summary.top_reason
        lines.append(f"most candidates were dropped by {stage}: {reason} ({n})")
    question_families = [p for p in summary.funnels if p != CORPUS_CONFIG]
    if summary.released_configs == [CORPUS_CONFIG] and question_families:
        stopped = [
            f"{p} at {next(s.stage for s in st if s.kept == 0)}"
            for p, st in summary.funnels.items()
            if p != CORPUS_CONFIG and any(s.kept == 0 for s in st)
        ]
        why = (
            f"no candidate got through ({', '.join(stopped)})" if stopped else "no question config was built"
        )
        lines.append(f"the release holds only the {CORPUS_CONFIG} config: {why}")
        if small_model:
            lines.append(f"  {SMALL_MODEL_NOTE}")
    if summary.example:
        cid, stage, reason = summary.example
        lines.append(
            f"why one was dropped ({stage}, {reason}): {cli} explain {cid} --partition {summary.partition}"
        )
    return lines


def reason_totals(summary: RunSummary) -> Counter:
    """Dropped candidates per reason over every family (what the README's figures quote)."""
    totals: Counter = Counter()
    for stages in summary.funnels.values():
        for s in stages:
            for reason, n in s.dropped:
                totals[reason] += n
    return totals
