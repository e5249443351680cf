"""The batch runner every backend shares: cache, budget, progress, parsing, stats.

``ChatClient(backend, cache)`` implements the ``ChatModel`` protocol of ``llm.types``. One
``chat`` call:

1. computes each request's content address and serves hits from the cache (duplicates
   inside a batch are generated once);
2. estimates the calls and tokens still to make and refuses the whole batch
   (``BudgetExceeded``, before any call) when that would pass the configured budget;
3. sends the misses to the backend in slices; every completed call is written to the cache
   the moment it is reported, so a killed process loses only the calls in flight;
4. logs progress (done/total, rate, ETA) during long batches;
5. interprets every text the same way (``<think>`` split or the server's reasoning field, JSON
   schema validation): a text that does not parse is ``unreadable``, an answer cut off inside
   its reasoning is ``unreadable`` with reason ``truncated_in_reasoning`` (its reasoning never
   becomes the answer), and a request the backend gave up on is ``error``; nothing raises for
   one bad answer, and errors are not cached (a rerun retries them);
6. fails the batch (``TransportErrors``, ``llm.transport_errors``) when more than
   ``max_error_share`` of its requests ended in a transport error: every LLM stage of every
   family goes through here, so none publishes output built from failed calls. Unreadable
   answers are counted apart and never fail it. A fleet that is down for good stops the batch
   sooner (the backend's ``FleetDown``); either way what was answered is cached.

Before step 1 each request's thinking switch and budget are resolved (role over task over the
model's default, see ``llm.thinking``): the cache key is that of the request as sent.

Token counts in ``BatchStats`` are those of the calls made in this batch (cache hits cost
nothing); each ``ChatResult`` carries its own counts either way.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm.backends.base import Backend, Completion, Request, TransportStats
from ragsft_assets.llm.cache import LLMCache, canonical_json, request_record
from ragsft_assets.llm.parsing import interpret
from ragsft_assets.llm.thinking import effective_request, thinks
from ragsft_assets.llm.transport_errors import TransportErrors, share_failure, transport_kinds
from ragsft_assets.llm.types import (
    STATUS_ERROR,
    STATUS_UNREADABLE,
    BatchResult,
    BatchStats,
    ChatModel,
    ChatResult,
    CompletionModel,
    Message,
    SamplingParams,
)
from ragsft_assets.masking import mask_text
from ragsft_assets.recipes import MAX_TRANSPORT_ERROR_SHARE

_log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.0  # a deliberately low ratio: the budget estimate errs on the expensive side


# what is told, as the requests of a ``run`` on this thread stop being in flight (see ``each_answer``)
_SETTLED: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar(
    "ragsft_settled", default=None
)


@contextlib.contextmanager
def each_answer(settled: Callable[[int], None]) -> Iterator[None]:
    """Within the block, every ``ChatClient.run`` this thread makes calls ``settled(n)`` as ``n``
    of its requests stop being in flight: the cache hits at once, then each call as it answers
    or fails, its duplicates in the batch with it, from the thread the backend reports answers
    on: ``settled`` must be thread-safe and quick. A stream's budget uses it to count the
    requests that really are in flight, not a batch's until its slowest call answers."""
    token = _SETTLED.set(settled)
    try:
        yield
    finally:
        _SETTLED.reset(token)


class BudgetExceeded(RuntimeError):
    """A batch would pass the configured call or token budget; nothing was sent."""


def estimate_tokens(requests: Sequence[Request]) -> int:
    """Upper-side estimate of the tokens a list of requests costs: prompt chars / 3 + max_tokens."""
    total = 0
    for r in requests:
        chars = sum(len(m["content"]) + 8 for m in r.messages)  # + role markers of the template
        chars += len(r.prompt or "")
        total += int(chars / CHARS_PER_TOKEN) + r.params.max_tokens
    return total


def completion_to_response(c: Completion) -> dict[str, Any]:
    response: dict[str, Any] = {
        "text": c.text,
        "reasoning": c.reasoning,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "finish_reason": c.finish_reason,
    }
    if c.response_id:  # only when the server gave one (in-process engines give none)
        response["response_id"] = c.response_id
    return response


def truncated_in_reasoning(
    text: str, answer: str, extra: str | None, finish_reason: str | None, thinking: bool | None, hidden: bool
) -> bool:
    """Whether an output was cut at max_tokens before its reasoning ended (so it has no answer).

    Seen as: an unclosed ``<think>``; no answer beside a separate reasoning field (a vLLM reasoning
    parser puts a cut-off reasoning there) or from a model that reasons out of sight (``hidden``:
    OpenAI reasoning models); or, for a call that asked to think, no tag at all (templates that
    open the ``<think>`` block in the prompt: the text is reasoning until ``</think>``).
    """
    if finish_reason != "length":
        return False
    last_open = text.rfind("<think>")
    if last_open != -1 and text.find("</think>", last_open) == -1:
        return True
    if not answer.strip() and (extra or hidden):
        return True
    return bool(thinking) and not extra and "</think>" not in text and "<think>" not in text


