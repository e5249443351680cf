"""Dagster wiring of the release family: ``release`` -> ``dataset_card`` -> ``release_manifest``."""

import dagster as dg

from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
from ragsft_assets.defs.release.diff import release_diff

defs = dg.Definitions(assets=[release, release_diff, dataset_card, release_manifest])
