"""One engine per process and model: a reference-counted registry of backends.

Every resource (generator, judge, base model) that uses the same model gets the same
backend object, so a run — and a test session — starts the vLLM engine once. A backend is
closed when its last holder releases it, and at interpreter exit. A long-lived holder (the
test session's fixture, a CLI command) keeps the engine across several Dagster runs in one
process by holding a reference.

Backends are pluggable: ``register_backend(kind, factory)`` adds a kind that
``LLMResource(backend=kind)`` and ``make_backend`` then build (the tests register slow fakes).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ragsft_assets.llm.backends.base import Backend

BackendFactory = Callable[..., Backend]

_FACTORIES: dict[str, BackendFactory] = {}
_LOCK = threading.Lock()


@dataclass
class _Entry:
    backend: Backend
    refs: int = 0


_ENGINES: dict[tuple[Any, ...], _Entry] = {}


def register_backend(kind: str, factory: BackendFactory) -> None:
    """Make ``kind`` available to ``LLMResource(backend=kind)``; ``factory(**options)`` builds one."""
    _FACTORIES[kind] = factory


def backend_kinds() -> list[str]:
    return sorted(_FACTORIES)


def acquire(kind: str, **options: Any) -> tuple[tuple[Any, ...], Backend]:
    """The process's backend for (kind, options), created on first use; returns (handle, backend).

    Options must be hashable (they are the registry key). Pair each call with ``release(handle)``.
    """
    if kind not in _FACTORIES:
        raise ValueError(f"unknown LLM backend {kind!r}; known: {', '.join(backend_kinds())}")
    handle = (kind, *sorted(options.items()))
    with _LOCK:
        entry = _ENGINES.get(handle)
        if entry is None:
            entry = _ENGINES[handle] = _Entry(_FACTORIES[kind](**options))
        entry.refs += 1
        return handle, entry.backend


def release(handle: tuple[Any, ...]) -> None:
    """Drop one reference; the last one closes the backend (frees the engine's memory)."""
    with _LOCK:
        entry = _ENGINES.get(handle)
        if entry is None:
            return
        entry.refs -= 1
        if entry.refs > 0:
            return
        del _ENGINES[handle]
    entry.backend.close()


def live_engines() -> dict[tuple[Any, ...], int]:
    """Handles of the open backends and their reference counts (for tests and diagnostics)."""
    with _LOCK:
        return {h: e.refs for h, e in _ENGINES.items()}


@atexit.register
def close_all() -> None:
    """Close every backend (at interpreter exit, or by a test that wants a clean slate)."""
    with _LOCK:
        entries = list(_ENGINES.values())
        _ENGINES.clear()
    for e in entries:
        with contextlib.suppress(Exception):  # exiting: nothing useful to do with a failed close
            e.backend.close()


def _engine_kwargs(engine_json: str) -> dict[str, Any]:
    kwargs = orjson.loads(engine_json) if engine_json else {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"engine settings must be a JSON object, got {engine_json!r}")
    return kwargs


def _embedded(max_model_len: int = 4096, engine_json: str = "") -> Backend:
    from ragsft_assets.llm.backends.vllm_backend import VLLMBackend
    from ragsft_assets.llm.models import EMBEDDED_MODEL_NAME, embedded_identity, ensure_embedded_model

    folder = ensure_embedded_model()
    ident = {"backend": "vllm", **embedded_identity(folder)}
    ident["model"] = ident.get("model") or EMBEDDED_MODEL_NAME
    return VLLMBackend(
        str(folder), ident, max_model_len=max_model_len, engine_kwargs=_engine_kwargs(engine_json)
    )


def _vllm(model: str, max_model_len: int = 4096, weights_id: str = "", engine_json: str = "") -> Backend:
    from pathlib import Path

    from ragsft_assets.llm.backends.vllm_backend import VLLMBackend
    from ragsft_assets.llm.models import folder_weights_sha256

    path = Path(model).expanduser()
    if path.is_dir():
        weights = weights_id or folder_weights_sha256(path)
        name = path.name
    else:  # a hub id: its revision pin (weights_id) is the best identity we have without the files
        weights = weights_id or f"hub:{model}"
        name = model
    return VLLMBackend(
        str(path) if path.is_dir() else model,
        {"backend": "vllm", "model": name, "weights_sha256": weights},
        max_model_len=max_model_len,
        engine_kwargs=_engine_kwargs(engine_json),
    )


def _openai(**options: Any) -> Backend:
    from ragsft_assets.llm.backends.openai_backend import OpenAIBackend

    return OpenAIBackend(**options)


register_backend("embedded", _embedded)
register_backend("vllm", _vllm)
register_backend("openai", _openai)
