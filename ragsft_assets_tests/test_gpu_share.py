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
    assert gpu_share.engine_share("other/model") == 0.2666  # 0.8 / 3, rounded down: never above 0.9
    monkeypatch.setenv("RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION", "0.85")
    with pytest.raises(ValueError, match=r"RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION \(0\.85\)"):
        gpu_share.engine_share("Qwen/Qwen3-4B-Base")


GIB = gpu_share.GIB
CHAT, BASE, EMBED = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B", "Qwen/Qwen3-Embedding-0.6B"


def _need(model: str, context: int) -> int:
    size = gpu_share.model_size(model)
    assert size is not None
    return size.need(context)


def test_the_split_follows_each_engines_size_and_refuses_what_cannot_fit() -> None:
    # Engine identities as llm.engines keys them: (kind, *options, engine settings as JSON).
    chat = RoleEngine("generator", ("vllm", ("model", CHAT), "{}"), None, _need(CHAT, 8192))
    embed = RoleEngine("embedder", ("embed:vllm", ("model", EMBED), "{}"), None, _need(EMBED, 8192))
    base = RoleEngine("base_model", ("vllm", ("model", BASE), "{}"), None, _need(BASE, 4096))
    card = 22 * GIB  # a 24 GB card as torch reports it
    shares = split([chat, embed], gpu_bytes=card)
    # Not 0.45 each: the 7B chat model gets what it needs, the 0.6B embedder what it needs, and the
    # rest in proportion; together at most 0.9.
    assert shares["generator"] * card >= chat.need and shares["embedder"] * card >= embed.need
    assert shares["generator"] > 4 * shares["embedder"]
    assert shares["generator"] + shares["embedder"] <= gpu_share.TOTAL
    # Three engines do not fit 0.9 of 22 GiB: refused, with every engine's need and the GPU's.
    with pytest.raises(ValueError) as err:
        split([chat, embed, base], gpu_bytes=card)
    text = str(err.value)
    assert "need 34.0 GiB" in text and "generator (Qwen/Qwen2.5-7B-Instruct) 15.6 GiB" in text
    assert "base_model (Qwen/Qwen2.5-7B) 15.4 GiB" in text and "is 19.8 GiB" in text
    assert "RAGSFT_GENERATOR_GPU_MEMORY_UTILIZATION" in text
    # On 40 GB they fit, each with at least its need.
    big = int(39.4 * GIB)
    shares = split([chat, embed, base], gpu_bytes=big)
    assert all(shares[r.role] * big >= (r.need or 0) for r in (chat, embed, base))
    # A set share is kept; the others split what is left by size, and must still fit in it.
    shares = split([chat, RoleEngine("embedder", embed.engine, 0.1, embed.need)], gpu_bytes=card)
    assert shares["embedder"] == 0.1 and shares["generator"] == 0.8
    with pytest.raises(ValueError, match=r"need 15\.6 GiB"):
        split([chat, RoleEngine("embedder", embed.engine, 0.3)], gpu_bytes=card)
    # An unknown size: equal parts, but a known need above its part is refused with the numbers.
    unknown = RoleEngine("judge", ("vllm", ("model", "someone/unknown"), "{}"), None, None)
    with pytest.raises(ValueError, match=r"needs 15\.6 GiB but its equal part 0\.450"):
        split([chat, unknown], gpu_bytes=card)


def test_model_size_reads_the_weights_and_config_of_a_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512}'
    )
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.truncate(123_456_789)  # a sparse file: only its size counts
    size = gpu_share.model_size(str(tmp_path))
    assert size is not None and size.weights_bytes == 123_456_789
    assert size.kv_bytes_per_token == 2 * 4 * 2 * (512 // 8) * 2  # K and V, layers, KV heads, head size, bf16
    assert size.need(1000) == 123_456_789 + 1000 * size.kv_bytes_per_token + gpu_share.OVERHEAD_BYTES
    assert gpu_share.model_size("someone/not-known") is None
    assert gpu_share.model_size(CHAT) == gpu_share.KNOWN_MODELS[CHAT]


def test_the_split_counts_only_the_roles_the_runs_selection_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat-only run: the chat engine alone (0.9), though the environment also sets a base model
    and an embedder on vLLM."""
    import dagster as dg

    import ragsft_assets.defs.resources  # noqa: F401  (registers the providers)

    for role in ("GENERATOR", "JUDGE", "ANNOTATOR"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", "vllm")
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", CHAT)
    monkeypatch.setenv("RAGSFT_BASE_MODEL_BACKEND", "vllm")
    monkeypatch.setenv("RAGSFT_BASE_MODEL_MODEL", BASE)
    monkeypatch.setenv("RAGSFT_EMBEDDER_BACKEND", "vllm")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MODEL", EMBED)
    seen: dict[str, object] = {}

    @dg.asset(required_resource_keys={"generator", "judge"})
    def chat_step() -> None:
        seen["roles"] = sorted(r.role for r in gpu_share.roles_on_gpu())
        seen["share"] = gpu_share.engine_share(CHAT, gpu_bytes=22 * GIB)

    @dg.asset(required_resource_keys={"embedder", "base_model"})
    def other_step() -> None:
        """Not selected below."""

    none = dg.ResourceDefinition.none_resource()
    resources = {k: none for k in ("generator", "judge", "embedder", "base_model")}
    assert dg.materialize([chat_step, other_step], selection=[chat_step], resources=resources).success
    assert seen == {"roles": ["generator", "judge"], "share": 0.9}
    # Outside a run, every role of the environment counts: three engines, which 22 GiB cannot hold.
    assert {r.role for r in gpu_share.roles_on_gpu()} == {
        "generator",
        "judge",
        "annotator",
        "base_model",
        "embedder",
    }
    with pytest.raises(ValueError, match=r"need 3\d\.\d GiB .*base_model \(Qwen/Qwen2\.5-7B\)"):
        gpu_share.engine_share(CHAT, gpu_bytes=22 * GIB)


# docs/one-gpu.md's setups (its variables): the models and context lengths of the engines each starts.
SETUPS = {
    "chat roles only": [(CHAT, 8192)],
    "chat roles + embedder": [(CHAT, 8192), (EMBED, 8192)],
    "chat roles + base model": [(CHAT, 8192), (BASE, 4096)],
    "every role (chat, base model, embedder)": [(CHAT, 8192), (BASE, 4096), (EMBED, 8192)],
}


def test_the_docs_give_the_smallest_card_of_each_setup() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "one-gpu.md").read_text()
    assert "24 GB to 80 GB" not in doc  # what the page claimed: every role does not fit 24 GB
    for setup, engines in SETUPS.items():
        needs = [_need(m, c) for m, c in engines]
        card = gpu_share.smallest_card(needs)
        assert card is not None
        row = f"| {setup} | {sum(needs) / GIB:.1f} GiB | {card} |"
        assert row in doc, row
    assert gpu_share.smallest_card([200 * GIB]) is None


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
    # By size: each engine its need and a part of the rest in proportion; together at most 0.9.
    assert gpu_share.engine_share(chat_model) + gpu_share.engine_share(embed_model) <= gpu_share.TOTAL
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
