"""The per-call chat-template switch and raw-prompt completion: keys, client, OpenAI body, double."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragsft_assets.defs.resources import default_resources, llm_for_role
from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets.llm.backends.openai_backend import OpenAIBackend, ServedModelError
from ragsft_assets.llm.cache import KEY_FORMAT, LLMCache, cache_key, canonical_json
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import STATUS_ERROR, ChatModel, CompletionModel, SamplingParams
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets_tests.fake_openai import FakeOpenAI
from ragsft_assets_tests.llm_double import ScriptedChatModel

IDENT = {"backend": "fake", "model": "m", "weights_sha256": "w"}
MSGS = [{"role": "user", "content": "hi"}]


class KindBackend:
    """Answers ``chat:<last message>|<kwargs>`` or ``completion:<prompt>``; a prompt 'bad' is an error."""

    def __init__(self) -> None:
        self.seen: list[Request] = []

    def identity(self) -> dict[str, str]:
        return dict(IDENT)

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, r in enumerate(requests):
            self.seen.append(r)
            if r.is_completion:
                if r.prompt == "bad":
                    on_result(i, Completion(error="boom"))
                    continue
                text = f"completion:{r.prompt} STOP"
                if r.params.stop and r.params.stop[0] in text:
                    text = text[: text.index(r.params.stop[0])]
            else:
                text = f"chat:{r.messages[-1]['content']}|{dict(r.chat_template_kwargs or {})}"
            on_result(i, Completion(text=text, completion_tokens=2))

    def close(self) -> None:
        pass


def test_cache_key_unchanged_without_new_fields_and_distinct_with_them() -> None:
    p = SamplingParams()
    plain = cache_key(IDENT, p, MSGS)
    assert cache_key(IDENT, p, MSGS, None, "", None, None) == plain
    assert cache_key(IDENT, p, MSGS, None, "", {}, None) == plain  # empty kwargs = not set
    no_think = cache_key(IDENT, p, MSGS, None, "", {"enable_thinking": False})
    think = cache_key(IDENT, p, MSGS, None, "", {"enable_thinking": True})
    assert len({plain, no_think, think}) == 3
    # A completion of a prompt never shares a key with a chat, even with empty messages.
    assert cache_key(IDENT, p, [], None, "", None, "hi") != cache_key(IDENT, p, [], None, "")
    # Pinned: keys of plain chats written before these fields existed must stay reachable.
    old_record = {
        "format": KEY_FORMAT,
        "model": IDENT,
        "params": p.to_dict(),
        "messages": MSGS,
        "json_schema": None,
        "template_version": "",
    }
    assert plain == sha256_hex(canonical_json(old_record))


def test_client_chat_kwargs_and_completion_are_cached_apart(tmp_path: Path) -> None:
    backend = KindBackend()
    client = ChatClient(backend, LLMCache(tmp_path), max_error_share=1.0)  # "bad" errs: a result here
    a = client.chat([MSGS], SamplingParams(), chat_template_kwargs={"enable_thinking": False})
    b = client.chat([MSGS], SamplingParams())
    assert a.results[0].text == "chat:hi|{'enable_thinking': False}"
    assert b.results[0].text == "chat:hi|{}"
    assert backend.seen[0].chat_template_kwargs == {"enable_thinking": False}
    assert backend.seen[1].chat_template_kwargs is None

    params = SamplingParams(stop=(" STOP",))
    c = client.complete(["The capital of France is", "bad"], params)
    assert [r.text for r in c.results[:1]] == ["completion:The capital of France is"]
    assert c.results[1].status == STATUS_ERROR and c.stats.errors == 1
    assert backend.seen[2].messages == () and backend.seen[2].params.stop == (" STOP",)

    n = len(backend.seen)
    again = client.complete(["The capital of France is", "bad"], params)
    assert again.results[0].cached and again.stats.cache_hits == 1
    assert len(backend.seen) == n + 1  # only the errored prompt is retried: errors are not cached
    again = client.chat([MSGS], SamplingParams(), chat_template_kwargs={"enable_thinking": False})
    assert again.results[0].cached and again.results[0].text == a.results[0].text


def test_openai_body_and_completions_endpoint() -> None:
    def answer(path: str, body: dict) -> tuple[int, dict, dict]:
        if path.endswith("/completions") and "prompt" in body:
            return 200, {}, {"choices": [{"text": " Paris", "finish_reason": "stop"}]}
        return 200, {}, {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}

    with FakeOpenAI(answer).running() as server:
        backend = OpenAIBackend([server.url], "served")
        out: dict[int, Completion] = {}
        reqs = [
            Request(MSGS, SamplingParams(), None, {"enable_thinking": False}),
            Request((), SamplingParams(stop=("\n",)), None, None, "The capital of France is"),
            Request(MSGS, SamplingParams()),
        ]
        backend.concurrency = 1
        backend.generate(reqs, lambda i, c: out.__setitem__(i, c))
        backend.close()
    assert out[0].text == "ok" and out[1].text == " Paris" and out[2].text == "ok"
    assert server.peak == 1  # the per-URL limit
    hits = list(zip(server.paths, server.bodies, strict=True))
    by_path = sorted(hits, key=lambda h: (h[0], "prompt" in h[1], "chat_template_kwargs" in h[1]))
    chat_plain, chat_kw, completion = by_path
    assert chat_kw[0] == "/v1/chat/completions" and chat_kw[1]["chat_template_kwargs"] == {
        "enable_thinking": False
    }
    assert "chat_template_kwargs" not in chat_plain[1]
    assert completion[0] == "/v1/completions"
    assert completion[1]["prompt"] == "The capital of France is" and completion[1]["stop"] == ["\n"]
    assert "messages" not in completion[1]


def test_protocols_double_and_resource() -> None:
    double = ScriptedChatModel(lambda msgs: "Paris.\nNext line")
    assert isinstance(double, ChatModel) and isinstance(double, CompletionModel)
    assert isinstance(LLMResource(), CompletionModel)
    res = double.complete(["Q: capital of France?\nA:"], SamplingParams(stop=("\n",)))
    assert res.results[0].text == "Paris." and double.prompts == ["Q: capital of France?\nA:"]
    a = double.chat([MSGS], SamplingParams(), chat_template_kwargs={"enable_thinking": False})
    b = double.chat([MSGS], SamplingParams())
    assert double.template_kwargs == [{"enable_thinking": False}, None]
    assert a.results[0].cache_key != b.results[0].cache_key


def test_engine_settings_from_role_env_reach_the_vllm_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RAGSFT_ANNOTATOR_BACKEND": "vllm",
        "RAGSFT_ANNOTATOR_MODEL": "Qwen/Qwen3-8B",
        "RAGSFT_ANNOTATOR_TENSOR_PARALLEL_SIZE": "2",
        "RAGSFT_ANNOTATOR_GPU_MEMORY_UTILIZATION": "0.85",
        "RAGSFT_ANNOTATOR_MAX_MODEL_LEN": "16384",
        "RAGSFT_ANNOTATOR_MAX_NUM_SEQS": "256",
        "RAGSFT_ANNOTATOR_DTYPE": "bfloat16",
        "RAGSFT_ANNOTATOR_QUANTIZATION": "fp8",
        "RAGSFT_ANNOTATOR_ENGINE_KWARGS": '{"swap_space": 8, "max_num_seqs": 1}',
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert "annotator" in default_resources()
    res = llm_for_role("annotator")
    assert res.role == "annotator" and res.max_model_len == 16384
    want = {
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.85,
        "max_num_seqs": 256,  # the named setting wins over the same key in engine_kwargs
        "dtype": "bfloat16",
        "quantization": "fp8",
        "swap_space": 8,
    }
    assert res.engine_settings() == want
    kind, options = res._backend_options()
    handle, backend = engines.acquire(kind, **options)
    try:
        assert backend.engine_kwargs == want and backend.max_model_len == 16384  # engine not started
    finally:
        engines.release(handle)
    monkeypatch.setenv("RAGSFT_ANNOTATOR_MAX_NUM_SEQS", "many")
    with pytest.raises(ValueError, match="RAGSFT_ANNOTATOR_MAX_NUM_SEQS"):
        llm_for_role("annotator")
    monkeypatch.setenv("RAGSFT_ANNOTATOR_MAX_NUM_SEQS", "4")
    monkeypatch.setenv("RAGSFT_ANNOTATOR_ENGINE_KWARGS", "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        llm_for_role("annotator").engine_settings()


def _models_backend(entries: list[dict], **kw: Any) -> tuple[OpenAIBackend, list[str]]:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return httpx.Response(200, json={"object": "list", "data": entries})

    backend = OpenAIBackend(["http://fleet/v1"], "generator", **kw)
    backend._client = httpx.Client(transport=httpx.MockTransport(handler))
    return backend, paths


def test_openai_identity_from_v1_models(caplog: pytest.LogCaptureFixture) -> None:
    entry = {"id": "generator", "root": "/models/Qwen3-8B", "max_model_len": 32768}
    backend, paths = _models_backend([{"id": "other", "root": "x"}, entry])
    assert backend.identity()["weights_sha256"] == "served:/models/Qwen3-8B"
    assert backend.served_model() == entry
    backend.identity()
    assert paths == ["/v1/models"]  # read once: the identity cannot change mid-run

    pinned, paths = _models_backend([entry], weights_id="sha256:abc")
    assert pinned.identity()["weights_sha256"] == "sha256:abc"

    # A model no URL serves fails at start and lists what is served; unknown weights only on request.
    missing, _ = _models_backend([{"id": "other", "root": "x"}])
    with pytest.raises(ServedModelError, match=r"no URL serves it; served: \['other'\]"):
        missing.identity()
    unknown, _ = _models_backend([{"id": "generator"}], weights_id="unknown")
    with caplog.at_level("WARNING"):
        assert unknown.identity()["weights_sha256"] == "unknown"
    assert "set explicitly" in caplog.text and "set explicitly" in unknown.served_model()["weights_note"]


def test_a_role_left_on_the_embedded_model_without_vllm_fails_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    for role in ("generator", "judge", "annotator", "base_model"):
        monkeypatch.delenv(f"RAGSFT_{role.upper()}_BACKEND", raising=False)
    monkeypatch.setenv("RAGSFT_GENERATOR_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_GENERATOR_BASE_URLS", "http://vllm-chat:8000/v1")
    assert llm_for_role("generator").backend == "openai"
    with pytest.raises(RuntimeError, match="RAGSFT_JUDGE_BACKEND=openai.*RAGSFT_JUDGE_BASE_URLS"):
        default_resources()


def test_chat_samples_passes_chat_template_kwargs_on_both_paths(tmp_path: Path) -> None:
    from ragsft_assets.llm.client import chat_samples

    no_think = {"enable_thinking": False}
    backend = KindBackend()
    client = ChatClient(backend, LLMCache(tmp_path / "c.sqlite"))
    out = chat_samples(client, [MSGS], SamplingParams(seed=3), 2, chat_template_kwargs=no_think)
    assert [r.text for r in out.samples[0]] == ["chat:hi|{'enable_thinking': False}"] * 2
    assert [r.chat_template_kwargs for r in backend.seen] == [no_think, no_think]
    # Part of the cache key: the same samples without the switch are new calls, with it hits.
    assert chat_samples(client, [MSGS], SamplingParams(seed=3), 2).stats.calls == 2
    again = chat_samples(client, [MSGS], SamplingParams(seed=3), 2, chat_template_kwargs=no_think)
    assert again.stats.cache_hits == 2 and again.stats.calls == 0
    # A ChatModel without run(): the kwargs reach every chat() call.
    double = ScriptedChatModel(lambda conv: "ok")
    chat_samples(double, [MSGS], SamplingParams(), 2, chat_template_kwargs=no_think)
    assert double.template_kwargs == [no_think, no_think]


def test_served_root_and_max_model_len_reach_asset_metadata_not_cache_keys(tmp_path: Path) -> None:
    from ragsft_assets.defs.metadata import model_metadata

    entry = {"id": "generator", "root": "/models/Qwen3-8B", "max_model_len": 32768}
    backend, paths = _models_backend([entry])
    client = ChatClient(backend, None)
    identity = client.model_identity()
    assert identity["served_root"] == "/models/Qwen3-8B" and identity["served_max_model_len"] == 32768
    md = model_metadata(client, "generator")["generator/model"].data
    assert md["served_root"] == "/models/Qwen3-8B" and md["served_max_model_len"] == 32768
    assert md["weights_sha256"] == "served:/models/Qwen3-8B"
    assert "served_max_model_len" not in backend.identity()  # cache keys: backend.identity() only
    assert paths == ["/v1/models"]  # still read once
    # Weights unknown by the user's explicit choice: the metadata says so.
    unknown, _ = _models_backend([{"id": "generator"}], weights_id="unknown")
    md = model_metadata(ChatClient(unknown, None), "judge")["judge/model"].data
    assert md["weights_sha256"] == "unknown" and "set explicitly" in md["weights_note"]