def result_from_response(
    response: Mapping[str, Any],
    json_schema: Mapping[str, Any] | None,
    key: str,
    cached: bool,
    thinking: bool | None = None,
    hidden_reasoning: bool = False,
) -> ChatResult:
    """Interpret a raw response (fresh or cached) into a ChatResult. Never raises.

    ``thinking`` is the request's resolved switch and ``hidden_reasoning`` says the model reasons
    out of sight; both only serve to recognise an answer cut off inside its reasoning.
    """
    text = response.get("text") or ""
    extra = response.get("reasoning")
    finish = response.get("finish_reason")
    answer, reasoning, parsed, status, error = interpret(text, json_schema)
    if extra:
        reasoning = extra if not reasoning else f"{extra}\n{reasoning}"
    reason = None
    if truncated_in_reasoning(text, answer, extra, finish, thinking, hidden_reasoning):
        if not reasoning and text.strip():  # the template opened the block: the whole text is reasoning
            reasoning = text.strip()
        answer, parsed, status, reason = "", None, STATUS_UNREADABLE, "truncated_in_reasoning"
        error = "truncated_in_reasoning: the output reached max_tokens inside the model's reasoning"
    elif status == STATUS_UNREADABLE:
        reason = "unreadable"
        if finish == "length":
            reason, error = "truncated", f"{error} (output truncated at max_tokens)"
    return ChatResult(
        text=answer,
        status=status,
        parsed=parsed,
        reasoning=reasoning,
        prompt_tokens=int(response.get("prompt_tokens") or 0),
        completion_tokens=int(response.get("completion_tokens") or 0),
        cache_key=key,
        cached=cached,
        error=error,
        reason=reason,
    )


class _Progress:
    def __init__(self, name: str, total: int, log: Any, every_s: float) -> None:
        self.name, self.total, self.log, self.every_s = name, total, log, every_s
        self.done = 0
        self.tokens = 0
        self.t0 = self.last = time.monotonic()

    def step(self, tokens: int) -> None:
        self.done += 1
        self.tokens += tokens
        now = time.monotonic()
        if self.done == self.total or now - self.last >= self.every_s:
            self.last = now
            elapsed = max(now - self.t0, 1e-9)
            rate = self.done / elapsed
            # An ETA from the first few completions is noise (the first ones finish together
            # after the prefill): shown once 5% (at least 2) of the calls are done.
            if self.done >= max(2, self.total // 20) and rate > 0:
                eta = f"ETA {(self.total - self.done) / rate:.0f}s"
            else:
                eta = "ETA n/a"
            self.log.info(
                f"{self.name}: {self.done}/{self.total} calls ({100 * self.done / self.total:.0f}%),"
                f" {rate:.2f} calls/s, {self.tokens / elapsed:.0f} tok/s, {eta}"
            )


@dataclass(slots=True)
class SamplesResult:
    """``n`` results per conversation (``samples[i][j]`` = conversation i, seed params.seed + j)."""

    samples: list[list[ChatResult]] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)


