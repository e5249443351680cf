"""``chat`` and ``complete`` as one batch of ``Request``s through the model's own ``run``.

``ChatClient`` runs the batch itself and ``LLMResource`` hands it to its client, so both answer
chats and completions by this one definition (``llm.types`` holds the protocols they meet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.types import BatchResult, Message, SamplingParams


class RunsRequests:
    """Mixin of a ``ChatModel`` and ``CompletionModel`` whose ``run(requests, *, template_version,
    log)`` answers a batch of ``Request``s: ``chat`` and ``complete`` are one such batch each."""

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        *,
        json_schema: Mapping[str, Any] | None = None,
        template_version: str = "",
        log: Any = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> BatchResult:
        """Answer every conversation (see ``ChatModel.chat``); one result per conversation, in order."""
        kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        requests = [Request(conv, params, json_schema, kwargs) for conv in conversations]
        return self.run(requests, template_version=template_version, log=log)  # type: ignore[attr-defined]

    def complete(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        *,
        template_version: str = "",
        log: Any = None,
    ) -> BatchResult:
        """Continue every raw prompt (base models: no chat template); see ``CompletionModel.complete``.

        Same cache, budget, progress, statuses and stop sequences as ``chat``; a completion's
        cache key never equals a chat's.
        """
        requests = [Request((), params, None, None, prompt) for prompt in prompts]
        return self.run(requests, template_version=template_version, log=log)  # type: ignore[attr-defined]
