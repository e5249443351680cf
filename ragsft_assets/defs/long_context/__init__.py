"""Dagster wiring of the long-context family (issue 14): qa_source examples -> embeddings ->
neighbours -> RAFT (variant 1) and RAFT + syntactic questions (variant 2) -> ``releases/long_context/<key>/``."""

import dagster as dg

from ragsft_assets.defs.long_context.assets import ALL_ASSETS

defs = dg.Definitions(assets=ALL_ASSETS)

__all__ = ["defs"]
