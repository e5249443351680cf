"""Exact top-k neighbours (faiss) against numpy's brute force and a plain-Python statement of the rules."""

from __future__ import annotations

import numpy as np
import pytest

from ragsft_assets.long_context.neighbours import SCORE_DECIMALS, brute_force_neighbours, nearest_neighbours


def python_reference(vectors: np.ndarray, k: int, keys: list, groups: list) -> list[list[int]]:
    """The rules as stated, one query at a time, in plain Python (float64 sums, no numpy ranking)."""
    n = len(vectors)
    first = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    out = []
    for q in range(n):
        same_example = {keys[j] for j in range(n) if groups[j] == groups[q]}
        cands = []
        for j in range(n):
            if first[keys[j]] != j or keys[j] == keys[q] or keys[j] in same_example:
                continue
            score = round(
                sum(float(a) * float(b) for a, b in zip(vectors[q], vectors[j], strict=True)), SCORE_DECIMALS
            )
            cands.append((-score, j))
        out.append([j for _, j in sorted(cands)[:k]])
    return out


def corpus(n: int, dim: int, seed: int) -> tuple[np.ndarray, list[str], list[int]]:
    """Random unit vectors with exact duplicates (same key), equal vectors under other keys (ties)
    and examples of one to three passages."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    keys = [f"t{i}" for i in range(n)]
    for i in range(0, n, 9):  # a duplicate text: same key, same vector
        j = int(rng.integers(n))
        x[i], keys[i] = x[j], keys[j]
    for i in range(3, n, 11):  # another text with the very same vector: a tie, to the lower index
        x[i] = x[int(rng.integers(n))]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    groups = [i // int(rng.integers(1, 4)) for i in range(n)]
    return x, keys, groups


@pytest.mark.parametrize("seed", [0, 1])
def test_faiss_top_k_equals_numpy_and_python_references(seed: int) -> None:
    x, keys, groups = corpus(240, 12, seed)
    ours = nearest_neighbours(x, 5, keys=keys, groups=groups, query_block=17)
    numpy_ref = brute_force_neighbours(x, 5, keys=keys, groups=groups, query_block=23)
    np.testing.assert_array_equal(ours.indices, numpy_ref.indices)
    np.testing.assert_array_equal(ours.scores, numpy_ref.scores)
    assert ours.indices.tolist() == python_reference(x, 5, keys, groups)
    for q in (0, 77, 239):  # the scores are the float64 inner products, rounded
        want = [
            round(sum(float(a) * float(b) for a, b in zip(x[q], x[j], strict=True)), SCORE_DECIMALS)
            for j in ours.indices[q]
        ]
        assert ours.scores[q].tolist() == want
    assert ours.fallbacks < len(x) // 4  # the brute force is the exception, not the rule


def test_ties_go_to_the_lower_index_even_past_what_faiss_returned() -> None:
    # 60 passages on 3 directions: each query sees ~20 exact ties, far more than faiss fetches
    rng = np.random.default_rng(5)
    base = np.eye(8, dtype=np.float32)[:3]
    x = base[rng.integers(0, 3, size=60)]
    x[::7] = base[0] * 0.5 + base[1] * 0.5
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    keys = list(range(60))
    ours = nearest_neighbours(x, 4, keys=keys, groups=keys, query_block=16)
    assert ours.fallbacks > 0
    assert ours.indices.tolist() == python_reference(x, 4, keys, keys)
    same = [j for j in range(60) if (x[j] == x[1]).all() and j != 1][:4]
    assert ours.indices[1].tolist() == same  # the lowest indices among the equal vectors


def test_exclusions_by_hand_and_padding() -> None:
    x = np.array([[1, 0], [0.99, 0.14], [0.98, 0.2], [1, 0], [0, 1]], dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    keys = ["a", "b", "c", "a", "e"]  # row 3 is a duplicate of row 0
    groups = ["g0", "g0", "g1", "g2", "g3"]  # rows 0 and 1 are one example
    res = nearest_neighbours(x, 3, keys=keys, groups=groups, query_rows=[0, 3, 4])
    # row 0: not itself, not its duplicate 3, not 1 (same example) -> 2, then 4
    assert res.indices[0].tolist() == [2, 4, -1]
    assert np.isnan(res.scores[0, 2])
    # row 3 (text "a", example g2): text "a" never, but row 1 is another example's passage now
    assert res.indices[1].tolist() == [1, 2, 4]
    # row 4: the duplicate text appears once, as its lower row
    assert res.indices[2].tolist() == [2, 1, 0]
    assert res.scores[2].tolist() == sorted(res.scores[2].tolist(), reverse=True)
    with pytest.raises(ValueError, match="3 keys for 5 vectors"):
        nearest_neighbours(x, 2, keys=keys[:3])


def test_blocking_does_not_change_the_result() -> None:
    x, keys, groups = corpus(500, 16, 3)
    whole = nearest_neighbours(x, 8, keys=keys, groups=groups, query_block=4096)
    small = nearest_neighbours(x, 8, keys=keys, groups=groups, query_block=13)
    np.testing.assert_array_equal(whole.indices, small.indices)
    np.testing.assert_array_equal(whole.scores, small.scores)
