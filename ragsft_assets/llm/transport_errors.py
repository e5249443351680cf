"""The rule that fails an LLM stage whose calls failed: the share of transport errors in a batch.

A request the backend gave up on (HTTP 5xx after its retries, timeouts, refused connections, a
4xx such as a wrong key) ends as an ``error`` result. A few are a fleet's weather; many mean the
stage's output would be built from nothing (every row ``unreadable``) and published as if it had
worked. So a batch whose errors pass ``max_share`` of its requests raises
:class:`TransportErrors`, naming the role, the (masked) URLs, the error kinds with their counts,
and what to do. Answers the model gave but that do not parse (``unreadable``) are not transport
errors: they are counted apart and never fail the stage here. A request the engine refuses as too
long for the model (``prompt_too_long``) is the request's fault, not the fleet's: counted apart too.
Dagster-free; the client (``llm.client.ChatClient.run``) applies it to every batch of every stage.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ragsft_assets.masking import mask_text

# Error kinds that say the request, not the transport, was wrong (counted apart).
REQUEST_KINDS = ("prompt_too_long",)

_GAVE_UP = re.compile(r"^gave up after \d+ attempts(?: \(\d+ answered 429\))?: ")
_FROM = re.compile(r"\s+from\s+\S+.*$", re.DOTALL)


class TransportErrors(RuntimeError):
    """A batch whose transport errors passed the allowed share (the message says what to do)."""


def error_kind(error: str) -> str:
    """A short kind of a backend's error text, without its URL: ``HTTP 500``, ``TimeoutError``,
    ``malformed response body``, ``prompt_too_long``, ``ValueError``..."""
    text = _GAVE_UP.sub("", (error or "").strip())
    text = _FROM.sub("", text.split("\n", 1)[0])
    if text.startswith("HTTP "):
        return " ".join(text.split()[:2]).rstrip(":")
    head = text.split(":", 1)[0].strip()
    return head[:60] or "error"


def transport_kinds(errors: Iterable[str]) -> tuple[Counter[str], Counter[str]]:
    """``(transport kinds, request kinds)``: the error texts of a batch counted by kind."""
    transport: Counter[str] = Counter()
    request: Counter[str] = Counter()
    for e in errors:
        kind = error_kind(e)
        (request if kind in REQUEST_KINDS else transport)[kind] += 1
    return transport, request


def share_failure(
    role: str,
    urls: Sequence[str],
    requests: int,
    kinds: Mapping[str, int],
    unreadable: int,
    max_share: float,
) -> str | None:
    """The failure message when transport errors pass ``max_share`` of ``requests``, else None.

    Args:
        role: the LLM role (``generator``, ``judge``...).
        urls: where the role's calls go, masked (empty: an in-process engine).
        requests: requests of the batch (cache hits included: they are answers).
        kinds: transport errors by kind (:func:`transport_kinds`).
        unreadable: answers that did not parse (named, not counted).
        max_share: the share of ``requests`` that may fail (``0.02``: 2%).
    """
    errors = sum(kinds.values())
    if errors == 0 or requests <= 0 or errors <= max_share * requests:
        return None
    where = f" at {', '.join(mask_text(u) for u in urls)}" if urls else " (in-process engine)"
    listed = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    apart = (
        f" {unreadable} unreadable answer(s) (model output off-format) are counted apart, not as failures."
        if unreadable
        else ""
    )
    var = f"RAGSFT_{role.upper()}_"
    return (
        f"{role}: {errors} of {requests} LLM requests failed in transport ({errors / requests:.1%},"
        f" more than the {max_share:.1%} allowed){where}: {listed}.{apart} Check the servers, the URLs"
        f" ({var}BASE_URLS) and the key ({var}API_KEY_ENV), then rerun: the answers received are"
        f" cached and the rerun resumes from them ({var}MAX_ERROR_SHARE sets the share allowed)."
    )
