"""The LLM layer: one interface for chat batches, several real backends, one cache.

Heavy backends (vLLM, torch) are imported inside the backend that needs them,
never at module import, so the code server, the CLI and most tests stay light.

- ``types``: the contract (``ChatModel``, ``SamplingParams``, ``ChatResult``, ``BatchResult``).
- ``client``: ``ChatClient`` (cache, budget, progress, parsing over any backend), ``chat_samples``.
- ``cache``: the content-addressed SQLite cache; ``engines``: one backend per process and model.
- ``backends``: ``vllm`` (in-process engine, GPU or CPU) and ``openai`` (HTTP).
- ``models``: the embedded SmolLM2 model (GGUF -> safetensors once) and ``count_tokens``.
- ``serve``: a local ``vllm serve`` process started, reused and stopped by the project.
The Dagster resource is ``ragsft_assets.resources.llm.LLMResource``.
"""

from ragsft_assets.llm.cache import cache_key
from ragsft_assets.llm.client import BudgetExceeded, ChatClient, SamplesResult, chat_samples
from ragsft_assets.llm.models import count_tokens
from ragsft_assets.llm.types import (
    STATUS_ERROR,
    STATUS_OK,
    STATUS_UNREADABLE,
    BatchResult,
    BatchStats,
    ChatModel,
    ChatResult,
    CompletionModel,
    Message,
    SamplingParams,
)

__all__ = [
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNREADABLE",
    "BatchResult",
    "BatchStats",
    "BudgetExceeded",
    "ChatClient",
    "ChatModel",
    "CompletionModel",
    "ChatResult",
    "Message",
    "SamplesResult",
    "SamplingParams",
    "cache_key",
    "chat_samples",
    "count_tokens",
]
