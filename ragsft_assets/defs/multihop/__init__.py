"""Dagster wiring of the multihop family (resources are merged by the lead: store, generator, judge)."""

import dagster as dg

from ragsft_assets.defs.multihop.assets import (
    ablation_verdicts,
    distractors_asset,
    multihop_audit,
    multihop_questions,
    question_checks,
    question_drafts,
)
from ragsft_assets.defs.multihop.filters import filter_assets
from ragsft_assets.defs.multihop.review import review_assets

multihop_assets = [
    question_drafts,
    question_checks,
    distractors_asset,
    ablation_verdicts,
    multihop_questions,
    multihop_audit,
    *filter_assets,
]

# Every check is a check_spec of its asset: the five invariants of multihop_questions (checks.py),
# each filtered config's subset check (filters.py).
# review_labels (group review) needs a sample path in its run config, so no job selects it.
defs = dg.Definitions(assets=[*multihop_assets, *review_assets])
