"""The benchmarks' own identity checks: tie-aware where a peer breaks ties differently, strict otherwise."""

from __future__ import annotations

import numpy as np

from ragsft_assets.bench.distractors import Excluded, dense_topk, same_up_to_kth_tie


def test_kth_place_tie_is_accepted_and_nothing_else() -> None:
    exact = np.array([5.0, 4.0, 3.0, 3.0, 2.9999, 1.0])
    ours = [0, 1, 2]  # the tie 2/3 at the k-th place goes to the smaller index
    assert same_up_to_kth_tie(ours, [0, 1, 2], exact)
    assert same_up_to_kth_tie(ours, [1, 0, 3], exact)  # the peer took the other tied document
    assert not same_up_to_kth_tie(ours, [0, 1, 4], exact)  # close, but not a float32 tie
    assert not same_up_to_kth_tie(ours, [0, 2, 3], exact)  # a tie swap above the k-th place is not allowed
    assert not same_up_to_kth_tie(ours, [0, 1], exact)


def test_dense_reference_skips_excluded_documents_and_breaks_ties_by_index() -> None:
    scores = np.array([1.0, 2.0, 2.0, 0.5, 3.0])
    assert dense_topk(scores, 3, 0, None) == [4, 1, 2]
    rule = Excluded()
    assert dense_topk(scores, 3, 0, rule) == [4, 1, 2] and not rule(0, 0)
    assert dense_topk(scores, 3, 2, rule) == [4, 2, 0] and not rule(2, 1)
