"""ModelEndpoint: the chat and embedding roles reach a model with the same settings, checked once."""

from __future__ import annotations

import pytest

from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.llm import LLMResource

TRANSPORT = {"api_key_env": "RAGSFT_TEST_KEY", "concurrency": 7, "timeout_s": 3.0, "max_retries": 2}


def test_vllm_without_a_model_fails_naming_the_role() -> None:
    for res in (LLMResource(backend="vllm", role="judge"), EmbeddingResource(backend="vllm")):
        with pytest.raises(ValueError, match=rf"^{res.role}: backend 'vllm' needs `model`"):
            res._backend_options()
    kind, options = LLMResource(backend="vllm", model="org/m")._backend_options()
    assert kind == "vllm" and options["model"] == "org/m"


def test_chat_and_embedding_backends_get_the_same_http_options() -> None:
    urls = ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]
    common = dict(backend="openai", base_urls=urls, model="m", weights_id="w", **TRANSPORT)
    chat_kind, chat = LLMResource(**common, role="judge")._backend_options()
    embed_kind, embed = EmbeddingResource(**common)._backend_options()
    assert (chat_kind, embed_kind) == ("openai", "embed:openai")
    shared = {"base_urls": tuple(urls), "model": "m", "weights_id": "w", "backoff_s": 1.0, **TRANSPORT}
    assert {k: chat[k] for k in shared} == shared == {k: embed[k] for k in shared}
    assert chat["json_mode"] == "json_schema" and chat["role"] == "judge"  # each kind's own on top
    assert embed["per_request"] == 64 and embed["role"] == "embedder"
