"""The ``openai`` backend against real HTTP servers on 127.0.0.1 that inject faults."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragsft_assets.llm.backends.openai_backend import OpenAIBackend
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import STATUS_ERROR, STATUS_OK, STATUS_UNREADABLE, SamplingParams
from ragsft_assets.resources.llm import LLMResource

TIMEOUT_S = 0.5
SECRET = "sk-test-secret-value-123"


class FaultServer:
    """A chat-completions server whose behaviour is driven by the last user message.

    ``fail500:K`` / ``slow:K`` / ``drop:K`` / ``garbage:K``: the first K attempts of that
    message get a 500, a reply slower than the client's timeout, a closed connection, or a
    200 with a malformed body; afterwards it answers normally. ``always500``: never answers.
    ``think``: the answer carries a ``<think>`` block; ``reasoning``: a separate
    ``reasoning_content`` field; ``json``: a JSON object. Counts attempts per message.
    """

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.auth: list[str] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                content = body["messages"][-1]["content"]
                with server.lock:
                    server.attempts[content] += 1
                    n = server.attempts[content]
                    server.auth.append(self.headers.get("Authorization", ""))
                kind, _, k = content.partition(":")
                fault = n <= int(k) if k.isdigit() else False
                if content == "always500" or (kind == "fail500" and fault):
                    return self._send(500, b'{"error": "internal"}')
                if kind == "slow" and fault:
                    time.sleep(TIMEOUT_S * 3)
                if kind == "drop" and fault:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                if kind == "garbage" and fault:
                    return self._send(200, b'{"choices": [{"mess')
                message: dict[str, str] = {"role": "assistant", "content": f"answer to {content}"}
                if content == "think":
                    message["content"] = "<think>step one</think>final answer"
                elif content == "reasoning":
                    message["reasoning_content"] = "thought separately"
                elif content == "json":
                    message["content"] = json.dumps({"a": 1, "has_schema": "response_format" in body})
                elif content == "bad400":
                    return self._send(400, b'{"error": "bad request"}')
                payload = {
                    "choices": [{"message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3},
                }
                return self._send(200, json.dumps(payload).encode())

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client timed out
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def total(self) -> int:
        return sum(self.attempts.values())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[FaultServer]]:
    started = [FaultServer() for _ in range(3)]
    yield started
    for s in started:
        s.close()


def _backend(urls: list[str], **kw: object) -> OpenAIBackend:
    options: dict = dict(
        concurrency=4,
        timeout_s=TIMEOUT_S,
        max_retries=3,
        backoff_s=0.01,
        api_key_env="RAGSFT_TEST_KEY",
        weights_id="rev-test",  # these servers have no /v1/models
    )
    return OpenAIBackend(urls, "served-model", **(options | kw))


def _convs(*contents: str) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": c}] for c in contents]


def test_faults_are_retried_and_every_request_ends_with_a_result(
    servers: list[FaultServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSFT_TEST_KEY", SECRET)
    server = servers[0]
    backend = _backend([server.url])
    # each request's own ending is under test here, not the stage rule (test_fail_loudly_llm)
    client = ChatClient(backend, LLMCache(tmp_path), max_error_share=1.0)
    contents = ["fail500:2", "slow:1", "drop:1", "garbage:2", "always500", "bad400", "plain"]
    batch = client.chat(_convs(*contents), SamplingParams())
    by = dict(zip(contents, batch.results, strict=True))
    for c in ("fail500:2", "slow:1", "drop:1", "garbage:2", "plain"):
        assert by[c].status == STATUS_OK and by[c].text == f"answer to {c}", (c, by[c].error)
    assert by["always500"].status == STATUS_ERROR and "gave up after 4 attempts" in (
        by["always500"].error or ""
    )
    assert by["bad400"].status == STATUS_ERROR and "HTTP 400" in (by["bad400"].error or "")
    # Bounded: at most max_retries + 1 attempts each; a 4xx is not retried.
    assert server.attempts["always500"] == 4 and server.attempts["bad400"] == 1
    assert server.attempts["fail500:2"] == 3 and server.attempts["garbage:2"] == 3
    assert server.attempts["slow:1"] >= 2 and server.attempts["drop:1"] == 2
    assert max(server.attempts.values()) <= 4
    assert (batch.stats.calls, batch.stats.errors, batch.stats.requests) == (7, 2, 7)
    # The key travels in the header only; it is in no result, error or cache entry.
    assert all(a == f"Bearer {SECRET}" for a in server.auth)
    assert SECRET not in repr(batch.results) and SECRET not in json.dumps(client.model_identity())
    assert SECRET.encode() not in (tmp_path / "calls.sqlite").read_bytes()
    # Nothing lost: a rerun serves the 5 answers from the cache and retries only the 2 errors.
    before = server.total()
    again = client.chat(_convs(*contents), SamplingParams())
    assert (again.stats.cache_hits, again.stats.calls) == (5, 2)
    assert server.total() - before == 4 + 1


def test_every_base_url_receives_requests_and_a_dead_one_costs_a_retry(
    servers: list[FaultServer], tmp_path: Path
) -> None:
    dead = "http://127.0.0.1:9/v1"  # discard port: connection refused
    backend = _backend([s.url for s in servers] + [dead])
    batch = ChatClient(backend, LLMCache(tmp_path)).chat(
        _convs(*(f"q{i}" for i in range(24))), SamplingParams()
    )
    assert all(r.status == STATUS_OK for r in batch.results)
    assert all(s.total() > 0 for s in servers)
    assert sum(s.total() for s in servers) == 24
    assert backend.url_hits[dead] > 0


def test_reasoning_is_separated_and_schema_is_sent(servers: list[FaultServer], tmp_path: Path) -> None:
    client = ChatClient(_backend([servers[0].url]), LLMCache(tmp_path))
    think, reasoning = client.chat(_convs("think", "reasoning"), SamplingParams()).results
    assert (think.text, think.reasoning) == ("final answer", "step one")
    assert (reasoning.text, reasoning.reasoning) == ("answer to reasoning", "thought separately")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    ok, unreadable = client.chat(_convs("json", "plain"), SamplingParams(), json_schema=schema).results
    assert ok.status == STATUS_OK and ok.parsed == {"a": 1, "has_schema": True}
    assert unreadable.status == STATUS_UNREADABLE and unreadable.text == "answer to plain"


def test_resource_with_openai_backend(servers: list[FaultServer], tmp_path: Path) -> None:
    res = LLMResource(
        backend="openai",
        model="served-model",
        base_urls=[s.url for s in servers[:2]],
        weights_id="rev-1",
        timeout_s=TIMEOUT_S,
        backoff_s=0.01,
        cache_dir=str(tmp_path),
    )
    batch = res.chat(_convs("a", "b", "c", "d"), SamplingParams(), template_version="v")
    assert [r.text for r in batch.results] == ["answer to a", "answer to b", "answer to c", "answer to d"]
    ident = res.model_identity()
    assert {k: ident.pop(k) for k in ("backend", "model", "weights_sha256")} == {
        "backend": "openai",
        "model": "served-model",
        "weights_sha256": "rev-1",
    }
    assert list(ident) == ["served_error"]  # this server has no /v1/models: the metadata says so
    assert servers[0].total() > 0 and servers[1].total() > 0
    res.close()
