"""Recall Rewrite assets (group ``recall``): a table of declarations over ``ragsft_assets.recall``.

``oasst_pairs``, ``claims``, ``claim_audit`` and ``probes`` do not depend on the base model and are
unpartitioned; ``probe_answers`` .. ``rewrites`` and ``recall_release`` are partitioned by the
``base_model`` dynamic partitions (``ragsft base-models add KEY --model HF_ID``). Each stage
declares the stage it reads once (its deps and its reader); where and how its records are stored is
``recall.stored``, the release ``recall.release_build``. An LLM stage's code version follows its
prompt template and the recipe fields it reads (``stage_versions``), never bumped by hand.

No ``from __future__ import annotations`` here: Dagster resolves config and resource annotations at
decoration time.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import dagster as dg

from ragsft_assets import recipes
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.metadata import column_schema, funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import base_model_partitions
from ragsft_assets.defs.wiring import declared_inputs, reads
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import ledger_table
from ragsft_assets.recall import oasst, registry, stages, stored
from ragsft_assets.recall import recipes as recall_recipes
from ragsft_assets.recall.release_build import build_recall_release, release_folder
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA
from ragsft_assets.recall.stored import SHARED_PARTITION, TREES_ENV, model_partition
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.stage_versions import stage_version

GROUP = "recall"
__all__ = ["ALL_ASSETS", "STAGES", "TREES_ENV", "RecallConfig", "model_partition", "read_pairs"]


class RecallConfig(dg.Config):
    """Run settings of Recall Rewrite (each asset reads the ones it needs)."""

    # A local JSON-lines export of OASST1 message trees; empty: $RAGSFT_OASST_TREES, else `hub`.
    trees_path: str = ""
    hub: bool = False  # read OpenAssistant/oasst1 message rows through `datasets`
    hub_revision: str = ""
    max_examples: int = 0  # 0 = every kept pair; a quick run takes the first N ids
    seed: int = DEFAULT_SEED
    # The card's values: None = the product's recipe (recall_oasst1); overrides change fields of it,
    # e.g. {"j_e": 3, "j_c": 1} for other thresholds of the rule.
    recipe: str | None = None
    overrides: dict[str, Any] = {}


def _write_stage(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    partition: str,
    asset: str,
    out: stages.StageOut,
    models: dict[str, stored.Tally] | None = None,
) -> dg.MaterializeResult:
    """Write a stage's records and ledger rows; metadata: rows, counted reasons, LLM stats, models."""
    table = stored.stage_table(asset, out.records)
    path = store.write(table, partition, asset)
    store.write_ledger(ledger_table(partition, stored.PRODUCT, asset, out.decisions), partition, asset)
    context.log.info(f"{asset}: {table.num_rows} rows, reasons {dict(sorted(out.reasons.items()))}")
    md: dict[str, Any] = {
        **table_metadata([path], table.schema),
        **funnel_metadata(dict(sorted(out.reasons.items())), key="reasons"),
        "reasons_counts": dg.MetadataValue.json(dict(sorted(out.reasons.items()))),
    }
    for role, tally in (models or {}).items():
        md.update(tally.stats.to_metadata(f"llm/{role}"))
        md.update(model_metadata(tally, role))
    return dg.MaterializeResult(metadata=md)


def resolve_recipe(config: RecallConfig) -> recall_recipes.RecallRecipe:
    """The run's resolved recipe (the card's unless the config names another or overrides fields)."""
    return recall_recipes.resolve(config.recipe, config.overrides)


def read_pairs(config: RecallConfig) -> oasst.ReadResult:
    """The configured input: a local tree export, or the hub (``recall.stored.read_pairs``)."""
    return stored.read_pairs(config.trees_path, config.hub, config.hub_revision)


