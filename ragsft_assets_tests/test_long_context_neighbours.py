"""Exact top-k neighbours (faiss) against numpy's brute force and a plain-Python statement of the rules."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from ragsft_assets.long_context import neighbours
from ragsft_assets.long_context.neighbours import (
    SCORE_DECIMALS,
    SearchSettings,
    brute_force_neighbours,
    nearest_neighbours,
)


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


def clustered(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit vectors around 40 topics (neighbours are close, as real embeddings' are), 2% duplicates."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    x = (centres[rng.integers(0, 40, size=n)] + rng.normal(scale=0.7, size=(n, dim))).astype(np.float32)
    keys = np.arange(n, dtype=np.int64)
    for i in rng.choice(np.arange(1, n), size=n // 50, replace=False).tolist():
        j = int(rng.integers(0, i))
        x[i], keys[i] = x[j], keys[j]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    groups = np.cumsum(rng.integers(0, 3, size=n) == 0)
    return x, keys, groups


def test_exact_up_to_the_threshold_and_ivf_above_it_with_its_recall_recorded() -> None:
    x, keys, groups = clustered(3000, 16, 0)
    n_unique = len(np.unique(keys))
    ref = brute_force_neighbours(x, 6, keys=keys, groups=groups)
    exact = nearest_neighbours(x, 6, keys=keys, groups=groups, settings=SearchSettings(exact_max=n_unique))
    assert exact.method == "exact" and exact.recall_at_k == 1.0
    np.testing.assert_array_equal(exact.indices, ref.indices)
    # one passage over the threshold: the IVF index, its recall measured on every query here
    settings = SearchSettings(exact_max=n_unique - 1, recall_queries=len(x), nprobe_start=1)
    ivf = nearest_neighbours(x, 6, keys=keys, groups=groups, settings=settings)
    assert ivf.method == "ivf" and ivf.index["nlist"] == round(2 * n_unique**0.5)
    hits = sum(len(set(a) & set(e)) for a, e in zip(ivf.indices.tolist(), ref.indices.tolist(), strict=True))
    assert ivf.recall_at_k == pytest.approx(hits / ref.indices.size)  # against the exact search
    assert ivf.recall_at_k >= settings.recall_target or ivf.index["nprobe"] == ivf.index["nlist"]
    assert list(ivf.index["nprobe_recall"])[0] == "1" and len(ivf.index["nprobe_recall"]) > 1  # tuned up
    meta = ivf.metadata()
    assert meta["search/method"] == "ivf" and meta["search/recall_queries"] == len(x)
    assert meta["search/recall_at_k"] == round(ivf.recall_at_k, 5) and meta["search/nprobe"] >= 2
    # what IVF returns obeys the exact rules: exclusions, float64 scores, order
    for q in range(0, len(x), 97):
        row = ivf.indices[q][ivf.indices[q] >= 0]
        assert not set(row.tolist()) & {
            j for j in range(len(x)) if groups[j] == groups[q] or keys[j] == keys[q]
        }
        want = np.round(x[row].astype(np.float64) @ x[q].astype(np.float64), SCORE_DECIMALS)
        np.testing.assert_array_equal(ivf.scores[q][: len(row)], want)
        assert all((-a, i) <= (-b, j) for a, b, i, j in zip(want, want[1:], row, row[1:], strict=False))


def test_ivf_reruns_are_byte_identical_and_follow_the_seed() -> None:
    x, keys, groups = clustered(2500, 16, 1)
    settings = SearchSettings(exact_max=100, recall_queries=200, nprobe=2)
    a = nearest_neighbours(x, 5, keys=keys, groups=groups, settings=settings, query_block=300)
    b = nearest_neighbours(x, 5, keys=keys, groups=groups, settings=settings, query_block=300)
    assert a.indices.tobytes() == b.indices.tobytes() and a.scores.tobytes() == b.scores.tobytes()
    assert a.recall_at_k == b.recall_at_k
    other = nearest_neighbours(x, 5, keys=keys, groups=groups, settings=replace(settings, seed=7))
    assert other.indices.tobytes() != a.indices.tobytes()  # nprobe=2 of ~100 lists: the centroids matter


@pytest.mark.parametrize("exact_max", [10**9, 100])
def test_memmapped_vectors_are_searched_in_place(tmp_path, monkeypatch, exact_max: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(neighbours, "DB_CHUNK", 4096)  # rows copied at once (default 131,072)
    monkeypatch.setattr(neighbours, "BRUTE_CHUNK", 1024)  # rows in float64 at once (default 16,384)
    x, keys, groups = clustered(20_000, 128, 2)  # per-row ids: a few int64 a row, the vectors 128 floats
    np.save(tmp_path / "v.npy", x)
    mm = np.load(tmp_path / "v.npy", mmap_mode="r")
    assert isinstance(mm, np.memmap)
    settings = SearchSettings(exact_max=exact_max, recall_queries=100, nprobe=4)
    rows = np.arange(0, 20_000, 10)
    import faiss  # noqa: F401  (loaded before tracing: module loading is not the search's memory)

    tracemalloc.start()
    res = nearest_neighbours(
        mm, 8, keys=keys, groups=groups, query_rows=rows, settings=settings, query_block=256
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # less than one copy of the vectors (10 MB; float64: 20 MB; as Python lists: 80 MB)
    assert peak < x.nbytes, peak
    assert res.method == ("exact" if exact_max > 20_000 else "ivf")
    ref = nearest_neighbours(x, 8, keys=keys, groups=groups, query_rows=rows, settings=settings)
    assert res.indices.tobytes() == ref.indices.tobytes()  # the memmap gives the in-memory answer
    if res.method == "exact":  # five database chunks merged: still the brute force's answer
        brute = brute_force_neighbours(x, 8, keys=keys, groups=groups, query_rows=rows)
        np.testing.assert_array_equal(res.indices, brute.indices)
        np.testing.assert_array_equal(res.scores, brute.scores)
    with pytest.raises(TypeError, match="numpy array"):
        nearest_neighbours(x.tolist(), 8)  # type: ignore[arg-type]


def test_arrow_round_trip_and_codes_without_python_lists() -> None:
    import pyarrow as pa

    from ragsft_assets.long_context.neighbours import arrow_codes, neighbours_from_table, neighbours_table

    x, keys, groups = corpus(120, 8, 4)
    col = pa.chunked_array([keys[:50], keys[50:]])
    codes = arrow_codes(col)
    assert codes.dtype == np.int64
    assert all((codes[i] == codes[j]) == (keys[i] == keys[j]) for i in range(0, 120, 7) for j in range(120))
    by_codes = nearest_neighbours(x, 4, keys=codes, groups=arrow_codes(pa.array(groups)))
    by_values = nearest_neighbours(x, 4, keys=keys, groups=groups)
    np.testing.assert_array_equal(by_codes.indices, by_values.indices)
    by_values.indices[3, 2:] = -1  # padding comes back as -1 / NaN through nulls
    by_values.scores[3, 2:] = np.nan
    table = neighbours_table(pa.array(np.arange(120)), by_values)
    assert table.column("scores").to_pylist()[3][2:] == [None, None]
    back = neighbours_from_table(table)
    np.testing.assert_array_equal(back.indices, by_values.indices)
    np.testing.assert_array_equal(back.scores, by_values.scores)


def test_heldout_recall_is_measured_on_queries_nprobe_was_not_tuned_on() -> None:
    x, keys, groups = clustered(3000, 16, 2)
    settings = SearchSettings(exact_max=100, recall_queries=300, heldout_queries=250, nprobe_start=1)
    nb = nearest_neighbours(x, 6, keys=keys, groups=groups, settings=settings)
    # the two samples, from their seeds: disjoint
    tuning = np.sort(np.random.default_rng(1).choice(len(x), size=300, replace=False))
    others = np.setdiff1d(np.arange(len(x)), tuning)
    heldout = np.sort(np.random.default_rng(2).choice(others, size=250, replace=False))
    assert not set(tuning.tolist()) & set(heldout.tolist()) and nb.heldout_queries == 250
    # the held-out recall is the final search's on those rows against the exact search
    ref = brute_force_neighbours(x, 6, keys=keys, groups=groups, query_rows=heldout)
    got = nb.indices[heldout]
    hits = sum(len(set(a) & set(e)) for a, e in zip(got.tolist(), ref.indices.tolist(), strict=True))
    assert nb.fallbacks == 0 and nb.recall_heldout == pytest.approx(hits / ref.indices.size)
    assert nb.index["nprobe_recall_heldout"][str(nb.index["nprobe"])] == round(nb.recall_heldout, 5)
    assert set(nb.index["nprobe_recall_heldout"]) == set(nb.index["nprobe_recall"])  # every nprobe tried
    assert nb.metadata()["search/recall_heldout"] == round(nb.recall_heldout, 5)
    # no queries left over: no held-out sample, and no held-out recall claimed
    none = nearest_neighbours(
        x, 6, keys=keys, groups=groups, settings=replace(settings, recall_queries=len(x))
    )
    assert none.recall_heldout is None and none.heldout_queries == 0
    assert "search/recall_heldout" not in none.metadata()
