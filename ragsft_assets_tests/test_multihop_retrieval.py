"""Sparse tf-idf / BM25 top-k equal the dense references; distractor selection rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import cosine_similarity

from ragsft_assets.ids import doc_id
from ragsft_assets.multihop import retrieval
from ragsft_assets.multihop.distractors import TOO_FEW, Query, select_distractors
from ragsft_assets.multihop.generation import Doc
from ragsft_assets.multihop.normalize import contains_normalized, normalize_text
from ragsft_assets.multihop.retrieval import (
    SCORE_DECIMALS,
    BM25Index,
    TfidfBigramIndex,
    build_index,
    tokenize,
)

HOTPOT = Path(__file__).resolve().parent / "data" / "hotpotqa" / "hotpotqa_train_distractor_70.json"


@pytest.fixture(scope="module")
def hotpot():
    records = json.loads(HOTPOT.read_text())
    paragraphs = {t: "".join(s) for r in records for t, s in r["context"]}
    ids = sorted(doc_id(t) for t in paragraphs)
    by_id = {doc_id(t): x for t, x in paragraphs.items()}
    return records, ids, [by_id[i] for i in ids]


def _reference_topk(scores: np.ndarray, k: int, eligible) -> list[int]:
    out = []
    for d in np.lexsort((np.arange(scores.size), -np.round(scores, SCORE_DECIMALS))):
        if eligible(int(d)):
            out.append(int(d))
            if len(out) == k:
                break
    return out


def _dense_scores(method: str, texts: list[str], queries: list[str]) -> np.ndarray:
    if method == "tfidf":
        vec = TfidfVectorizer(ngram_range=(2, 2))  # defaults: lowercase, (?u)\b\w\w+\b, smooth idf, l2
        x = vec.fit_transform(texts).toarray()
        return cosine_similarity(vec.transform(queries).toarray(), x)
    bm = BM25Okapi([tokenize(t) for t in texts])  # k1=1.5, b=0.75, epsilon=0.25
    return np.array([bm.get_scores(tokenize(q)) for q in queries])


@pytest.fixture(params=[False, True], ids=["product", "pruned"])
def prune(request, monkeypatch):
    """Both search paths: the full product, and MaxScore pruning for every query (its threshold is
    50,000 postings, which no query of the small corpora here reaches)."""
    if request.param:
        monkeypatch.setattr(retrieval, "_PRUNE_MIN_POSTINGS", 0)
    return request.param


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_topk_equals_dense_reference_on_hotpotqa_paragraphs(hotpot, method, prune):
    records, ids, texts = hotpot
    queries = [r["question"] for r in records] + ["", "zzzz unknownword"]
    index = build_index(method, ids, texts)
    dense = _dense_scores(method, texts, queries)
    hits = index.search(queries, 8, batch_size=16)
    for qi in range(len(queries)):
        assert [h.doc for h in hits[qi]] == _reference_topk(dense[qi], 8, lambda d: True), qi
        assert [h.score for h in hits[qi]] == pytest.approx(
            [float(np.round(dense[qi][h.doc], SCORE_DECIMALS)) for h in hits[qi]], abs=1e-9
        )


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_topk_with_exclusions_equals_reference(hotpot, method, prune):
    records, ids, texts = hotpot
    queries = [r["question"] for r in records]
    answers = [normalize_text(r["answer"]) for r in records]
    gold = [{doc_id(t) for t, _ in r["supporting_facts"]} for r in records]
    norm = [normalize_text(t) for t in texts]

    def eligible(qi: int, d: int) -> bool:
        return ids[d] not in gold[qi] and not contains_normalized(norm[d], answers[qi])

    dense = _dense_scores(method, texts, queries)
    hits = build_index(method, ids, texts).search(queries, 8, eligible, batch_size=7)
    for qi in range(len(queries)):
        assert [h.doc for h in hits[qi]] == _reference_topk(dense[qi], 8, lambda d, qi=qi: eligible(qi, d))


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_sparse_eligibility_walks_past_every_positive_score(hotpot, method, prune):
    records, ids, texts = hotpot
    queries = [r["question"] for r in records][:40]

    def eligible(qi: int, d: int) -> bool:  # few documents: the search widens, then falls to zero scores
        return (d + qi) % 97 == 0

    dense = _dense_scores(method, texts, queries)
    hits = build_index(method, ids, texts).search(queries, 8, eligible)
    for qi in range(len(queries)):
        assert [h.doc for h in hits[qi]] == _reference_topk(dense[qi], 8, lambda d, qi=qi: eligible(qi, d))


def _every_third_excluded(qi: int, d: int) -> bool:
    # module level: the search workers (forkserver) receive ``eligible`` pickled
    return (qi + d) % 3 != 0


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_workers_give_the_same_hits_in_query_order(hotpot, method):
    records, ids, texts = hotpot
    queries = [r["question"] for r in records] * 3 + ["", "zzzz unknownword"]
    index = build_index(method, ids, texts)
    for elig in (None, _every_third_excluded):
        one = index.search(queries, 8, elig, batch_size=5)
        two = index.search(queries, 8, elig, batch_size=5, workers=2)
        assert [[(h.doc, h.score) for h in r] for r in two] == [[(h.doc, h.score) for h in r] for r in one]
        assert len(two) == len(queries)


@pytest.mark.parametrize("cls", [TfidfBigramIndex, BM25Index])
def test_ties_go_to_the_smaller_doc_id_whatever_the_input_order(cls):
    # fillers keep every BM25 idf positive (rank-bm25 floors idf of terms in over half the documents)
    texts = ["red apple pie", "red apple pie", "green apple pie", "red apple pie"] + [
        f"blue sky {i}" for i in range(6)
    ]
    ids = ["d3", "d1", "d2", "d0"] + [f"e{i}" for i in range(6)]
    index = cls(ids, texts)
    hits = index.search(["red apple pie"], 4)[0]
    assert [index.doc_ids[h.doc] for h in hits] == ["d0", "d1", "d3", "d2"]
    shuffled = cls(ids[::-1], texts[::-1])
    assert [shuffled.doc_ids[h.doc] for h in shuffled.search(["red apple pie"], 4)[0]] == [
        "d0",
        "d1",
        "d3",
        "d2",
    ]


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown retrieval method"):
        build_index("dense", ["a"], ["x"])


def _docs(n_fillers: int) -> dict[str, Doc]:
    docs = [
        Doc("a", "A", ("Alpha is made by Beta.",), "train"),
        Doc("b", "B", ("Beta was founded in Paris.",), "train"),
    ]
    docs += [Doc(f"f{j:02d}", f"F{j}", (f"Beta makes alpha number {j}.",), "train") for j in range(n_fillers)]
    docs += [
        Doc("p", "P", ("Beta moved to paris.",), "train"),
        Doc("v", "V", ("Beta makes alpha.",), "validation"),
    ]
    return {d.id: d for d in docs}


def test_distractors_exclude_golds_answer_docs_and_other_splits():
    q = Query("q1", "train", "Where was the maker of alpha founded?", "Paris", "a", "b")
    table = select_distractors([q], _docs(9), "tfidf", k=8).to_pylist()
    assert table[0]["verdict"] == "kept" and len(table[0]["distractor_ids"]) == 8
    assert not {"a", "b", "p", "v"} & set(table[0]["distractor_ids"])


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_too_few_eligible_documents_is_a_counted_drop(method):
    q = Query("q1", "train", "Where was the maker of alpha founded?", "Paris", "a", "b")
    row = select_distractors([q], _docs(7), method, k=8).to_pylist()[0]
    assert (row["verdict"], row["reason"], len(row["distractor_ids"])) == ("dropped", TOO_FEW, 7)


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_sampled_pivot_gives_the_same_hits_as_the_full_partition(method, monkeypatch):
    from ragsft_assets.bench.distractors import synthetic_corpus
    from ragsft_assets.multihop import retrieval

    ids, texts, queries = synthetic_corpus(3000)
    index = build_index(method, ids, texts)

    def eligible(qi: int, d: int) -> bool:
        return (qi + d) % 5 != 0

    sampled = [index.search(queries[:300], 8, e) for e in (None, eligible)]
    monkeypatch.setattr(retrieval, "_SAMPLE_STRIDE", 10**9)
    full = [index.search(queries[:300], 8, e) for e in (None, eligible)]
    for a, b in zip(sampled, full, strict=True):
        assert [[(h.doc, h.score) for h in r] for r in a] == [[(h.doc, h.score) for h in r] for r in b]


@pytest.mark.parametrize("method", ["tfidf", "bm25"])
def test_distractors_pool_gives_the_single_process_table(hotpot, method):
    # the asset's path: select_distractors with 2 forkserver workers and its real eligibility
    records, ids, texts = hotpot
    docs = {
        i: Doc(i, i, (t,), "train" if n % 4 else "validation")
        for n, (i, t) in enumerate(zip(ids, texts, strict=True))
    }
    queries = [
        Query(f"q{n:03d}", "train" if n % 4 else "validation", r["question"], r["answer"], ids[n], ids[n + 1])
        for n, r in enumerate(records)
    ]
    one = select_distractors(queries, docs, method, k=8, batch_size=4)
    two = select_distractors(queries, docs, method, k=8, batch_size=4, workers=2)
    assert two.equals(one) and one.num_rows == len(records)


def _hits(rows) -> list[list[tuple[int, float]]]:
    return [[(h.doc, h.score) for h in r] for r in rows]


@pytest.mark.parametrize("make", ["tfidf", "okapi", "lucene"])
def test_pruned_search_gives_the_full_products_hits_bit_for_bit(make, monkeypatch):
    # the bench's Zipfian corpus, where common terms have long postings: the pruned path must return the
    # product's documents and rounded scores exactly (the distractor stage's bytes), with and without
    # exclusions, down to zero scores; and it must really answer most queries (not fall back)
    from ragsft_assets.bench.distractors import synthetic_corpus

    ids, texts, queries = synthetic_corpus(3000)
    queries = queries[:240] + ["", "zzzz unknownword", "w59999", "w3 w3 w3 w17 w17", texts[5]]
    index = TfidfBigramIndex(ids, texts) if make == "tfidf" else BM25Index(ids, texts, variant=make)
    certified = []
    pruned_topk = retrieval._pruned_topk

    def spy(*args):
        hits = pruned_topk(*args)
        certified.extend(h is not None for h in hits)
        return hits

    monkeypatch.setattr(retrieval, "_PRUNE_MIN_POSTINGS", 0)
    monkeypatch.setattr(retrieval, "_pruned_topk", spy)

    def sparse(qi: int, d: int) -> bool:
        return (d + qi) % 97 == 0

    for eligible in (None, lambda qi, d: (7 * qi + d) % 5 != 0, sparse):
        for k in (1, 8):
            ours = index.search(queries, k, eligible, batch_size=32)
            reference = index._search_range_product(queries, 0, len(queries), k, eligible, 32)
            assert _hits(ours) == _hits(reference)
    assert sum(certified) > 0.5 * len(certified)


def test_pruning_steps_aside_for_negative_weights(monkeypatch):
    # rank-bm25's floor is negative when the mean idf is: term bounds then bound nothing, and every
    # query goes through the product
    texts = ["aa bb", "aa bb", "aa cc", "aa bb dd"]
    index = BM25Index([str(i) for i in range(4)], texts)
    postings = index._postings()
    assert not postings.nonnegative
    queries = ["aa bb", "cc dd", "aa"]
    q = index.query_matrix(queries)
    assert retrieval._pruned_topk(postings, index._doc_terms_t, q, 3, [0, 1, 2], None) == [None] * 3
    monkeypatch.setattr(retrieval, "_PRUNE_MIN_POSTINGS", 0)
    assert _hits(index.search(queries, 3)) == _hits(index._search_range_product(queries, 0, 3, 3, None, 128))


def test_tfidf_query_weights_equal_the_diagonal_product_bit_for_bit():
    # the query matrix scales counts by idf per entry instead of through a vocabulary-sized diagonal:
    # same weights, same stored order (hence the same sums and hits) as the product it replaces
    import scipy.sparse as sp

    from ragsft_assets.bench.distractors import synthetic_corpus

    ids, texts, queries = synthetic_corpus(1500)
    index = TfidfBigramIndex(ids, texts)
    queries = queries[:300] + ["", "zzzz unknownword", "w1 w2 w1 w2 w1 w2", texts[3] + " " + texts[3]]
    term_rows = []
    for q in queries:
        codes = retrieval._bigram_codes(index._vocab.encode(tokenize(q), grow=False), index._width)
        codes = codes[codes >= 0]
        pos = np.minimum(np.searchsorted(index._codes, codes), index._codes.size - 1)
        term_rows.append(pos[index._codes[pos] == codes])
    counts = retrieval._rows_to_csr(term_rows, index._codes.size)
    before = retrieval._l2_normalize_rows(sp.csr_matrix(counts @ sp.diags(index.idf)))
    now = index.query_matrix(queries)
    for a, b in ((now.indptr, before.indptr), (now.indices, before.indices), (now.data, before.data)):
        assert np.array_equal(a, b)
    assert now.has_canonical_format  # what the pruned search's exact scores need


def test_pickled_index_leaves_the_derived_arrays_behind(hotpot):
    # the search workers receive the index pickled: the pruning's arrays (about the index's size) are
    # rebuilt there, and the hits are the same
    import pickle

    _, ids, texts = hotpot
    index = BM25Index(ids, texts)
    index.prepare()
    assert index._postings_cache is not None
    copy = pickle.loads(pickle.dumps(index))
    assert getattr(copy, "_postings_cache", None) is None
    queries = [t[:200] for t in texts[:30]]
    assert _hits(copy.search(queries, 8)) == _hits(index.search(queries, 8))
