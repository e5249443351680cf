"""GPU memory shares of the in-process engines on one GPU: the split, and the roles read from the env."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsft_assets.llm import gpu_share
from ragsft_assets.llm.gpu_share import RoleEngine, split


def test_roles_on_one_engine_share_it_and_different_models_split_the_gpu() -> None:
    chat, base = ("vllm", "Qwen/Qwen3-8B"), ("vllm", "Qwen/Qwen3-4B-Base")
    roles = [RoleEngine("generator", chat), RoleEngine("judge", chat), RoleEngine("base_model", base)]
    shares = split(roles)
    assert shares == {"generator": 0.45, "judge": 0.45, "base_model": 0.45}  # two engines, 0.9 / 2
    assert split(roles[:2]) == {"generator": 0.9, "judge": 0.9}  # one engine: vLLM's own default
    # A share set for one role: the others split what it leaves; the total stays within 0.9.
    embed = ("embed:vllm", "Qwen/Qwen3-Embedding-0.6B")
    shares = split([*roles, RoleEngine("embedder", embed, 0.1)])
    assert shares["embedder"] == 0.1 and shares["generator"] == shares["base_model"] == 0.4
    assert sum({shares["generator"], shares["base_model"], shares["embedder"]}) <= gpu_share.TOTAL + 1e-9


def test_a_split_that_cannot_work_fails_naming_the_variables() -> None:
    a, b = ("vllm", "a"), ("vllm", "b")
    with pytest.raises(
        ValueError, match=r"add up to 1\.30 > 0\.9.*RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION \(0\.7\)"
    ):
        split([RoleEngine("generator", a, 0.7), RoleEngine("base_model", b, 0.6)])
    with pytest.raises(
        ValueError, match=r"set RAGSFT_BASE_MODEL_GPU_MEMORY_UTILIZATION, RAGSFT_EMBEDDER_ENGINE_KWARGS="
    ):
        split([RoleEngine("generator", a, 0.88), RoleEngine("base_model", b), RoleEngine("embedder", ("e",))])


def test_engine_share_counts_the_engines_the_environment_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import ragsft_assets.defs.resources  # noqa: F401  (registers the environment's roles)

    for role in ("GENERATOR", "JUDGE", "ANNOTATOR"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", "vllm")
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", "Qwen/Qwen3-8B")
    monkeypatch.setenv("RAGSFT_BASE_MODEL_BACKEND", "vllm")
    monkeypatch.setenv("RAGSFT_BASE_MODEL_MODEL", "Qwen/Qwen3-4B-Base")
    monkeypatch.setenv("RAGSFT_EMBEDDER_BACKEND", "vllm")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MODEL", "Qwen/Qwen3-Embedding-0.6B")
    roles = {r.role: r for r in gpu_share.roles_on_gpu()}
    assert set(roles) == {"generator", "judge", "annotator", "base_model", "embedder"}
    assert roles["generator"].engine == roles["judge"].engine != roles["base_model"].engine
    assert gpu_share.engine_share("Qwen/Qwen3-8B") == 0.3  # three engines: chat, base, embedding
    monkeypatch.setenv("RAGSFT_EMBEDDER_ENGINE_KWARGS", '{"gpu_memory_utilization": 0.1}')
    assert gpu_share.engine_share("Qwen/Qwen3-4B-Base") == 0.4
    # A model that no role of the environment names (set from the launchpad) is one engine more.
    assert gpu_share.engine_share("other/model") == round(0.8 / 3, 4)
    monkeypatch.setenv("RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION", "0.85")
    with pytest.raises(ValueError, match=r"RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION \(0\.85\)"):
        gpu_share.engine_share("Qwen/Qwen3-4B-Base")


@pytest.mark.gpu
def test_a_chat_model_and_an_embedder_start_side_by_side_on_one_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two models, two engines, one GPU: with vLLM's 0.9 each the second could not start."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from ragsft_assets.llm.models import ensure_embedded_model
    from ragsft_assets.llm.types import SamplingParams
    from ragsft_assets.resources.embedder import EmbeddingResource, embedded_embedder_folder
    from ragsft_assets.resources.llm import LLMResource

    chat_model, embed_model = str(ensure_embedded_model()), str(embedded_embedder_folder())
    for role in ("GENERATOR", "JUDGE", "ANNOTATOR", "BASE_MODEL"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", "vllm")
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", chat_model)
    monkeypatch.setenv("RAGSFT_EMBEDDER_BACKEND", "vllm")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MODEL", embed_model)
    assert gpu_share.engine_share(chat_model) == gpu_share.engine_share(embed_model) == 0.45
    chat = LLMResource(backend="vllm", model=chat_model, role="generator", cache_dir=str(tmp_path))
    embedder = EmbeddingResource(backend="vllm", model=embed_model, cache_dir=str(tmp_path))
    try:
        out = chat.chat([[{"role": "user", "content": "Say hello."}]], SamplingParams(max_tokens=8))
        assert out.results[0].status == "ok", out.results[0].error
        vectors = embedder.embed(["A ship sails at dawn."]).vectors
        assert vectors.shape == (1, 384)
    finally:
        embedder.close()
        chat.close()
