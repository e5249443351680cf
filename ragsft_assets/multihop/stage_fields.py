"""The recipe fields each multihop stage reads, and their values beside the card's (Dagster-free).

A stage's metadata showed the whole recipe record (24 fields) whatever the stage: the fields a
reviewer of ``question_checks`` looks for (the answer's limits) were lost among the judges' roles.
``STAGE_FIELDS`` names what each stage reads; :func:`stage_field_rows` gives them with the card's
value and whether the run kept it. A stage not listed shows every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragsft_assets import published_configs

STAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "question_drafts": (
        "pairs_drawn",
        "drafts_per_pair",
        "answer_max_words",
        "answer_max_chars",
        "generation_temperature",
    ),
    "question_checks": ("answer_max_words", "answer_max_chars"),
    "distractors": ("retrieval", "distractors_k", "max_per_bridge", "max_per_source", "near_dup_jaccard"),
    "ablation_verdicts": ("cascade_order", "strict_impossible", "card_judge_calls_per_judged"),
    "multihop_questions": ("card_judge_calls_per_judged", "allow_empty_output"),
    "multihop_audit": ("surface_auc_bar",),
    "first_hop": ("first_hop_role",),
    "criteria_annotation": ("criteria_role",),
    "review_labels": ("criteria_role",),
    "bridge_judge": ("bridge_judge_role",),
    "language_judge": ("language_judge_role",),
    "publishability_score": ("publishability_role", "publishability_min_score", "train_only_splits"),
    "descriptor_check": ("descriptor_check_role", "train_only_splits"),
    # a corpus config's own stage ships the recipe's columns
    **{stage: ("corpus_columns",) for c in published_configs.of_family("corpus") for stage in c.stages},
}


def stage_field_rows(stage: str, rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``{field, value, card, as_card}`` per field ``stage`` reads, from a recipe record
    (``recipes.record``: ``values`` and ``changed``); every field for a stage not listed."""
    values: Mapping[str, Any] = rec.get("values") or {}
    changed: Mapping[str, Mapping[str, Any]] = rec.get("changed") or {}
    names = STAGE_FIELDS.get(stage) or tuple(n for n in values if n != "name")
    rows = []
    for name in names:
        if name not in values:
            continue
        card = changed[name]["card"] if name in changed else values[name]
        rows.append({"field": name, "value": values[name], "card": card, "as_card": name not in changed})
    return rows
