"""Plain data types of the LLM layer: what every stage sends and gets back.

This module is the contract between the stages and the backends. Stages only
ever see ``ChatModel.chat`` and these dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}

STATUS_OK = "ok"
STATUS_UNREADABLE = "unreadable"  # text does not parse or does not match the schema; raw text kept
STATUS_ERROR = "error"  # the backend gave up (retries exhausted); the error is in `error`


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling parameters; part of every cache key.

    ``enable_thinking`` is the task's default for the model's thinking mode (None: the model's
    own default); a role's ``enable_thinking`` setting wins over it. ``thinking_max_tokens`` is the
    task's token budget when the call does think (reasoning + answer; None: ``max_tokens``). The
    client resolves both before a call (``llm.thinking.effective_request``): the cache key holds
    the resolved ``chat_template_kwargs`` and ``max_tokens``, never these two fields.
    """

    temperature: float = 0.0
    max_tokens: int = 256
    seed: int = 0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    enable_thinking: bool | None = None
    thinking_max_tokens: int | None = None

    def with_seed(self, seed: int) -> SamplingParams:
        return replace(self, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        # Absent when unset, so the keys of calls made before these fields existed are unchanged.
        for name in ("enable_thinking", "thinking_max_tokens"):
            if d[name] is None:
                del d[name]
        return d


@dataclass(slots=True)
class ChatResult:
    """One conversation's answer. Never raises: problems are a status."""

    text: str
    status: str = STATUS_OK
    parsed: Any = None  # the JSON object when a schema was given and the text matched it
    reasoning: str | None = None  # <think>...</think> or the backend's reasoning field
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_key: str = ""
    cached: bool = False
    error: str | None = None
    # A short machine-readable reason for a non-ok status: ``truncated_in_reasoning`` (the output
    # ended inside the model's reasoning, so there is no answer), ``truncated`` (cut at max_tokens),
    # ``unreadable`` (did not parse or match the schema), ``error`` (the backend gave up).
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


@dataclass(slots=True)
class BatchStats:
    """Per-batch operations numbers, attached by the stages to their asset metadata.

    The transport numbers come from HTTP backends (zero elsewhere): ``retries`` (attempts after
    the first, 429s included), ``http_429`` (rate-limit answers), ``in_flight_max`` (most requests
    in flight at once; for the offline engine, the most sequences its scheduler ran at once) and ``in_flight_mean`` (the effective concurrency: request-seconds in
    flight over the seconds the backend was busy), ``url_set_asides`` (a failing URL set aside
    for a cool-down). ``truncated_in_reasoning`` counts answers cut off inside the model's
    reasoning (``unreadable``, reason ``truncated_in_reasoning``), cached ones included.
    """

    requests: int = 0
    calls: int = 0  # requests that reached the model (not served from the cache)
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unreadable: int = 0
    errors: int = 0
    wall_s: float = 0.0
    retries: int = 0
    http_429: int = 0
    in_flight_max: int = 0
    in_flight_mean: float = 0.0
    url_set_asides: int = 0
    truncated_in_reasoning: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def add(self, other: BatchStats) -> BatchStats:
        """The stats of two batches run one after the other (sums; the larger peak; the mean
        concurrency weighted by wall time)."""
        out = BatchStats(
            **{
                f: getattr(self, f) + getattr(other, f)
                for f in self.__dataclass_fields__
                if f not in ("in_flight_max", "in_flight_mean")
            }
        )
        out.in_flight_max = max(self.in_flight_max, other.in_flight_max)
        if out.wall_s > 0:
            out.in_flight_mean = (
                self.in_flight_mean * self.wall_s + other.in_flight_mean * other.wall_s
            ) / out.wall_s
        return out

    def to_metadata(self, prefix: str = "llm") -> dict[str, float | int]:
        return {
            f"{prefix}/requests": self.requests,
            f"{prefix}/calls": self.calls,
            f"{prefix}/cache_hits": self.cache_hits,
            f"{prefix}/prompt_tokens": self.prompt_tokens,
            f"{prefix}/completion_tokens": self.completion_tokens,
            f"{prefix}/unreadable": self.unreadable,
            f"{prefix}/truncated_in_reasoning": self.truncated_in_reasoning,
            f"{prefix}/errors": self.errors,
            f"{prefix}/wall_s": round(self.wall_s, 3),
            f"{prefix}/tokens_per_s": round(self.tokens_per_s, 1),
            f"{prefix}/retries": self.retries,
            f"{prefix}/http_429": self.http_429,
            f"{prefix}/in_flight_max": self.in_flight_max,
            f"{prefix}/in_flight_mean": round(self.in_flight_mean, 1),
            f"{prefix}/url_set_asides": self.url_set_asides,
        }


@dataclass(slots=True)
class BatchResult:
    results: list[ChatResult] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)


