"""Any OpenAI-compatible chat-completions server: a ``vllm serve`` fleet or a provider.

Bounded concurrency (a thread pool of ``concurrency`` workers), retries with exponential
backoff on 429, 5xx, timeouts, connection errors and malformed bodies (``max_retries``
retries, so at most ``max_retries + 1`` attempts per request, then an ``error`` result —
every request ends with a result). Several base URLs share the load: request i starts on
URL ``i mod n`` and each retry moves to the next URL, so a dead server costs one retry.
The API key is read from the environment variable named ``api_key_env`` at each request
and is never logged, stored in errors, metadata or the cache key.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson

from ragsft_assets.llm.backends.base import Completion, OnResult, Request

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    pass


class OpenAIBackend:
    """Chat completions over HTTP.

    Args:
        base_urls: server roots ending in ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        model: the model name the server serves.
        api_key_env: the environment variable holding the key ("" or unset: no key).
        concurrency: requests in flight at once (over all URLs).
        timeout_s: per-attempt timeout.
        max_retries: retries after the first attempt.
        backoff_s: first backoff; doubles per retry (with jitter), capped at ``backoff_max_s``.
        weights_id: what identifies the served weights (a hash or revision); part of cache keys.
        json_mode: how to ask for a schema: ``json_schema`` (OpenAI ``response_format``) or
            ``structured_outputs`` (vLLM's extra body field, for older vLLM servers).
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        *,
        api_key_env: str = "",
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        weights_id: str = "",
        json_mode: str = "json_schema",
    ) -> None:
        if not base_urls:
            raise ValueError("the openai backend needs at least one base URL")
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.weights_id = weights_id
        self.json_mode = json_mode
        self._client: httpx.Client | None = None
        self._identity: dict[str, str] | None = None
        self._served: dict[str, Any] | None = None
        self.attempts = 0  # total HTTP attempts (tests check that retries are bounded)
        self.url_hits: dict[str, int] = {u: 0 for u in self.base_urls}

    def identity(self) -> dict[str, str]:
        """backend/model/weights: the configured ``weights_id``, else what ``/v1/models`` says.

        The URLs are not part of the identity: a fleet of replicas serves one model. Read once
        per backend (the identity is in every cache key, so it must not change mid-run).
        """
        if self._identity is None:
            served = self.served_model()
            weights = self.weights_id
            if not weights and served.get("root"):
                weights = f"served:{served['root']}"  # the weights the server loaded (path or hub id)
            if not weights:
                weights = "unknown"
                log.warning(
                    "openai backend %s at %s: no weights_id configured and /v1/models gave no root (%s);"
                    " cache keys will use weights 'unknown' - set RAGSFT_<ROLE>_WEIGHTS_ID",
                    self.model,
                    self.base_urls[0],
                    served.get("error", "model not listed"),
                )
            else:
                log.info(
                    "openai backend %s at %s: weights %s, %s", self.model, self.base_urls[0], weights, served
                )
            self._identity = {"backend": "openai", "model": self.model, "weights_sha256": weights}
        return dict(self._identity)

    def served_model(self) -> dict[str, Any]:
        """What the first server says of ``model`` in ``/v1/models``: id, root, max_model_len (or error)."""
        if self._served is None:
            try:
                resp = self._http().get(f"{self.base_urls[0]}/models", headers=self._headers(), timeout=10.0)
                resp.raise_for_status()
                entries = orjson.loads(resp.content).get("data") or []
                entry = next((e for e in entries if e.get("id") == self.model), None)
                if entry is None:
                    ids = [e.get("id") for e in entries]
                    self._served = {"error": f"model {self.model!r} not served (served: {ids})"}
                else:
                    self._served = {
                        k: entry[k] for k in ("id", "root", "max_model_len") if entry.get(k) is not None
                    }
            except Exception as exc:  # a provider without /v1/models: the identity says so, loudly
                self._served = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return dict(self._served)

    def _http(self) -> httpx.Client:
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self.concurrency * 2, max_keepalive_connections=self.concurrency
            )
            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), limits=limits)
        return self._client

    def _body(self, req: Request) -> dict[str, Any]:
        p = req.params
        body: dict[str, Any] = {"model": self.model}
        if req.is_completion:
            body["prompt"] = req.prompt  # /v1/completions: the text as is, no chat template
        else:
            body["messages"] = [{"role": m["role"], "content": m["content"]} for m in req.messages]
        if req.chat_template_kwargs:
            # vLLM's OpenAI server reads this extra body field (e.g. {"enable_thinking": false}).
            body["chat_template_kwargs"] = dict(req.chat_template_kwargs)
        body |= {
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": p.max_tokens,
            "seed": p.seed,
        }
        if p.stop:
            body["stop"] = list(p.stop)
        if req.json_schema is not None:
            if self.json_mode == "structured_outputs":
                body["structured_outputs"] = {"json": dict(req.json_schema)}
            else:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "schema": dict(req.json_schema)},
                }
        return body

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _attempt(self, url: str, body: bytes, completion: bool = False) -> Completion:
        self.url_hits[url] = self.url_hits.get(url, 0) + 1
        self.attempts += 1
        try:
            resp = self._http().post(
                f"{url}/completions" if completion else f"{url}/chat/completions",
                content=body,
                headers={"Content-Type": "application/json", **self._headers()},
            )
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise _Retryable(f"{type(exc).__name__} from {url}") from None
        if resp.status_code in RETRY_STATUS or resp.status_code >= 500:
            raise _Retryable(f"HTTP {resp.status_code} from {url}")
        if resp.status_code >= 400:
            # The body of a 4xx says what was wrong with the request; retrying cannot help.
            raise ValueError(f"HTTP {resp.status_code} from {url}: {resp.text[:300]}")
        try:
            data = orjson.loads(resp.content)
            choice = data["choices"][0]
            message = {"content": choice["text"]} if completion else choice["message"]
            text = message.get("content") or ""
            usage = data.get("usage") or {}
            return Completion(
                text=text,
                reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                finish_reason=choice.get("finish_reason"),
            )
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError):
            raise _Retryable(f"malformed response body from {url}") from None

    def _one(self, index: int, req: Request) -> Completion:
        body = orjson.dumps(self._body(req))
        last = ""
        for attempt in range(self.max_retries + 1):
            url = self.base_urls[(index + attempt) % len(self.base_urls)]
            try:
                return self._attempt(url, body, req.is_completion)
            except _Retryable as exc:
                last = str(exc)
            except ValueError as exc:
                return Completion(error=str(exc))
            if attempt < self.max_retries:
                delay = min(self.backoff_max_s, self.backoff_s * 2**attempt)
                log.debug("request %d: %s; retry %d in %.2fs", index, last, attempt + 1, delay)
                time.sleep(delay * (0.5 + random.random() / 2))  # jitter: replicas are not hit in lockstep
        return Completion(error=f"gave up after {self.max_retries + 1} attempts: {last}")

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        def work(i: int) -> None:
            try:
                c = self._one(i, requests[i])
            except Exception as exc:  # never lose a request to an unexpected bug: report it
                c = Completion(error=f"{type(exc).__name__}: {exc}")
            on_result(i, c)

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(requests)))) as pool:
            list(pool.map(work, range(len(requests))))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
