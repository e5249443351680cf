"""Dagster wiring of the corpus family: snapshot_files -> abstracts -> link_graph -> bridge_pairs.

The checks are ``check_specs`` of the assets (see ``checks.py``)."""

import dagster as dg

from ragsft_assets.defs.corpus.assets import abstracts, bridge_pairs, link_graph, snapshot_files

defs = dg.Definitions(assets=[snapshot_files, abstracts, link_graph, bridge_pairs])

__all__ = ["abstracts", "bridge_pairs", "defs", "link_graph", "snapshot_files"]
