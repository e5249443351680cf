"""A local OpenAI-compatible server for the HTTP client's tests (127.0.0.1, a thread per connection).

``FakeOpenAI(answer=..., models=..., delay_s=...)`` serves ``GET /v1/models`` from ``models`` and
answers every POST with ``answer(path, body)`` -> ``(status, headers, payload)``; the default
answers ``answer to <last message>``. It records every POST body and path, and the most
requests it held at once (``peak``), so tests can check what the client sent and how many it
kept in flight.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, dict[str, Any]], tuple[int, dict[str, str], Any]]


def chat_payload(content: str, *, reasoning: str | None = None, finish: str = "stop") -> dict[str, Any]:
    """A chat-completions body answering ``content`` (with a separate reasoning field if given)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "choices": [{"message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }


def echo(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    if path.endswith("/completions") and "prompt" in body:
        return 200, {}, {"choices": [{"text": f" after {body['prompt']}", "finish_reason": "stop"}]}
    return 200, {}, chat_payload(f"answer to {body['messages'][-1]['content']}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a fleet client opens hundreds of connections at once


class FakeOpenAI:
    def __init__(
        self,
        answer: Answer = echo,
        *,
        models: list[dict[str, Any]] | None = None,
        models_status: int = 200,
        delay_s: float = 0.0,
    ) -> None:
        self.answer = answer
        self.models = models if models is not None else [{"id": "served-model", "root": "/models/m"}]
        self.models_status = models_status
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.times: list[float] = []  # monotonic arrival time of each POST
        self.model_gets = 0
        self.in_flight = 0
        self.peak = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stall

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, headers: dict[str, str], payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                with server.lock:
                    server.model_gets += 1
                if server.models_status != 200:
                    return self._send(server.models_status, {}, {"error": "no listing"})
                return self._send(200, {}, {"object": "list", "data": server.models})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.paths.append(self.path)
                    server.times.append(time.monotonic())
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    code, headers, payload = server.answer(self.path, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self._send(code, headers, payload)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def posts(self) -> int:
        return len(self.bodies)

    @contextlib.contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
