"""``ragsft bench embeddings`` on a small set: its closing values, its baseline and its identity check."""

from __future__ import annotations

import numpy as np
import pytest

from ragsft_assets.bench import embeddings
from ragsft_assets.cli.bench import format_line
from ragsft_assets.long_context.neighbours import SearchSettings


def test_numpy_baseline_is_a_plain_top_k() -> None:
    x, _, _ = embeddings.synthetic_passages(500)
    q = np.array([0, 7, 499])
    top = embeddings.numpy_float32_topk(x, q, 5, block=2)
    full = x[q] @ x.T
    for r in range(3):
        # float32 sums differ with the block shape: compare the sets and the order of its own scores
        assert set(top[r].tolist()) == set(np.argsort(-full[r], kind="stable")[:5].tolist())
        assert np.all(np.diff(x[q[r]] @ x[top[r]].T) <= 1e-6)
    assert top[:, 0].tolist() == q.tolist()  # the baseline keeps the query itself (no exclusions)


def test_small_run_ends_with_the_expected_line(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(embeddings, "N_QUERIES", 300)
    values = embeddings.run(size=3000, workdir=str(tmp_path))
    line = format_line("embeddings", values)
    assert line.startswith("bench=embeddings ratio=") and " queries_per_s=" in line
    assert values["method"] == "exact"  # under the threshold: exact, checked against the reference
    assert values["topk_identical"] is True and values["topk_identical_queries"] == 300
    # the IVF index is measured anyway: its recall against exact on the same 300 queries
    assert 0.9 <= float(values["recall_at_k"]) <= 1.0 and values["recall_queries"] == 300  # type: ignore[arg-type]
    assert values["projected_1m_min"] > 0 and values["projection"] == "scaled"  # type: ignore[operator]
    assert values["peak_rss_mb"] > 0 and values["passages"] == 3000  # type: ignore[operator]
    assert "faiss-cpu-" in str(values["versions"]) and int(values["cores"]) >= 1  # type: ignore[call-overload]
    assert list(tmp_path.iterdir()) == []  # the memory-mapped vectors are removed


def test_vectors_are_generated_into_a_memory_mapped_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    x, keys, groups = embeddings.synthetic_passages(1200, out=tmp_path / "v.npy")
    assert isinstance(x, np.memmap) and x.dtype == np.float32 and x.shape == (1200, embeddings.DIM)
    again, _, _ = embeddings.synthetic_passages(1200)  # in memory: the same values from the seed
    np.testing.assert_array_equal(np.asarray(x), again)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    dup = np.flatnonzero(keys != np.arange(1200))
    assert len(dup) == 1200 // 50 and all((x[i] == x[keys[i]]).all() for i in dup.tolist())
    assert groups[0] >= 0 and np.all(np.diff(groups) >= 0)


def test_the_ivf_path_at_sizes_over_the_threshold(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(embeddings, "N_QUERIES", 200)
    monkeypatch.setattr(
        embeddings, "SearchSettings", lambda **kw: SearchSettings(**{"exact_max": 1000, **kw})
    )
    values = embeddings.run(size=3000, workdir=str(tmp_path))
    assert values["method"] == "ivf" and "topk_identical" not in values  # no float64 reference there
    assert 0.9 <= float(values["recall_at_k"]) <= 1.0 and str(values["ivf_index"]).startswith("IVF")  # type: ignore[arg-type]


def test_hard_data_overlaps_across_topics_and_is_seeded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    x, keys, groups, topics = embeddings.hard_passages(4000, out=tmp_path / "h.npy")
    again, _, _, _ = embeddings.hard_passages(4000)
    np.testing.assert_array_equal(np.asarray(x), again)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    dup = np.flatnonzero(keys != np.arange(4000))
    assert len(dup) == 4000 // 50 and all(topics[i] == topics[keys[i]] for i in dup.tolist())
    q = np.arange(0, 4000, 20)
    sims = np.asarray(x[q]) @ np.asarray(x).T
    sims[np.arange(len(q)), q] = -np.inf
    same = topics[q][:, None] == topics[None, :]
    # not separable by a threshold: some other topic's passage is closer than some of the own topic's
    assert sims[~same].max() > sims[same & np.isfinite(sims)].min() + 0.2
    top = np.argsort(-sims, axis=1)[:, :8]
    assert (topics[top] == topics[q][:, None]).mean() < 0.9  # true neighbours in other topics too


def test_hard_run_reports_the_heldout_recall(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(embeddings, "N_QUERIES", 300)
    monkeypatch.setattr(
        embeddings,
        "SearchSettings",
        lambda **kw: SearchSettings(
            **{"exact_max": 1000, "recall_queries": 150, "heldout_queries": 150, **kw}
        ),
    )
    values = embeddings.run(size=3000, workdir=str(tmp_path), data="hard")
    line = format_line("embeddings", values)
    assert line.startswith("bench=embeddings ratio=") and " data=hard " in line and " recall_heldout=" in line
    assert values["method"] == "ivf" and values["heldout_queries"] == 150
    assert 0.0 < float(values["recall_heldout"]) <= 1.0  # type: ignore[arg-type]
    for name in ("095", "099"):  # the first nprobe reaching each target on the tuning sample
        probe = values[f"nprobe_{name}"]
        assert probe == "none" or (int(probe) >= 1 and float(values[f"minutes_{name}"]) > 0)  # type: ignore[call-overload, arg-type]
    # tuning started at nprobe 1 (hard data only): the lower target needs no more lists than the higher
    assert int(values["nprobe_095"]) <= int(values["nprobe_099"])  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="unknown --data"):
        embeddings.run(size=100, workdir=str(tmp_path), data="easy")


def test_data_is_an_embeddings_option_only() -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli.bench import bench

    result = CliRunner().invoke(bench, ["corpus", "--data", "hard"])
    assert result.exit_code != 0 and "--data is an option of `ragsft bench embeddings` only" in result.output