class ChatClient(ChatModel, CompletionModel):
    """A ``ChatModel`` over one backend and one cache (``chat``/``complete``: the protocols' own).

    Args:
        backend: generates completions (see ``llm.backends.base.Backend``).
        cache: the call cache; None disables caching (every request is a call).
        name: the role name used in progress lines.
        budget_calls: most model calls this client may make in its lifetime (None: no cap).
        budget_tokens: most tokens (estimated prompt + max_tokens before a batch) likewise.
        slice_size: requests handed to the backend at once (None: the whole batch); results
            are persisted and progress logged as each completes.
        progress_every_s: least seconds between two progress lines.
        enable_thinking: the role's thinking switch (None: each task's default, else the model's).
        thinking_max_tokens: the role's budget for calls that think, when their task sets none.
        max_error_share: the share of a batch's requests that may end in a transport error before
            the batch raises ``TransportErrors``; None: ``recipes.MAX_TRANSPORT_ERROR_SHARE``.
    """

    def __init__(
        self,
        backend: Backend,
        cache: LLMCache | None,
        *,
        name: str = "llm",
        budget_calls: int | None = None,
        budget_tokens: int | None = None,
        slice_size: int | None = None,
        progress_every_s: float = 10.0,
        enable_thinking: bool | None = None,
        thinking_max_tokens: int | None = None,
        max_error_share: float | None = None,
    ) -> None:
        self.backend = backend
        self.max_error_share = MAX_TRANSPORT_ERROR_SHARE if max_error_share is None else max_error_share
        self.cache = cache
        self.name = name
        self.budget_calls = budget_calls
        self.budget_tokens = budget_tokens
        self.slice_size = slice_size
        self.progress_every_s = progress_every_s
        self.enable_thinking = enable_thinking
        self.thinking_max_tokens = thinking_max_tokens
        # What the backend can take: chat_template_kwargs (not OpenAI's API), reasoning in sight.
        self._reasoning_model = bool(getattr(backend, "reasoning_model", False))
        self._template_kwargs = bool(getattr(backend, "takes_chat_template_kwargs", True))
        self.spent_calls = 0
        self.spent_tokens = 0
        self._lock = threading.Lock()

    def model_identity(self) -> dict[str, Any]:
        """The cache identity (backend, model, weights) plus what a server reported of its model.

        ``served_root`` and ``served_max_model_len`` (from ``/v1/models``, OpenAI-compatible
        backends) go to asset metadata only: cache keys use ``backend.identity()``, so a changed
        context length does not invalidate the cache while a changed ``root`` does (via weights).
        """
        identity: dict[str, Any] = dict(self.backend.identity())
        served_model = getattr(self.backend, "served_model", None)
        if callable(served_model):
            served = served_model()
            for key in ("root", "max_model_len", "error"):
                if served.get(key) is not None:
                    identity[f"served_{key}"] = served[key]
            if served.get("weights_note"):
                identity["weights_note"] = served["weights_note"]
        return identity

    def resolve(self, req: Request) -> Request:
        """The request as it is sent and keyed: thinking switch and budget resolved (``llm.thinking``)."""
        return effective_request(
            req,
            self.enable_thinking,
            self.thinking_max_tokens,
            template_kwargs=self._template_kwargs,
            reasoning_model=self._reasoning_model,
        )

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        """Answer a list of requests that may differ in sampling parameters and schema.

        Raises:
            BudgetExceeded: before any call, when the misses would pass the budget.
            TransportErrors: more than ``max_error_share`` of the requests ended in a transport
                error (the answers received are cached first).
            FleetDown: every URL of an HTTP backend kept failing (``OpenAIBackend``).
        """
        log = log or _log
        t0 = time.monotonic()
        identity = self.backend.identity()
        stats = BatchStats(requests=len(requests))
        requests = [self.resolve(r) for r in requests]
        hidden = self._reasoning_model
        records = [_record(identity, r, template_version) for r in requests]
        keys = [sha256_hex(canonical_json(rec)) for rec in records]
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        results: list[ChatResult | None] = [None] * len(requests)
        todo: dict[str, list[int]] = {}  # key -> indices asking for it (duplicates generated once)
        for i, key in enumerate(keys):
            if key in hits:
                req = requests[i]
                results[i] = result_from_response(
                    hits[key],
                    req.json_schema,
                    key,
                    cached=True,
                    thinking=thinks(req),
                    hidden_reasoning=hidden,
                )
                stats.cache_hits += 1
            else:
                todo.setdefault(key, []).append(i)
        misses = [idx[0] for idx in todo.values()]
        self._check_budget([requests[i] for i in misses])
        settled = _SETTLED.get()
        if settled is not None and stats.cache_hits:
            settled(stats.cache_hits)

        if misses:
            unknown = (
                " (weights 'unknown', set explicitly)" if identity.get("weights_sha256") == "unknown" else ""
            )
            log.info(
                f"{self.name}: {len(requests)} requests, {stats.cache_hits} cached,"
                f" {len(misses)} calls to {identity.get('backend')}:{identity.get('model')}{unknown}"
            )
            progress = _Progress(self.name, len(misses), log, self.progress_every_s)

            def on_result(j: int, completion: Completion, offset: int) -> None:
                first = misses[offset + j]
                key = keys[first]
                with self._lock:
                    response = completion_to_response(completion)
                    if completion.error is None:
                        if self.cache is not None:
                            self.cache.put(key, records[first], response)
                        req = requests[first]
                        res = result_from_response(
                            response, req.json_schema, key, False, thinks(req), hidden_reasoning=hidden
                        )
                    else:
                        res = ChatResult(
                            text="",
                            status=STATUS_ERROR,
                            cache_key=key,
                            # masked again here, whatever the backend: it reaches Parquet and the ledger
                            error=mask_text(completion.error),
                            reason="error",
                        )
                        stats.errors += 1
                    for n, i in enumerate(todo[key]):
                        results[i] = res if n == 0 else replace(res, cached=True)
                    stats.cache_hits += len(todo[key]) - 1
                    stats.calls += 1
                    stats.prompt_tokens += completion.prompt_tokens
                    stats.completion_tokens += completion.completion_tokens
                    self.spent_calls += 1
                    self.spent_tokens += completion.prompt_tokens + completion.completion_tokens
                    progress.step(completion.completion_tokens)
                if settled is not None:
                    settled(len(todo[key]))

            transport = TransportStats()
            size = self.slice_size or len(misses)
            for start in range(0, len(misses), size):
                part = [requests[i] for i in misses[start : start + size]]
                done = self.backend.generate(part, lambda j, c, _o=start: on_result(j, c, _o))
                if isinstance(done, TransportStats):  # HTTP backends report retries and concurrency
                    transport = transport.add(done)
            stats.retries = transport.retries
            stats.http_429 = transport.http_429
            stats.in_flight_max = transport.in_flight_max
            stats.in_flight_mean = transport.in_flight_mean
            stats.url_set_asides = transport.url_set_asides

        final: list[ChatResult] = []
        for i, res in enumerate(results):
            if res is None:  # a backend that broke its promise: a recorded error, never a silent None
                res = ChatResult(
                    text="",
                    status=STATUS_ERROR,
                    cache_key=keys[i],
                    error="backend returned no result",
                    reason="error",
                )
                stats.errors += 1
            stats.unreadable += res.status == STATUS_UNREADABLE
            stats.truncated_in_reasoning += res.reason == "truncated_in_reasoning"
            final.append(res)
        stats.wall_s = time.monotonic() - t0
        self._check_errors(final, stats)
        return BatchResult(results=final, stats=stats)

    def _check_errors(self, results: Sequence[ChatResult], stats: BatchStats) -> None:
        """Raise ``TransportErrors`` when the batch's transport errors pass the allowed share."""
        if not stats.errors:
            return
        kinds, _ = transport_kinds(r.error or "" for r in results if r.status == STATUS_ERROR)
        urls = list(getattr(self.backend, "shown_urls", None) or ())
        message = share_failure(self.name, urls, len(results), kinds, stats.unreadable, self.max_error_share)
        if message is not None:
            raise TransportErrors(message)

    def _check_budget(self, misses: Sequence[Request]) -> None:
        if not misses:
            return
        if self.budget_calls is not None and self.spent_calls + len(misses) > self.budget_calls:
            raise BudgetExceeded(
                f"{self.name}: {len(misses)} calls needed, {self.budget_calls - self.spent_calls} left"
                f" of the budget of {self.budget_calls} calls; nothing was sent"
            )
        if self.budget_tokens is not None:
            need = estimate_tokens(misses)
            if self.spent_tokens + need > self.budget_tokens:
                raise BudgetExceeded(
                    f"{self.name}: about {need} tokens needed, {self.budget_tokens - self.spent_tokens} left"
                    f" of the budget of {self.budget_tokens} tokens; nothing was sent"
                )

    def close(self) -> None:
        self.backend.close()


