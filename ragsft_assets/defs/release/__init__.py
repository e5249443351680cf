"""Dagster wiring of the release family: ``release`` -> ``dataset_card`` -> ``release_manifest``."""

import dagster as dg

from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest

defs = dg.Definitions(assets=[release, dataset_card, release_manifest])
