"""A test double of the ``embedder`` role: deterministic vectors from a hash of the text.

Registered as the engine kind ``embed:hash``: ``EmbeddingResource(backend="embed:hash", ...)``
goes through the real resource (cache, keys, batching) and only the model is replaced. The class
counts what every instance embedded, so a test can assert that a rerun embeds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm import engines
from ragsft_assets.resources.embedder import EmbedBatch

BACKEND = "embed:hash"
DIM = 32


def hash_vector(text: str, dim: int = DIM) -> np.ndarray:
    """A vector that depends on the text only: a normal draw seeded by its SHA-256."""
    seed = int(sha256_hex(text)[:16], 16)
    return np.random.default_rng(seed).normal(size=dim).astype(np.float32)


class HashEmbeddingBackend:
    """Embeds by hashing; ``embedded_texts`` / ``calls`` count across instances (class-wide)."""

    embedded_texts: ClassVar[list[str]] = []
    calls: ClassVar[int] = 0

    def __init__(self, model: str = "") -> None:
        self.model = model or "hash-embed"

    def identity(self) -> dict[str, str]:
        return {"backend": "hash", "model": self.model, "weights_sha256": "0" * 64, "max_tokens": "none"}

    def embed(self, texts: Sequence[str]) -> EmbedBatch:
        HashEmbeddingBackend.calls += 1
        HashEmbeddingBackend.embedded_texts.extend(texts)
        return EmbedBatch(np.stack([hash_vector(t) for t in texts]), [len(t.split()) for t in texts])

    def close(self) -> None:
        pass


engines.register_backend(BACKEND, HashEmbeddingBackend)
