"""The LLM layer: one interface for chat batches, several real backends, one cache.

Heavy backends (vLLM, torch) are imported inside the backend that needs them,
never at module import, so the code server, the CLI and most tests stay light.
"""

from ragsft_assets.llm.types import (
    STATUS_ERROR,
    STATUS_OK,
    STATUS_UNREADABLE,
    BatchResult,
    BatchStats,
    ChatModel,
    ChatResult,
    Message,
    SamplingParams,
)

__all__ = [
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNREADABLE",
    "BatchResult",
    "BatchStats",
    "ChatModel",
    "ChatResult",
    "Message",
    "SamplingParams",
]
