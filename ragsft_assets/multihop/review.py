"""Blind review samples of a filtered configuration, for ``ragsft agreement``.

``balanced`` draws half among the config's questions ("kept") and half among those its filters
judged and rejected ("rejected": never a question left ``not_annotated`` or ``unreadable``, which
no filter judged); ``random`` draws from the parent, as the card's v2 validation did. The
sample holds the parent's rows only (no verdict, no group) in a shuffled order; the key file holds
``{"id", "group"}``. Every draw ranks ids by a hash of (seed, stage, id): the same inputs give the
same files.

``labels_from_criteria`` turns the six-criteria annotation of such a sample (the ``review_labels``
asset, run by the ``annotator`` role) into a label file ``{"id", "valid"}``, the same format a
person writes by hand: valid when all six criteria hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ragsft_assets.ids import derived_id
from ragsft_assets.multihop.criteria import KEPT as CRITERIA_KEPT
from ragsft_assets.multihop.criteria import NOT_ANNOTATED
from ragsft_assets.multihop.recipes import RECIPES

DESIGNS = ("balanced", "random")
KEPT = "kept"
REJECTED = "rejected"
# The configuration each filtered configuration is a subset of (its recipe's parent).
PARENTS = {n: r.parent for n, r in RECIPES.items() if r.filters and r.parent}
# Verdicts that mean the filter never judged the question (no reply it could read, or past a budget).
NOT_JUDGED = (NOT_ANNOTATED, "unreadable")


def judged_rejected(verdicts: Iterable[Mapping[str, Any]], filters: Sequence[str]) -> set[str]:
    """Ids that one of ``filters`` judged and rejected, from provenance verdict rows
    (``id, filter, verdict, kept``): a row of such a filter, not kept, with a verdict that is a
    judgment (not ``not_annotated`` nor ``unreadable``)."""
    wanted = set(filters)
    return {
        str(r["id"])
        for r in verdicts
        if r["filter"] in wanted and not r["kept"] and r["verdict"] not in NOT_JUDGED
    }


def _ranked(ids: Iterable[str], seed: int, stage: str) -> list[str]:
    return sorted(ids, key=lambda i: (derived_id(seed, stage, i), i))


def draw_sample(
    parent_rows: Sequence[Mapping[str, Any]],
    config_ids: Iterable[str],
    n: int,
    design: str = "balanced",
    seed: int = 0,
    rejected_ids: Iterable[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Draw ``n`` questions of the parent; returns ``(sample rows, key rows)``, both in the shuffled order.

    With ``balanced``, the rejected half is drawn among ``rejected_ids`` (those the config's filters
    judged and rejected, :func:`judged_rejected`) that the parent has and the config lacks; a group
    smaller than its half gives all it has (the sample is then smaller than ``n``, never topped up
    from the other group, so the halves stay comparable).

    Raises:
        ValueError: an unknown design, ``n < 1``, config ids that the parent lacks, or ``balanced``
            without ``rejected_ids``.
    """
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}: one of {', '.join(DESIGNS)}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    by_id = {str(r["id"]): dict(r) for r in parent_rows}
    kept = set(config_ids)
    stray = sorted(kept - set(by_id))
    if stray:
        raise ValueError(f"{len(stray)} ids of the config are not in its parent (e.g. {stray[0]})")
    if design == "balanced":
        half = n // 2
        chosen = _ranked(kept, seed, "review/kept")[: n - half]
        if rejected_ids is None:
            raise ValueError("a balanced sample needs the ids the filters judged and rejected")
        pool = (set(by_id) - kept) & set(rejected_ids)
        chosen += _ranked(pool, seed, "review/rejected")[:half]
    else:
        chosen = _ranked(by_id, seed, "review/random")[:n]
    order = _ranked(chosen, seed, "review/order")
    sample = [by_id[i] for i in order]
    key = [{"id": i, "group": KEPT if i in kept else REJECTED} for i in order]
    return sample, key


def labels_from_criteria(order: Sequence[str], criteria: pa.Table) -> list[dict[str, Any]]:
    """Label rows ``{"id", "valid"}`` in the sample's order from a six-criteria annotation table.

    ``valid`` is true when all six criteria hold (verdict ``kept``). Questions left
    ``not_annotated`` (unreadable reply, failed call) get no label: ``ragsft agreement`` uses the
    ids the files share and names the others.

    Raises:
        ValueError: an id of ``order`` that the annotation table lacks.
    """
    verdict = dict(zip(criteria["id"].to_pylist(), criteria["verdict"].to_pylist(), strict=True))
    missing = [i for i in order if i not in verdict]
    if missing:
        raise ValueError(f"{len(missing)} sample ids were not annotated at all (e.g. {missing[0]})")
    return [{"id": i, "valid": verdict[i] == CRITERIA_KEPT} for i in order if verdict[i] != NOT_ANNOTATED]