def _record(identity: Mapping[str, str], r: Request, template_version: str) -> dict[str, Any]:
    version = r.template_version if r.template_version is not None else template_version
    return request_record(
        identity, r.params, r.messages, r.json_schema, version, r.chat_template_kwargs, r.prompt
    )


def chat_samples(
    model: ChatModel,
    conversations: Sequence[Sequence[Message]],
    params: SamplingParams,
    n: int,
    *,
    json_schema: Mapping[str, Any] | None = None,
    template_version: str = "",
    log: Any = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> SamplesResult:
    """``n`` samples per conversation with seeds ``params.seed + j``, each cached on its own.

    Uses one mixed batch when the model supports it (``ChatClient``/``LLMResource``: the
    engine sees every sample at once), else ``n`` batches through ``ChatModel.chat``.
    ``chat_template_kwargs`` (e.g. ``{"enable_thinking": False}``) reach every sample, and its
    cache key, on both paths.
    """
    kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
    out = SamplesResult(samples=[[] for _ in conversations])
    runner = getattr(model, "run", None)
    if callable(runner):
        reqs = [
            Request(c, params.with_seed(params.seed + j), json_schema, kwargs)
            for c in conversations
            for j in range(n)
        ]
        batch = runner(reqs, template_version=template_version, log=log)
        for k, res in enumerate(batch.results):
            out.samples[k // n].append(res)
        out.stats = batch.stats
        return out
    for j in range(n):
        batch = model.chat(
            conversations,
            params.with_seed(params.seed + j),
            json_schema=json_schema,
            template_version=template_version,
            log=log,
            chat_template_kwargs=kwargs,
        )
        for i, res in enumerate(batch.results):
            out.samples[i].append(res)
        out.stats = out.stats.add(batch.stats)
    return out
