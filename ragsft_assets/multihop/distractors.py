"""Distractor paragraphs: the k best documents of the question's own split, never a gold, never one
that contains the answer.

The question is the query (bigram tf-idf by default, BM25 on request; see
``retrieval``). A question with fewer than ``k`` eligible documents is dropped
with the reason ``too_few_distractors``; :func:`mark_dropped` records the drops of the
near-duplicate removal and the caps that follow, before the judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ragsft_assets.arrow_schemas import STRING_LIST, strings
from ragsft_assets.multihop.generation import Doc
from ragsft_assets.multihop.normalize import contains_normalized, normalize_text
from ragsft_assets.multihop.retrieval import build_index

DEFAULT_K = 8
TOO_FEW = "too_few_distractors"

DISTRACTORS_SCHEMA = pa.schema(
    [
        *strings("id", "split", "method", "verdict", "reason"),
        ("distractor_ids", STRING_LIST),
        ("scores", pa.list_(pa.float64())),
    ]
)


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    split: str
    question: str
    answer: str
    a_id: str
    b_id: str


class _Eligibility:
    """``(query index, doc index) -> bool``: not a gold, answer not in the document (texts normalized once)."""

    def __init__(self, corpus: Sequence[Doc], queries: Sequence[Query]) -> None:
        self.corpus = corpus
        self.golds = [{q.a_id, q.b_id} for q in queries]
        self.answers = [normalize_text(q.answer) for q in queries]
        self.norm_cache: dict[int, str] = {}

    def __call__(self, qi: int, d: int) -> bool:
        if self.corpus[d].id in self.golds[qi]:
            return False
        text = self.norm_cache.get(d)
        if text is None:
            text = self.norm_cache[d] = normalize_text(self.corpus[d].text)
        return not contains_normalized(text, self.answers[qi])


def select_distractors(
    queries: Sequence[Query],
    docs: Mapping[str, Doc],
    method: str = "tfidf",
    k: int = DEFAULT_K,
    batch_size: int = 128,
    workers: int = 1,
) -> pa.Table:
    """Distractors for every query, one index per split; returns a table sorted by id.

    Args:
        queries: the questions that passed the checks.
        docs: the abstracts corpus by id (each with its split).
        method: ``tfidf`` (bigram tf-idf cosine) or ``bm25``.
        k: distractors per question.
        batch_size: queries per sparse product.
        workers: search processes per split (forkserver-started, see ``SparseIndex.search``);
            the table is the same for any value.
    """
    rows: list[dict[str, Any]] = []
    by_split: dict[str, list[Query]] = {}
    for q in queries:
        by_split.setdefault(q.split, []).append(q)
    for split in sorted(by_split):
        split_queries = sorted(by_split[split], key=lambda q: q.id)
        corpus = sorted((d for d in docs.values() if d.split == split), key=lambda d: d.id)
        index = build_index(method, [d.id for d in corpus], [d.text for d in corpus]) if corpus else None
        eligible = _Eligibility(corpus, split_queries)
        hits = (
            index.search([q.question for q in split_queries], k, eligible, batch_size, workers)
            if index
            else []
        )
        for qi, q in enumerate(split_queries):
            found = hits[qi] if hits else []
            ok = len(found) >= k
            rows.append(
                {
                    "id": q.id,
                    "split": split,
                    "method": method,
                    "verdict": "kept" if ok else "dropped",
                    "reason": "distractors_found" if ok else TOO_FEW,
                    "distractor_ids": [corpus[h.doc].id for h in found],
                    "scores": [h.score for h in found],
                }
            )
    rows.sort(key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=DISTRACTORS_SCHEMA)


def mark_dropped(table: pa.Table, reasons: Mapping[str, str]) -> pa.Table:
    """``table`` with the questions of ``reasons`` (id -> reason) turned ``dropped`` for that reason;
    their distractors stay, so the row still says what was found. Used for the near-duplicate
    removal and the caps, which run on the questions with enough distractors, before the judge."""
    if not reasons:
        return table
    ids = table["id"].to_pylist()
    verdicts = [
        "dropped" if i in reasons else v for i, v in zip(ids, table["verdict"].to_pylist(), strict=True)
    ]
    why = [reasons.get(i, r) for i, r in zip(ids, table["reason"].to_pylist(), strict=True)]
    table = table.set_column(
        table.schema.get_field_index("verdict"), "verdict", pa.array(verdicts, pa.string())
    )
    return table.set_column(table.schema.get_field_index("reason"), "reason", pa.array(why, pa.string()))
