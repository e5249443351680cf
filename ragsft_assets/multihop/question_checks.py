"""Deterministic checks on a question draft, each failure a counted reason.

Checks run in the fixed order of ``REASONS``; a draft is dropped for the first
reason it fails and every failing reason is kept in ``reasons``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ragsft_assets.arrow_schemas import STRING_LIST, strings
from ragsft_assets.multihop.generation import MAX_ANSWER_CHARS, MAX_ANSWER_WORDS, STATUS_OK, Doc
from ragsft_assets.multihop.normalize import contains_normalized, normalize_text, squeeze_spaces

REASONS = (
    "empty_question_or_answer",
    "answer_not_in_b",  # the answer is not verbatim in the gold (bridge) document b
    "question_names_bridge",  # the question gives away the bridge entity (title or alias)
    "answer_in_question",
    "support_out_of_bounds",
    "support_missing",  # no supporting sentence in a, or none in b
    "answer_too_long",  # more than 10 words or 70 characters
    "answer_enumeration",
    "answer_is_clause",
)

CHECKS_SCHEMA = pa.schema([*strings("id", "split", "verdict", "reason"), ("reasons", STRING_LIST)])

_CONJ_RE = re.compile(r"\b(and|or|et|ou)\b", re.IGNORECASE)
# Words that make an answer a sentence rather than an entity: subject pronouns, subordinators,
# and common finite verbs of English and French.
_CLAUSE_WORDS = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "does",
        "did",
        "will",
        "would",
        "can",
        "could",
        "because",
        "since",
        "which",
        "who",
        "that",
        "it",
        "he",
        "she",
        "they",
        "we",
        "est",
        "sont",
        "etait",
        "etaient",
        "fut",
        "ont",
        "avait",
        "sera",
        "parce",
        "qui",
        "que",
        "il",
        "elle",
        "ils",
        "elles",
        "nous",
    ]
)
_PAREN_RE = re.compile(r"\s*\([^)]*\)\s*$")


def bridge_names(b_title: str, alias: str | None) -> list[str]:
    """Normalized names of the bridge entity: the title, the title without its (disambiguation), the alias."""
    names = {normalize_text(b_title), normalize_text(_PAREN_RE.sub("", b_title))}
    if alias:
        names.add(normalize_text(alias))
    return sorted(n for n in names if len(n) >= 2)


def is_enumeration(answer: str) -> bool:
    """A list of items: a semicolon, two commas, or a comma with a conjunction ("X, Y and Z")."""
    return ";" in answer or answer.count(",") >= 2 or ("," in answer and bool(_CONJ_RE.search(answer)))


def is_clause(answer: str) -> bool:
    """A full clause rather than an entity: ends like a sentence, or carries a subject/finite verb word."""
    words = normalize_text(answer, drop_articles=False).split()
    if len(words) >= 4 and answer.rstrip().endswith((".", "!", "?")):
        return True
    return len(words) >= 3 and any(w in _CLAUSE_WORDS for w in words)


def check_draft(
    draft: Mapping[str, Any],
    a: Doc,
    b: Doc,
    max_words: int = MAX_ANSWER_WORDS,
    max_chars: int = MAX_ANSWER_CHARS,
) -> list[str]:
    """Every reason (in ``REASONS`` order) the draft fails; empty when it passes."""
    question = squeeze_spaces(draft.get("question") or "")
    answer = squeeze_spaces(draft.get("answer") or "")
    if not question or not answer:
        return ["empty_question_or_answer"]
    failed = []
    if answer not in squeeze_spaces(b.text):
        failed.append("answer_not_in_b")
    q_norm = normalize_text(question)
    if any(contains_normalized(q_norm, name) for name in bridge_names(b.title, draft.get("alias"))):
        failed.append("question_names_bridge")
    if contains_normalized(q_norm, normalize_text(answer)):
        failed.append("answer_in_question")
    sa, sb = list(draft.get("support_a") or []), list(draft.get("support_b") or [])
    if any(not 0 <= i < len(a.sentences) for i in sa) or any(not 0 <= i < len(b.sentences) for i in sb):
        failed.append("support_out_of_bounds")
    if not sa or not sb:
        failed.append("support_missing")
    if len(answer.split()) > max_words or len(answer) > max_chars:
        failed.append("answer_too_long")
    if is_enumeration(answer):
        failed.append("answer_enumeration")
    if is_clause(answer):
        failed.append("answer_is_clause")
    return failed


def run_checks(
    drafts: pa.Table,
    docs: Mapping[str, Doc],
    max_words: int = MAX_ANSWER_WORDS,
    max_chars: int = MAX_ANSWER_CHARS,
) -> pa.Table:
    """Check every readable draft; returns one row per checked draft (kept or dropped), sorted by id.

    ``max_words`` / ``max_chars`` bound the answer (the card's 10 words and 70 characters).
    """
    rows = []
    for d in drafts.to_pylist():
        if d["status"] != STATUS_OK:
            continue
        a, b = docs.get(d["a_id"]), docs.get(d["b_id"])
        failed = (
            ["gold_document_missing"]
            if a is None or b is None
            else check_draft(d, a, b, max_words, max_chars)
        )
        rows.append(
            {
                "id": d["id"],
                "split": d["split"],
                "verdict": "dropped" if failed else "kept",
                "reason": failed[0] if failed else "passed_checks",
                "reasons": failed,
            }
        )
    rows.sort(key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=CHECKS_SCHEMA)


def reason_counts(checks: pa.Table, reasons: Sequence[str] = REASONS) -> dict[str, int]:
    """Drops per first-failing reason, every known reason listed (zeros included), in check order."""
    counts = dict.fromkeys(reasons, 0)
    for verdict, reason in zip(checks["verdict"].to_pylist(), checks["reason"].to_pylist(), strict=True):
        if verdict == "dropped":
            counts[reason] = counts.get(reason, 0) + 1
    return counts
