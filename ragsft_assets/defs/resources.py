"""The default resources of the code location, by role."""

from __future__ import annotations

from typing import Any

from ragsft_assets.resources.store import ArtifactStore


def default_resources() -> dict[str, Any]:
    """Resources used by ``dagster dev`` and the CLI; tests pass their own."""
    return {"store": ArtifactStore()}