@dg.asset(group_name=GROUP, code_version="2", kinds={"parquet"})  # 2: skipped trees in the ledger
def oasst_pairs(
    context: dg.AssetExecutionContext, config: RecallConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """First turn and best (rank-0, human, not deleted) assistant reply of each English OASST1 tree."""
    read = read_pairs(config)
    out = stored.pairs_stage(read, config.max_examples)
    result = _write_stage(context, store, SHARED_PARTITION, "oasst_pairs", out)
    result.metadata["trees"] = read.trees  # type: ignore[index]
    return result


@dataclass(frozen=True)
class StageInput:
    """What a stage's step gets: the previous stage's records, its model, the recipe, the run."""

    records: list[Any]
    model: Any
    recipe: recall_recipes.RecallRecipe
    config: RecallConfig
    key: str | None  # the base-model partition key (None for the shared stages)
    hf_id: str  # the base model's id ("" for the shared stages)


@dataclass(frozen=True)
class Stage:
    """One Recall Rewrite stage as an asset: the stage it reads, the role it calls, its step."""

    name: str
    prev: str  # the stage it reads
    role: str | None  # the LLM role it calls (None: no model call)
    task: str | None  # its prompt template
    doc: str  # the asset's description in the UI
    step: Callable[[StageInput], stages.StageOut]
    per_model: bool = True  # partitioned by base model (else shared, unpartitioned)

    def version(self) -> str:
        """Its prompt template and the recipe fields it reads (``recall.stored.STAGE_FIELDS``)."""
        tasks = [self.task] if self.task else []
        return stage_version(self.name, tasks, ("en",), partial(stored.step_fields, self.name))


def _stage_asset(stage: Stage) -> dg.AssetsDefinition:
    """The asset of ``stage``: read, call the step with one batch per stage, write records, ledger
    rows, the recipe record and metadata. One factory for every stage, so their wiring is one."""
    keys = {"store", *([stage.role] if stage.role else []), *(["base_model"] if stage.per_model else [])}
    llm = {"pool": "gpu", "retry_policy": LLM_RETRY_POLICY} if stage.role else {}

    @dg.asset(
        name=stage.name,
        group_name=GROUP,
        deps=reads(stage.prev),
        partitions_def=base_model_partitions if stage.per_model else None,
        code_version=stage.version(),
        kinds={"parquet"},
        required_resource_keys=keys,
        description=stage.doc,
        **llm,
    )
    def _asset(context: dg.AssetExecutionContext, config: RecallConfig) -> dg.MaterializeResult:
        store: ArtifactStore = context.resources.store
        key = context.partition_key if stage.per_model else None
        part = model_partition(key) if key else SHARED_PARTITION
        prev_part = SHARED_PARTITION if stage.prev in SHARED_STAGES | {"oasst_pairs"} else part
        recipe = resolve_recipe(config)
        base = registry.resource_for_key(context.resources.base_model, key) if key else None
        model = None
        if stage.role:
            model = stored.Tally(
                base if stage.role == "base_model" else getattr(context.resources, stage.role)
            )
        hf_id = base.model_identity()["model"] if base is not None else ""
        records = stored.input_records(declared_inputs(context, store), stage.prev, prev_part)
        out = stage.step(StageInput(records, model, recipe, config, key, hf_id))
        result = _write_stage(context, store, part, stage.name, out, {stage.role: model} if model else None)
        rec = recipes.record(recipe)
        recipes.write_record(store.path(part, stage.name).parent, rec)
        md = result.metadata  # type: ignore[assignment]
        md["recipe"] = dg.MetadataValue.json(rec)  # type: ignore[index]
        extra = stored.STAGE_EXTRA.get(stage.name)
        md.update(extra(out.records, recipe, config.seed, hf_id) if extra else {})  # type: ignore[union-attr]
        return result

    return _asset


STAGES = (
    Stage(
        "claims", "oasst_pairs", "judge", "recall_claims",
        "Each gold response as atomic claims (JSON, schema-constrained); unparseable drops the example.",
        lambda s: stages.claims_stage(s.records, s.model, s.recipe),
        per_model=False,
    ),
    Stage(
        "claim_audit", "claims", "judge", "recall_audit",
        "The four-item knowledge-dependence checklist per claim.",
        lambda s: stages.audit_stage(s.records, s.model),
        per_model=False,
    ),
    Stage(
        "probes", "claim_audit", "judge", "recall_probes",
        "Five probing questions per knowledge-dependent claim.",
        lambda s: stages.probes_stage(s.records, s.model, s.recipe),
        per_model=False,
    ),
    Stage(
        "probe_answers", "probes", "base_model", "recall_base_qa",
        "The base model answers each question twice (temperature 0.5, seeded, few-shot QA"
        " completion), all in one batch.",
        lambda s: stages.answers_stage(s.records, s.model, s.config.seed, s.recipe),
    ),
    Stage(
        "probe_labels", "probe_answers", "judge", "recall_label",
        "The judge labels each answer against its claim: ENTAILS, CONTRADICTS or UNRELATED.",
        lambda s: stages.labels_stage(s.records, s.model),
    ),
    Stage(
        "known_claims", "probe_labels", None, None,
        "The threshold rule j_e/k_e/j_c/k_c over the labels (no model call).",
        lambda s: stages.known_stage(s.records, s.recipe.thresholds),
    ),
    Stage(
        "rewrites", "known_claims", "generator", "recall_rewrite",
        "Unknown claims removed with minimal edits, or the fixed refusal: rows in the -full schema.",
        lambda s: stages.rewrites_stage(s.records, s.model, s.hf_id, s.recipe),
    ),
)  # fmt: skip
SHARED_STAGES = {s.name for s in STAGES if not s.per_model}
STAGE_ASSETS = [_stage_asset(s) for s in STAGES]


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=reads("rewrites"),
    code_version="3",  # 3: JSON lines (gzip where large), CC BY-SA 4.0, as the card
    kinds={"json", "huggingface"},
)
def recall_release(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """``releases/recall/``: a ``<model>-sft`` and a ``<model>-full`` config per base model, verified."""
    target = release_folder(store)
    rows, keys, empty = build_recall_release(store, target)
    from ragsft_assets.defs.release.assets import record_digest

    digest, _ = record_digest(context, target, store.home_path, context.partition_key)
    report = verify_release(target, expected_digest=digest)
    if not report.ok:
        raise RuntimeError("recall release does not verify:\n" + "\n".join(report.lines()))
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(rows.values()),
            # the -sft configs' columns (what a trainer reads); the -full configs' beside them
            "dagster/column_schema": column_schema(SFT_SCHEMA, "recall_release"),
            "columns_full": dg.MetadataValue.table_schema(column_schema(FULL_SCHEMA, "recall_release")),
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(rows),
            "base_models": dg.MetadataValue.json(keys),
            "empty_base_models": dg.MetadataValue.json(empty),
            "verified_files": report.checked,
            "root_digest": digest,
        }
    )


ALL_ASSETS = [oasst_pairs, *STAGE_ASSETS, recall_release]
