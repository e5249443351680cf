"""The recipe of a multihop config as every asset that made it ran it.

A config is the work of several assets: ``default`` of the five production stages (drafts, checks,
distractors with the caps, the ablation judge, the questions), a filtered config of its parent's
and its own filters, a corpus config of its parent's and its own stage (``published_configs``).
Each asset writes the recipe it resolved beside its files (``recipes.write_record``). A run that overrides a field on one stage only
(``distractors: {overrides: {max_per_bridge: 3}}``) changed the config as much as one that overrides
it everywhere, so the dataset card and the checks read every asset's record, not one per config.
Dagster-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragsft_assets import published_configs
from ragsft_assets.multihop.recipes import RECIPES

# What each config adds on its parent's assets: its filters, then its own stages (the production for
# ``default``, its own asset for a corpus config).
_OWN_ASSETS = {c.name: (*c.filters, *c.stages) for c in published_configs.configs()}


def config_assets(config: str) -> tuple[str, ...]:
    """The assets whose recipe made ``config``, in pipeline order: the production, then each
    ancestor's filters, then the config's own (``corpus`` has none: it is the abstracts).

    Raises:
        KeyError: a config that is not a multihop recipe.
    """
    recipe = RECIPES[config]
    base = config_assets(recipe.parent) if recipe.parent else ()
    return (*base, *_OWN_ASSETS[config])


def config_changes(
    records: Mapping[str, Mapping[str, Any]], config: str
) -> tuple[str | None, dict[str, list[dict[str, Any]]]]:
    """The recipe name ``config``'s last recorded asset ran, and every field any of its assets ran
    differently from the card: ``{field: [{"asset", "run", "card"}, ...]}`` in pipeline order. An
    asset that ran another config's recipe shows as a change of ``recipe``. (None, {}) when no asset
    of the config wrote a record."""
    name: str | None = None
    changes: dict[str, list[dict[str, Any]]] = {}
    for asset in config_assets(config):
        rec = records.get(asset)
        if rec is None:
            continue
        name = rec.get("recipe", name)
        expected = _expected_recipe(asset, config)
        if rec.get("recipe") not in (None, expected):
            changes.setdefault("recipe", []).append({"asset": asset, "run": rec["recipe"], "card": expected})
        for field, diff in sorted((rec.get("changed") or {}).items()):
            changes.setdefault(field, []).append({"asset": asset, "run": diff["run"], "card": diff["card"]})
    return name, changes


def _expected_recipe(asset: str, config: str) -> str:
    from ragsft_assets.multihop.recipes import ASSET_RECIPE

    return ASSET_RECIPE.get(asset, config)


def config_sentence(records: Mapping[str, Mapping[str, Any]], config: str) -> str | None:
    """One line for the dataset card: "as the card", or each field that differs with the assets
    that ran it so (None when no asset of the config wrote a record)."""
    name, changes = config_changes(records, config)
    if name is None:
        return None
    if not changes:
        return f"Recipe `{name}`: as the card."
    parts = []
    for field, diffs in changes.items():
        for d in diffs:
            parts.append(f"`{field}` {d['run']!r} (card: {d['card']!r}) in {d['asset']}")
    return f"Recipe `{name}`, differing from the card in: " + "; ".join(parts) + "."


def context_size(records: Mapping[str, Mapping[str, Any]], fallback: int) -> int:
    """Paragraphs per context as the ``distractors`` stage built them: 2 golds + the
    ``distractors_k`` its recipe ran with (``fallback`` when it recorded none). A check of the
    questions reads this, not its own recipe: an override of ``distractors_k`` on ``distractors``
    alone changes the contexts."""
    values = (records.get("distractors") or {}).get("values") or {}
    k = values.get("distractors_k")
    return 2 + int(k) if isinstance(k, int) and k > 0 else fallback