ProgressFn = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True, slots=True)
class Request:
    """One call: a chat (``messages``) or a raw-prompt completion (``prompt``, messages empty).

    ``chat_template_kwargs`` go to the model's chat template (e.g. ``{"enable_thinking": False}``);
    ``prompt`` set means a completion of that text as is (base models), no chat template.
    """

    messages: Sequence[Message]
    params: SamplingParams
    json_schema: Mapping[str, Any] | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    prompt: str | None = None
    # The prompt template's version of this request (in its cache key); None: the batch's. Lets
    # one batch carry several tasks (e.g. the three judges of rag_verdicts) with their own keys.
    template_version: str | None = None

    @property
    def is_completion(self) -> bool:
        return self.prompt is not None


@runtime_checkable
class ChatModel(Protocol):
    """What every stage talks to. ``LLMResource`` and the tests' double implement it."""

    def model_identity(self) -> dict[str, str]:
        """Backend, model id and weights hash: recorded in provenance, part of cache keys."""
        ...

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
        """Answer every conversation; one ChatResult per conversation, in order.

        Args:
            conversations: chat message lists.
            params: sampling parameters (the seed is per request: callers that
                want N samples send N copies with ``params.with_seed(seed + i)``
                via ``chat_samples``).
            json_schema: when given, constrained/validated JSON output; a result
                that does not match gets status ``unreadable`` and keeps its text.
            template_version: the prompt template hash; part of the cache key.
            log: a logger (Dagster's context.log) for progress lines.
            chat_template_kwargs: per-call arguments of the model's chat template, e.g.
                ``{"enable_thinking": False}``; part of the cache key when set.

        By default one batch of ``Request``s through ``run``: ``ChatClient`` inherits it and
        ``LLMResource`` takes it, so the two answer a chat the same way.
        """
        kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        requests = [Request(conv, params, json_schema, kwargs) for conv in conversations]
        return self.run(requests, template_version=template_version, log=log)

    def run(self, requests: Sequence[Any], *, template_version: str = "", log: Any = None) -> BatchResult:
        """Answer requests (``llm.types.Request``) that differ in sampling, schema or template
        version, as one batch; one ChatResult per request, in order."""
        ...


@runtime_checkable
class CompletionModel(Protocol):
    """Raw-prompt completion (base models): ``LLMResource`` and the tests' double implement it."""

    def model_identity(self) -> dict[str, str]: ...

    def complete(
        self,
        prompts: Sequence[str],
        params: SamplingParams,
        *,
        template_version: str = "",
        log: Any = None,
    ) -> BatchResult:
        """Continue every prompt as is (no chat template); one ChatResult per prompt, in order.

        Same cache, budget, statuses and stop sequences (``params.stop``) as ``ChatModel.chat``;
        the text is the continuation only, and a completion's cache key never equals a chat's. By
        default one batch of ``Request``s through the model's ``run`` (as ``ChatModel.chat``).
        """
        requests = [Request((), params, None, None, prompt) for prompt in prompts]
        return self.run(requests, template_version=template_version, log=log)  # type: ignore[attr-defined]
