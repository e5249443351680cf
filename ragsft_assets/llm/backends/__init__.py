"""Backends: one class per way of reaching a model, all behind ``Backend`` (see ``base``).

Backends only generate; the cache, the budget, progress and parsing live in
``ragsft_assets.llm.client`` so every backend gets them the same way.
"""

from ragsft_assets.llm.backends.base import Backend, Completion, Request, TransportStats

__all__ = ["Backend", "Completion", "Request", "TransportStats"]
