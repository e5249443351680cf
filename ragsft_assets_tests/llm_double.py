"""A deterministic test double of the model (tests only, never in the package).

``ScriptedChatModel(responder)`` answers each conversation with ``responder(messages)``
and interprets the text exactly like the real backends do (reasoning split, JSON schema
validation, ``unreadable`` status). It counts every call it receives, so tests can
assert exact numbers of model calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm.parsing import interpret
from ragsft_assets.llm.types import BatchResult, BatchStats, ChatResult, Message, SamplingParams

Responder = Callable[[Sequence[Message]], str]


class ScriptedChatModel:
    def __init__(self, responder: Responder, model_id: str = "scripted-double") -> None:
        self.responder = responder
        self.model_id = model_id
        self.calls: list[list[dict[str, str]]] = []

    def model_identity(self) -> dict[str, str]:
        return {"backend": "double", "model": self.model_id, "weights_sha256": "0" * 64}

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        *,
        json_schema: Mapping[str, Any] | None = None,
        template_version: str = "",
        log: Any = None,
    ) -> BatchResult:
        stats = BatchStats(requests=len(conversations))
        results = []
        for conv in conversations:
            self.calls.append([dict(m) for m in conv])
            raw = self.responder(conv)
            answer, reasoning, parsed, status, error = interpret(raw, json_schema)
            key = sha256_hex(
                repr((self.model_id, params.to_dict(), [dict(m) for m in conv], template_version))
            )
            res = ChatResult(
                text=answer,
                status=status,
                parsed=parsed,
                reasoning=reasoning,
                prompt_tokens=sum(len(m["content"].split()) for m in conv),
                completion_tokens=len(raw.split()),
                cache_key=key[:24],
                error=error,
            )
            stats.calls += 1
            stats.prompt_tokens += res.prompt_tokens
            stats.completion_tokens += res.completion_tokens
            stats.unreadable += status == "unreadable"
            results.append(res)
        return BatchResult(results=results, stats=stats)
