"""Dagster wiring of Recall Rewrite (issue 15): OASST1 pairs -> claims ... -> ``releases/recall/``."""

import dagster as dg

from ragsft_assets.defs.recall.assets import ALL_ASSETS, base_model_partitions

defs = dg.Definitions(assets=ALL_ASSETS)

__all__ = ["base_model_partitions", "defs"]
