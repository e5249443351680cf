"""One factory for the multihop assets that have an LLM judge questions: select, judge, write the
verdicts and the ledger, attach metadata.

``first_hop``, ``criteria_annotation``, ``bridge_judge``, ``language_judge`` and ``review_labels``
differ only in what they select and how they judge (a :class:`JudgedStage`); the wiring around
them (the recipe, the LLM role, the prompt, the table, the ledger, the recipe record, the metadata)
is this module's, once.

No ``from __future__ import annotations``: Dagster resolves config and resource types at
decoration time.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa
from dagster import DagsterLogManager

from ragsft_assets.defs.metadata import model_metadata, table_metadata
from ragsft_assets.defs.multihop.common import (
    FILTER_PRODUCT,
    KEPT,
    RecipeConfig,
    language,
    multihop_asset,
    recipe_metadata,
    role_model,
    stage_version,
    write_ledger,
)
from ragsft_assets.defs.wiring import DeclaredInputs, declared_inputs, reads
from ragsft_assets.ledger import Decision
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop.recipes import MultihopRecipe
from ragsft_assets.prompts import PromptTemplate, load_prompt
from ragsft_assets.resources.store import ArtifactStore


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeCall:
    """What a stage's judge function gets: where, with which recipe, model and prompt. ``store``
    reads only the stage's declared inputs (``JudgedStage.reads``; ``defs.wiring``)."""

    store: DeclaredInputs
    partition: str
    recipe: MultihopRecipe
    config: RecipeConfig  # the stage's run config (its ``JudgedStage.config`` class)
    model: ChatModel
    template: PromptTemplate
    log: DagsterLogManager


@dataclass(slots=True)
class Judged:
    """What a stage's judge function returns: the table to write, its ledger rows, more metadata."""

    table: pa.Table
    decisions: list[Decision]
    metadata: dict[str, Any] = field(default_factory=dict)
    preview: Sequence[str] = ("id", "verdict")


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgedStage:
    """One judged asset, by keyword: its name, description, prompt task, the LLM role its recipe
    names (``role``: e.g. ``lambda r: r.first_hop_role``), its run config class, its inputs
    (``reads``: the only tables its judge may read, and the asset's Dagster deps: one
    declaration) and its judge function."""

    name: str
    description: str
    task: str
    role: Callable[[MultihopRecipe], str]
    config: type[RecipeConfig]
    reads: tuple[str, ...]
    judge: Callable[[JudgeCall], Judged]
    group: str | None = None  # None: the multihop group
    product: str | None = FILTER_PRODUCT  # the ledger product; None: the stage writes no ledger


def verdict_decisions(
    rows: Sequence[dict[str, Any]], kept: str, reason: Callable[[dict[str, Any]], str] | None = None
) -> list[Decision]:
    """One ledger row per judged question: ``kept`` when its verdict is ``kept``, else dropped with
    ``reason(row)`` (default: the verdict), and the row's cache key."""
    out = []
    for r in rows:
        ok = r["verdict"] == kept
        why = r["verdict"] if ok or reason is None else reason(r)
        out.append(
            Decision(
                r["id"], KEPT if ok else "dropped", why, None, [r["cache_key"]] if r.get("cache_key") else []
            )
        )
    return out


def rejection_counts(verdicts: Sequence[str], known: Sequence[str], kept: str) -> dict[str, int]:
    """Questions per rejecting verdict, every known one listed (zeros included), in ``known`` order."""
    counts = Counter(verdicts)
    return {v: counts.get(v, 0) for v in known if v != kept}


# name -> stage, filled by :func:`judged_asset`: ``ablation_verdicts`` streams its kept questions
# through these judges' own functions (``defs/multihop/stream.py``).
JUDGED_STAGES: dict[str, JudgedStage] = {}


def judged_asset(stage: JudgedStage) -> dg.AssetsDefinition:
    """The asset of ``stage``: resolve the recipe, pick the role's model, render the stage's prompt
    in the partition's language, judge, write the table and the ledger, return the metadata."""
    JUDGED_STAGES[stage.name] = stage

    @multihop_asset(
        name=stage.name,
        description=stage.description,
        code_version=stage_version(stage.name, (stage.task,)),
        deps=reads(*stage.reads),
        llm=True,
        **({"group": stage.group} if stage.group else {}),
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: stage.config,  # type: ignore[valid-type]
        store: ArtifactStore,
        judge: dg.ResourceParam[ChatModel],
        annotator: dg.ResourceParam[ChatModel],
    ) -> dg.MaterializeResult:
        partition = context.partition_key
        recipe = config.resolved(stage.name)
        role = stage.role(recipe)
        model = role_model(stage.name, role, judge=judge, annotator=annotator)
        template = load_prompt(stage.task, language(partition))
        inputs = declared_inputs(context, store)
        call = JudgeCall(
            store=inputs,
            partition=partition,
            recipe=recipe,
            config=config,
            model=model,
            template=template,
            log=context.log,
        )
        out = stage.judge(call)
        path = store.write(out.table, partition, stage.name)
        if stage.product is not None:
            write_ledger(store, partition, stage.name, out.decisions, stage.product)
        md = table_metadata([path], out.table.schema, preview_columns=list(out.preview))
        md.update(
            {
                "judged": out.table.num_rows,
                "kept": sum(d.verdict == KEPT for d in out.decisions),
                **out.metadata,
                **model_metadata(model, role),
                f"{stage.name}/role": role,
                f"{stage.name}/prompt": f"{template.name}@{template.version}",
                **recipe_metadata(store, partition, stage.name, recipe),
            }
        )
        return dg.MaterializeResult(metadata=md)

    return _asset
