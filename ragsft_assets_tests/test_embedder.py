"""The ``embedder`` role without a model: cache, keys, batching, env config and the ``openai`` backend."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm import engines
from ragsft_assets.resources.embedder import (
    EmbedBatch,
    EmbeddingCache,
    EmbeddingError,
    EmbeddingResource,
    OpenAIEmbeddingBackend,
    embedding_key,
)


def fake_vector(text: str, dim: int = 8) -> np.ndarray:
    """A vector that depends on the text only (not normalised, so normalisation is seen)."""
    return np.random.default_rng(int(sha256_hex(text)[:8], 16)).normal(size=dim).astype(np.float32) * 3


class CountingBackend:
    """An embedding backend that counts the texts it embeds and fails on a text ``"FAIL"``."""

    instances: list[CountingBackend] = []

    def __init__(self, model: str = "") -> None:
        self.model = model or "fake-embed"
        self.embedded: list[str] = []
        self.calls = 0
        CountingBackend.instances.append(self)

    def identity(self) -> dict[str, str]:
        return {"backend": "fake", "model": self.model, "weights_sha256": "w0", "max_tokens": "16"}

    def embed(self, texts: Sequence[str]) -> EmbedBatch:
        self.calls += 1
        if "FAIL" in texts:
            raise EmbeddingError("the fake backend refuses FAIL")
        self.embedded += list(texts)
        return EmbedBatch(np.stack([fake_vector(t) for t in texts]), [len(t.split()) for t in texts])

    def close(self) -> None:
        pass


engines.register_backend("embed:counting", CountingBackend)


def _resource(tmp_path: Path, **kw: object) -> EmbeddingResource:
    return EmbeddingResource(backend="embed:counting", cache_dir=str(tmp_path / "cache"), **kw)


def test_rerun_embeds_nothing_duplicates_once_and_hits_are_counted(tmp_path: Path) -> None:
    texts = ["alpha beta", "gamma", "alpha beta", "delta epsilon zeta"]
    res = _resource(tmp_path, batch_size=2)
    first = res.embed(texts)
    backend = res.backend_object()
    assert isinstance(backend, CountingBackend)
    assert backend.embedded == ["alpha beta", "gamma", "delta epsilon zeta"]  # the duplicate once
    assert (first.stats.unique, first.stats.embedded, first.stats.cache_hits, first.stats.calls) == (
        3,
        3,
        0,
        2,
    )
    assert first.stats.tokens == 2 + 1 + 3
    meta = first.stats.as_metadata()
    assert meta["embedder/cache_hits"] == 0 and meta["embedder/embedded"] == 3 and "embedder/wall_s" in meta
    assert first.vectors.shape == (4, 8) and first.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first.vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(first.vectors[0], first.vectors[2])
    expected = fake_vector("gamma") / np.linalg.norm(fake_vector("gamma"))
    np.testing.assert_allclose(first.vectors[1], expected, rtol=1e-6)
    res.close()

    again = _resource(tmp_path, batch_size=2)  # a new process would open the same database
    second = again.embed(texts)
    assert again.backend_object().embedded == []  # type: ignore[attr-defined]
    assert (second.stats.embedded, second.stats.cache_hits, second.stats.calls) == (0, 3, 0)
    np.testing.assert_array_equal(second.vectors, first.vectors)
    assert second.keys == first.keys
    again.close()


def test_keys_are_content_addressed_by_model_identity_and_text(tmp_path: Path) -> None:
    ident = {"backend": "vllm", "model": "m", "weights_sha256": "w", "max_tokens": "256"}
    key = embedding_key(ident, "some text")
    assert len(key) == 64 and key == embedding_key(dict(reversed(ident.items())), "some text")
    assert key != embedding_key(ident, "some text ")
    for field in ident:
        assert key != embedding_key({**ident, field: ident[field] + "x"}, "some text"), field
    a = _resource(tmp_path, model="model-a")
    b = _resource(tmp_path, model="model-b")
    assert a.cache_keys(["x"]) != b.cache_keys(["x"])
    a.embed(["x"])
    assert b.embed(["x"]).stats.embedded == 1  # another model never reads model-a's vector
    a.close()
    b.close()


def test_a_failed_batch_raises_and_earlier_batches_stay_cached(tmp_path: Path) -> None:
    res = _resource(tmp_path, batch_size=2, normalize=False)
    with pytest.raises(EmbeddingError, match="refuses FAIL"):
        res.embed(["one", "two", "FAIL", "three"])
    res.close()
    cache = EmbeddingCache(tmp_path / "cache")
    assert len(cache) == 2
    resumed = _resource(tmp_path, batch_size=2, normalize=False)
    out = resumed.embed(["one", "two", "three"])
    assert resumed.backend_object().embedded == ["three"]  # type: ignore[attr-defined]
    np.testing.assert_array_equal(out.vectors[0], fake_vector("one"))  # stored raw, as returned
    resumed.close()


def test_embedder_from_env_and_default_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragsft_assets.defs.resources import default_resources, embedder_from_env

    assert default_resources()["embedder"].backend == "embedded"
    monkeypatch.setenv("RAGSFT_EMBEDDER_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_EMBEDDER_BASE_URLS", "http://e1:8000/v1,http://e2:8000/v1")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MODEL", "embedding")
    monkeypatch.setenv("RAGSFT_EMBEDDER_BATCH_SIZE", "512")
    monkeypatch.setenv("RAGSFT_EMBEDDER_WEIGHTS_ID", "rev-abc")
    res = embedder_from_env()
    assert (res.backend, res.model, res.base_urls) == (
        "openai",
        "embedding",
        ["http://e1:8000/v1", "http://e2:8000/v1"],
    )
    assert (res.batch_size, res.weights_id, res.role) == (512, "rev-abc", "embedder")
    monkeypatch.setenv("RAGSFT_EMBEDDER_MAX_TOKENS", "many")
    with pytest.raises(ValueError, match="RAGSFT_EMBEDDER_MAX_TOKENS='many' is not a valid int"):
        embedder_from_env()


class EmbedServer:
    """``/v1/embeddings`` and ``/v1/models`` on 127.0.0.1; the first ``fail_first`` POSTs get a 503.

    ``/v1/models`` lists ``max_model_len`` (as vLLM does) unless it is None (as providers do).
    """

    def __init__(self, fail_first: int = 0, status: int = 503, max_model_len: int | None = 256) -> None:
        self.fail_first, self.status, self.max_model_len = fail_first, status, max_model_len
        self.posts = 0
        self.inputs: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                entry: dict[str, object] = {"id": "embedding", "root": "/models/minilm"}
                if server.max_model_len is not None:
                    entry["max_model_len"] = server.max_model_len
                self._send(200, {"data": [entry]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.posts += 1
                    n = server.posts
                    server.bodies.append(body)
                if n <= server.fail_first:
                    return self._send(server.status, {"error": "busy"})
                with server.lock:
                    server.inputs.update(body["input"])
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t).tolist()}
                    for i, t in enumerate(body["input"])
                ]
                data.reverse()  # servers may answer out of order: the index says where each goes
                return self._send(200, {"data": data, "usage": {"prompt_tokens": 4 * len(data)}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @contextlib.contextmanager
    def running(self) -> Iterator[EmbedServer]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


def test_openai_backend_retries_batches_and_caches(tmp_path: Path) -> None:
    texts = [f"passage {i}" for i in range(7)]
    with EmbedServer(fail_first=2, max_model_len=None).running() as server:
        res = EmbeddingResource(
            backend="openai",
            base_urls=[server.url],
            model="embedding",
            per_request=3,
            concurrency=2,
            backoff_s=0.01,
            cache_dir=str(tmp_path / "cache"),
        )
        out = res.embed(texts)
        assert res.model_identity() == {
            "backend": "openai",
            "model": "embedding",
            "weights_sha256": "served:/models/minilm",
            "max_tokens": "server_default",
        }
        assert server.posts == 3 + 2  # three requests of <= 3 inputs, two 503s retried
        assert all(server.inputs[t] == 1 for t in texts)
        assert all(b["model"] == "embedding" and "truncate_prompt_tokens" not in b for b in server.bodies)
        for i, t in enumerate(texts):
            np.testing.assert_allclose(
                out.vectors[i], fake_vector(t) / np.linalg.norm(fake_vector(t)), rtol=1e-6
            )
        res.close()
        again = EmbeddingResource(
            backend="openai", base_urls=[server.url], model="embedding", cache_dir=str(tmp_path / "cache")
        )
        assert again.embed(texts).stats.cache_hits == 7 and server.posts == 5
        again.close()


def test_openai_backend_gives_up_with_a_clear_error() -> None:
    with EmbedServer(fail_first=100).running() as server:
        backend = OpenAIEmbeddingBackend([server.url], "embedding", max_retries=2, backoff_s=0.01)
        with pytest.raises(EmbeddingError, match="gave up after 3 attempts: HTTP 503"):
            backend.embed(["a"])
        assert server.posts == 3
    with EmbedServer(fail_first=1, status=400).running() as server:
        backend = OpenAIEmbeddingBackend([server.url], "embedding", max_tokens=128, backoff_s=0.01)
        with pytest.raises(EmbeddingError, match="HTTP 400"):
            backend.embed(["a"])
        assert server.posts == 1  # a 4xx is not retried
        assert server.bodies[0]["truncate_prompt_tokens"] == 128


def test_openai_truncation_comes_from_the_served_max_model_len_unless_set(tmp_path: Path) -> None:
    with EmbedServer(max_model_len=16_384).running() as server:
        res = EmbeddingResource(
            backend="openai", base_urls=[server.url], model="embedding", cache_dir=str(tmp_path / "c")
        )
        res.embed(["a long passage", "another"])
        assert res.model_identity()["max_tokens"] == "16384"  # part of every cache key
        assert [b["truncate_prompt_tokens"] for b in server.bodies] == [16_384]
        res.close()
        pinned = EmbeddingResource(
            backend="openai",
            base_urls=[server.url],
            model="embedding",
            max_tokens=256,
            cache_dir=str(tmp_path / "c"),
        )
        out = pinned.embed(["a long passage"])
        assert pinned.model_identity()["max_tokens"] == "256" and out.stats.embedded == 1  # another key
        assert server.bodies[-1]["truncate_prompt_tokens"] == 256
        pinned.close()
    with EmbedServer(max_model_len=None).running() as server:  # a provider: no length, no field
        backend = OpenAIEmbeddingBackend([server.url], "embedding")
        backend.embed(["a"])
        assert backend.identity()["max_tokens"] == "server_default"
        assert "truncate_prompt_tokens" not in server.bodies[0]


@pytest.mark.parametrize("texts", [["a", "b", "c", "d"], ["a", "b", "a", "c", "b"], []])
def test_vectors_written_to_a_memory_mapped_file(tmp_path: Path, texts: list[str]) -> None:
    from ragsft_assets.resources.embedder import open_vectors

    res = _resource(tmp_path, batch_size=2)
    res.embed(texts[:2])  # some vectors come from the cache, some from the backend
    in_memory = res.embed(texts)
    out = tmp_path / "emb" / "vectors.npy"
    on_disk = res.embed(texts, out=out)
    assert isinstance(on_disk.vectors, np.memmap) and not on_disk.vectors.flags.writeable
    assert on_disk.vectors.dtype == np.float32 and on_disk.vectors.shape == (len(texts), 8 if texts else 0)
    np.testing.assert_array_equal(on_disk.vectors, in_memory.vectors.reshape(on_disk.vectors.shape))
    if texts:
        np.testing.assert_allclose(np.linalg.norm(on_disk.vectors, axis=1), 1.0, rtol=1e-6)
    reopened = open_vectors(out)
    assert isinstance(reopened, np.memmap)
    np.testing.assert_array_equal(reopened, on_disk.vectors)
    assert sorted(p.name for p in out.parent.iterdir()) == ["vectors.npy"]  # no temp file left
    res.close()


def test_a_failed_run_leaves_no_vectors_file(tmp_path: Path) -> None:
    res = _resource(tmp_path, batch_size=1)
    out = tmp_path / "emb" / "vectors.npy"
    with pytest.raises(EmbeddingError):
        res.embed(["one", "FAIL"], out=out)
    assert list(out.parent.iterdir()) == []
    res.close()
    np.save(tmp_path / "f8.npy", np.zeros((2, 3)))
    from ragsft_assets.resources.embedder import open_vectors

    with pytest.raises(ValueError, match="float32"):
        open_vectors(tmp_path / "f8.npy")
