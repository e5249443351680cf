"""``ragsft bench embeddings`` on a small set: its closing values, its baseline and its identity check."""

from __future__ import annotations

import numpy as np

from ragsft_assets.bench import embeddings
from ragsft_assets.cli.bench import format_line


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


def test_small_run_ends_with_the_expected_line(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(embeddings, "N_QUERIES", 300)
    values = embeddings.run(size=3000)
    line = format_line("embeddings", values)
    assert line.startswith("bench=embeddings ratio=") and " queries_per_s=" in line
    assert values["topk_identical"] is True and values["topk_identical_queries"] == 300
    assert values["passages"] == 3000 and values["projected_1m_passages_h"] > 0
    assert "faiss-cpu-" in str(values["versions"]) and int(values["cores"]) >= 1  # type: ignore[call-overload]
