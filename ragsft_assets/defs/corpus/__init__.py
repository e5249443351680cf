"""Dagster wiring of the corpus family: snapshot_files -> abstracts -> link_graph -> bridge_pairs, checks."""

import dagster as dg

from ragsft_assets.defs.corpus.assets import abstracts, bridge_pairs, link_graph, snapshot_files
from ragsft_assets.defs.corpus.checks import CORPUS_CHECKS

defs = dg.Definitions(
    assets=[snapshot_files, abstracts, link_graph, bridge_pairs], asset_checks=CORPUS_CHECKS
)

__all__ = ["abstracts", "bridge_pairs", "defs", "link_graph", "snapshot_files"]
