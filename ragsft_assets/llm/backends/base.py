"""The backend interface: generate completions for requests, reporting each as soon as it is done."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ragsft_assets.llm.types import Request  # here for the backends and their callers


@dataclass(slots=True)
class Completion:
    """A backend's raw answer to one request (before reasoning split and JSON parsing).

    ``error`` is set when the backend gave up on this request (it is then not cached).
    """

    text: str = ""
    reasoning: str | None = None  # a reasoning field the server returned separately
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    # The server's id of this answer (OpenAI ``id``), kept in the cache beside the answer so a
    # bench can check each cached answer against the request it was sent for.
    response_id: str | None = None


OnResult = Callable[[int, Completion], None]  # (index in the request list, completion)


@dataclass(slots=True)
class TransportStats:
    """What an HTTP backend reports of one ``generate`` call (in-process engines report nothing).

    ``busy_s`` is the request-seconds spent in flight and ``span_s`` the seconds from the first
    send to the last answer, so ``in_flight_mean`` (their ratio) is the effective concurrency.
    """

    attempts: int = 0
    retries: int = 0  # attempts after a request's first (429s included)
    http_429: int = 0
    in_flight_max: int = 0
    busy_s: float = 0.0
    span_s: float = 0.0
    url_set_asides: int = 0

    @property
    def in_flight_mean(self) -> float:
        return self.busy_s / self.span_s if self.span_s > 0 else 0.0

    def add(self, other: TransportStats) -> TransportStats:
        """Two calls one after the other."""
        return TransportStats(
            attempts=self.attempts + other.attempts,
            retries=self.retries + other.retries,
            http_429=self.http_429 + other.http_429,
            in_flight_max=max(self.in_flight_max, other.in_flight_max),
            busy_s=self.busy_s + other.busy_s,
            span_s=self.span_s + other.span_s,
            url_set_asides=self.url_set_asides + other.url_set_asides,
        )


@runtime_checkable
class Backend(Protocol):
    """What the client needs from a backend.

    ``generate`` must call ``on_result`` exactly once per request (a failed request gets a
    Completion with ``error``), as soon as that request is done, so that the client can
    persist it: a killed process then loses only the requests in flight.
    ``on_result`` may be called from worker threads; the client serializes it. ``generate`` may
    return a ``TransportStats`` (retries, 429s, concurrency), which the client adds to the batch's
    stats; anything else is ignored.
    """

    def identity(self) -> dict[str, str]:
        """backend, model, weights_sha256: part of every cache key."""
        ...

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> TransportStats | None: ...

    def close(self) -> None: ...
