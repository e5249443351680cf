"""A deterministic test double of the model (tests only, never in the package).

``ScriptedChatModel(responder)`` answers each conversation with ``responder(messages)``
and interprets the text exactly like the real backends do (reasoning split, JSON schema
validation, ``unreadable`` status). It counts every call it receives, so tests can
assert exact numbers of model calls. ``complete`` answers raw prompts (base-model role) and
``chat_template_kwargs`` are recorded per call in ``template_kwargs``, with the thinking switch
resolved like the real client does (``enable_thinking=`` plays the role's setting; a task's
``SamplingParams.enable_thinking`` shows there as ``{"enable_thinking": ...}``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.parsing import interpret
from ragsft_assets.llm.thinking import effective_request
from ragsft_assets.llm.types import BatchResult, BatchStats, ChatResult, Message, SamplingParams

Responder = Callable[[Sequence[Message]], str]


class ScriptedChatModel:
    def __init__(
        self, responder: Responder, model_id: str = "scripted-double", enable_thinking: bool | None = None
    ) -> None:
        self.responder = responder
        self.model_id = model_id
        self.enable_thinking = enable_thinking
        self.calls: list[list[dict[str, str]]] = []
        self.template_kwargs: list[dict[str, Any] | None] = []  # chat_template_kwargs per chat call
        self.prompts: list[str] = []  # every raw prompt ``complete`` received

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
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> BatchResult:
        stats = BatchStats(requests=len(conversations))
        results = []
        kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        if self.enable_thinking is not None or params.enable_thinking is not None:
            probe = Request([{"role": "user", "content": ""}], params, None, kwargs)
            kwargs = effective_request(probe, self.enable_thinking).chat_template_kwargs
        for conv in conversations:
            self.calls.append([dict(m) for m in conv])
            self.template_kwargs.append(kwargs)
            raw = self.responder(conv)
            answer, reasoning, parsed, status, error = interpret(raw, json_schema)
            ident = (self.model_id, params.to_dict(), [dict(m) for m in conv], template_version)
            key = sha256_hex(repr(ident + ((sorted(kwargs.items()),) if kwargs else ())))
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

    def run(self, requests: Sequence[Any], *, template_version: str = "", log: Any = None) -> BatchResult:
        """Requests that may differ in sampling settings (``ChatClient.run``), as one batch; ``runs``
        counts the batches received."""
        self.runs = getattr(self, "runs", 0) + 1
        results, stats = [], BatchStats()
        for r in requests:
            if r.is_completion:
                one = self.complete([r.prompt], r.params, template_version=template_version)
            else:
                one = self.chat(
                    [r.messages],
                    r.params,
                    json_schema=r.json_schema,
                    template_version=r.template_version
                    if r.template_version is not None
                    else template_version,
                    chat_template_kwargs=r.chat_template_kwargs,
                )
            results += one.results
            stats = stats.add(one.stats)
        return BatchResult(results=results, stats=stats)

    def complete(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        *,
        template_version: str = "",
        log: Any = None,
    ) -> BatchResult:
        """Raw-prompt completion: the responder sees the prompt as one user message.

        The text is cut at the first of ``params.stop`` like a real engine does.
        """
        stats = BatchStats(requests=len(prompts))
        results = []
        for prompt in prompts:
            self.prompts.append(prompt)
            raw = self.responder([{"role": "user", "content": prompt}])
            for stop in params.stop:
                if stop and stop in raw:
                    raw = raw[: raw.index(stop)]
            key = sha256_hex(repr(("completion", self.model_id, params.to_dict(), prompt, template_version)))
            res = ChatResult(
                text=raw,
                prompt_tokens=len(prompt.split()),
                completion_tokens=len(raw.split()),
                cache_key=key[:24],
            )
            stats.calls += 1
            stats.prompt_tokens += res.prompt_tokens
            stats.completion_tokens += res.completion_tokens
            results.append(res)
        return BatchResult(results=results, stats=stats)


class ScriptedBackend:
    """A chat backend for ``engines.register_backend``: a test's calls go through the real
    ``LLMResource`` client and its cache, and the text comes from :meth:`respond`.

    Subclasses set ``NAME`` (the backend in the identity, so in every cache key) and override
    ``respond``; the default fails the test, for runs that must make no chat call. ``calls``
    counts the requests of all instances of the subclass (reset it between runs).
    """

    NAME = "scripted"
    calls = 0

    def __init__(self, model: str) -> None:
        self.model = model

    def identity(self) -> dict[str, str]:
        return {"backend": self.NAME, "model": self.model, "weights_sha256": "0" * 64}

    def respond(self, messages: Sequence[Message]) -> str:
        raise AssertionError(f"{self.NAME}: this run must make no chat call")

    def generate(self, requests: Sequence[Any], on_result: Callable[[int, Any], None]) -> None:
        from ragsft_assets.llm.backends.base import Completion

        for i, r in enumerate(requests):
            type(self).calls += 1
            text = self.respond(r.messages)
            on_result(i, Completion(text=text, prompt_tokens=1, completion_tokens=len(text.split())))

    def close(self) -> None:
        pass
