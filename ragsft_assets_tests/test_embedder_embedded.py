"""The real ``embedded`` embedder (vLLM pooling runner on CPU, all-MiniLM-L6-v2) beside the chat engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragsft_assets.llm.types import SamplingParams

pytestmark = pytest.mark.integration

NARRATIVEQA = Path(__file__).parent / "data" / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl"


def _reference_vectors(folder: Path, texts: list[str], max_tokens: int) -> np.ndarray:
    """sentence-transformers' recipe by hand: BERT, mean over the attention mask, L2 norm."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
    enc = tok(texts, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=1).numpy()


def test_embedded_embedder_is_minilm_mean_pooling_cached_and_lives_beside_the_chat_engine(
    embedded_model: object, tmp_path: Path
) -> None:
    from ragsft_assets.resources.embedder import EmbeddingResource, embedded_embedder_folder

    try:
        folder = embedded_embedder_folder()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    from ragsft_assets.long_context.neighbours import nearest_neighbours
    from ragsft_assets.long_context.raft import (
        ChatTokenCounter,
        RaftConfig,
        narrativeqa_examples,
        passage_rows,
        raft_examples,
    )

    examples = narrativeqa_examples(NARRATIVEQA)[:3]  # three summaries of 322-495 tokens
    rows = passage_rows(examples)
    texts = [*rows.texts, "A short sentence about a ship at sea."]  # and one short text (no padding)
    params = SamplingParams(temperature=0.0, max_tokens=4)
    before = embedded_model.chat([[{"role": "user", "content": "Name a colour (embedder test)."}]], params)  # type: ignore[attr-defined]
    assert before.results[0].ok  # the chat engine is live in this process before the pooling one starts

    res = EmbeddingResource(backend="embedded", cache_dir=str(tmp_path / "cache"))
    out = res.embed(texts)
    assert out.vectors.shape == (4, 384)
    assert (out.stats.embedded, out.stats.cache_hits, out.stats.calls) == (4, 0, 1)
    assert out.stats.tokens == 3 * 256 + 11  # truncated to 256; the short one is its 11 tokens
    identity = res.model_identity()
    assert identity["model"] == "sentence-transformers/all-MiniLM-L6-v2" and identity["max_tokens"] == "256"
    np.testing.assert_allclose(out.vectors, _reference_vectors(folder, texts, 256), atol=2e-5)

    after = embedded_model.chat([[{"role": "user", "content": "Name a fruit (embedder test)."}]], params)  # type: ignore[attr-defined]
    assert after.results[0].ok  # and the chat engine still answers with the pooling engine beside it
    res.close()

    # RAFT over the real vectors: each example gets the other two summaries, all within the budget
    nb = nearest_neighbours(out.vectors[:3], 2, keys=rows.ids, groups=rows.groups)
    raft = raft_examples(
        examples, rows, nb, ChatTokenCounter(), RaftConfig(budget_tokens=4096), embedding_keys=out.keys
    )
    assert len(raft.rows) == 3 and not raft.rejections
    for row, lin in zip(raft.rows, raft.lineage, strict=True):
        assert len(row["distractor_ids"]) == 2 and row["num_tokens"] <= 4096
        assert set(lin["embedding_keys"]) <= set(out.keys[:3]) and len(lin["embedding_keys"]) == 3
        assert all(0 < s < 1 for s in row["distractor_scores"])  # cosine of two different summaries

    again = EmbeddingResource(backend="embedded", cache_dir=str(tmp_path / "cache"))
    rerun = again.embed(texts)
    assert (rerun.stats.embedded, rerun.stats.cache_hits, rerun.stats.calls) == (0, 4, 0)
    assert again.backend_object()._llm is None  # type: ignore[attr-defined]  # no engine started
    np.testing.assert_array_equal(rerun.vectors, out.vectors)
    again.close()


def test_vllm_backend_identity_from_a_local_folder_without_an_engine(tmp_path: Path) -> None:
    from ragsft_assets.resources.embedder import EmbeddingResource, embedded_embedder_folder

    try:
        folder = embedded_embedder_folder()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    vllm_res = EmbeddingResource(backend="vllm", model=str(folder), cache_dir=str(tmp_path))
    embedded = EmbeddingResource(backend="embedded", cache_dir=str(tmp_path))
    a, b = vllm_res.model_identity(), embedded.model_identity()
    assert a["weights_sha256"] == b["weights_sha256"] and len(a["weights_sha256"]) == 64
    assert a["max_tokens"] == b["max_tokens"] == "256" and a["backend"] == b["backend"] == "vllm"
    assert vllm_res.backend_object()._llm is None  # type: ignore[attr-defined]  # identity needs no engine
    vllm_res.close()
    embedded.close()


@pytest.mark.gpu
def test_vllm_backend_on_the_gpu_gives_the_cpu_vectors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from ragsft_assets.resources.embedder import EmbeddingResource, embedded_embedder_folder

    texts = ["A ship sails at dawn.", "The captain keeps a log of every storm."]
    res = EmbeddingResource(
        backend="vllm", model=str(embedded_embedder_folder()), dtype="float32", cache_dir=str(tmp_path)
    )
    out = res.embed(texts)
    assert out.vectors.shape == (2, 384) and out.stats.embedded == 2
    ref = _reference_vectors(embedded_embedder_folder(), texts, 256)
    np.testing.assert_allclose(out.vectors, ref, atol=1e-3)
    res.close()
