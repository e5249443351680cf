"""BM25 ``variant="lucene"`` scores as bm25s ``method="lucene"`` does (float32 there: 1e-6 tolerance)."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from ragsft_assets.multihop.retrieval import BM25Index, tokenize

TEXTS = [
    "the cat sat on the mat",
    "a dog and a cat",
    "the bird flew over the mat mat",
    "dogs bark at birds",
    "the quick brown fox",
    "cat cat cat dog",
]
QUERIES = ["cat mat", "dog bird", "the fox", "brown bark"]


def test_lucene_variant_matches_bm25s() -> None:
    ours = BM25Index([str(i) for i in range(len(TEXTS))], TEXTS, variant="lucene")
    okapi = BM25Index([str(i) for i in range(len(TEXTS))], TEXTS)
    ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    ref.index([tokenize(t) for t in TEXTS], show_progress=False)
    for q in QUERIES:
        theirs = ref.get_scores(tokenize(q))
        np.testing.assert_allclose(ours.scores_matrix([q]).toarray()[0], theirs, atol=1e-6)
        # the default (rank-bm25 okapi) is a different formula: it must not pass the same check
        assert not np.allclose(okapi.scores_matrix([q]).toarray()[0], theirs, atol=1e-6)


def test_unknown_variant_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown BM25 variant"):
        BM25Index(["a"], ["x"], variant="atire")


def test_bench_vocabulary_has_no_token_above_5_percent() -> None:
    from collections import Counter

    from ragsft_assets.bench.distractors import synthetic_corpus

    _, texts, queries = synthetic_corpus(400)
    counts = Counter(w for t in texts for w in t.split())
    assert max(counts.values()) / sum(counts.values()) <= 0.05
    assert len(queries) == 2000 and all(q.split() for q in queries)
