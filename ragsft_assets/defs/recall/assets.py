"""Recall Rewrite assets (group ``recall``): thin wrappers over ``ragsft_assets.recall.stages``.

``oasst_pairs``, ``claims``, ``claim_audit`` and ``probes`` do not depend on the base model and are
unpartitioned; ``probe_answers`` .. ``rewrites`` and ``recall_release`` are partitioned by the
``base_model`` dynamic partitions (``ragsft base-models add KEY --model HF_ID``). Stage records are
stored as one sorted-key JSON document per example (the nesting of claims/probes/answers changes
from stage to stage); ``rewrites`` is stored in the ``-full`` schema itself.

No ``from __future__ import annotations`` here: Dagster resolves config and resource annotations at
decoration time.
"""

import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
import pyarrow as pa

from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import base_model_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import ledger_table
from ragsft_assets.llm.types import BatchStats, ChatModel
from ragsft_assets.prompts import templates_version
from ragsft_assets.recall import oasst, registry, stages
from ragsft_assets.recall.rule import DEFAULT_THRESHOLDS, Thresholds
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA, sft_row
from ragsft_assets.release import layout, manifest
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.table_stats import markdown_table

GROUP = "recall"
PRODUCT = "recall"
SHARED_PARTITION = "recall"  # store/ledger folder of the model-independent stages
TREES_ENV = "RAGSFT_OASST_TREES"


def _cv(n: int, *tasks: str) -> str:
    """Code version: a number bumped by hand plus the hash of the stage's prompt templates."""
    return f"{n}-{templates_version(tasks, ('en',))}" if tasks else str(n)


class RecallConfig(dg.Config):
    """Run settings of Recall Rewrite (each asset reads the ones it needs)."""

    # A local JSON-lines export of OASST1 message trees; empty: $RAGSFT_OASST_TREES, else `hub`.
    trees_path: str = ""
    hub: bool = False  # read OpenAssistant/oasst1 message rows through `datasets`
    hub_revision: str = ""
    max_examples: int = 0  # 0 = every kept pair; a quick run takes the first N ids
    thresholds: str = str(DEFAULT_THRESHOLDS)  # j_e/k_e/j_c/k_c of the decision rule
    seed: int = DEFAULT_SEED


def model_partition(key: str) -> str:
    """Store and ledger folder of a base model's stages."""
    return f"{SHARED_PARTITION}-{key}"


class _Tally:
    """Forwards to a model and adds up the stats of every batch (for the asset's metadata)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.stats = BatchStats()

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        batch = self.model.chat(*args, **kwargs)
        self.stats = self.stats.add(batch.stats)
        return batch

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        batch = self.model.complete(*args, **kwargs)
        self.stats = self.stats.add(batch.stats)
        return batch


def _records_table(records: list[dict[str, Any]]) -> pa.Table:
    rows = sorted(records, key=lambda r: r["id"])
    return pa.table(
        {
            "id": [r["id"] for r in rows],
            "record": [orjson.dumps(r, option=orjson.OPT_SORT_KEYS).decode() for r in rows],
        }
    )


def _read_records(store: ArtifactStore, partition: str, asset: str) -> list[dict[str, Any]]:
    return [orjson.loads(s) for s in store.read(partition, asset).column("record").to_pylist()]


def _write_stage(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    partition: str,
    asset: str,
    out: stages.StageOut,
    models: dict[str, _Tally] | None = None,
    table: pa.Table | None = None,
) -> dg.MaterializeResult:
    """Write a stage's records and ledger rows; metadata: rows, counted reasons, LLM stats, models."""
    table = _records_table(out.records) if table is None else table
    path = store.write(table, partition, asset)
    store.write_ledger(ledger_table(partition, PRODUCT, asset, out.decisions), partition, asset)
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


def _thresholds(config: RecallConfig) -> Thresholds:
    return Thresholds.parse(config.thresholds)


def read_pairs(config: RecallConfig) -> oasst.ReadResult:
    """The configured input: a local tree export, or the hub.

    Raises:
        ValueError: when no input is configured, naming the config field and the variable.
    """
    path = config.trees_path or os.environ.get(TREES_ENV, "")
    if path:
        if not Path(path).is_file():
            raise ValueError(f"oasst_pairs: trees_path {path!r} is not a file")
        return oasst.read_tree_export(Path(path))
    if config.hub:
        return oasst.read_hub(revision=config.hub_revision or None)
    raise ValueError(
        "oasst_pairs: no input. Set the run config `ops: {oasst_pairs: {config: {trees_path: FILE}}}`"
        f" (a JSON-lines export of OASST1 message trees), or {TREES_ENV}=FILE, or `hub: true` to read"
        f" {oasst.HUB_DATASET} through `datasets`."
    )


@dg.asset(group_name=GROUP, code_version="2", kinds={"parquet"})  # 2: skipped trees in the ledger
def oasst_pairs(
    context: dg.AssetExecutionContext, config: RecallConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """First turn and best (rank-0, human, not deleted) assistant reply of each English OASST1 tree."""
    read = read_pairs(config)
    pairs = read.pairs[: config.max_examples] if config.max_examples > 0 else read.pairs
    out = stages.StageOut(records=[asdict(p) for p in pairs])
    for p in pairs:
        out.keep(p.id, "first_turn_best_reply", source_id=p.source_id)
    for tree_id, reason in read.skipped_trees:  # a ledger row per skipped tree, under its tree id
        out.drop(tree_id, f"skipped/{reason}", source_id=tree_id)
    if len(pairs) < len(read.pairs):
        out.reasons["not_selected (max_examples)"] = len(read.pairs) - len(pairs)
    result = _write_stage(context, store, SHARED_PARTITION, "oasst_pairs", out)
    result.metadata["trees"] = read.trees  # type: ignore[index]
    return result


def _pairs(store: ArtifactStore) -> list[oasst.OasstPair]:
    return [oasst.OasstPair(**r) for r in _read_records(store, SHARED_PARTITION, "oasst_pairs")]


@dg.asset(
    group_name=GROUP,
    deps=[oasst_pairs],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(2, "recall_claims"),  # 2: bounded schema, repeats collapsed
    kinds={"parquet"},
)
def claims(
    context: dg.AssetExecutionContext, store: ArtifactStore, judge: dg.ResourceParam[ChatModel]
) -> dg.MaterializeResult:
    """Each gold response as atomic claims (JSON, schema-constrained); unparseable drops the example."""
    model = _Tally(judge)
    out = stages.claims_stage(_pairs(store), model)
    return _write_stage(context, store, SHARED_PARTITION, "claims", out, {"judge": model})


@dg.asset(
    group_name=GROUP,
    deps=[claims],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(1, "recall_audit"),
    kinds={"parquet"},
)
def claim_audit(
    context: dg.AssetExecutionContext, store: ArtifactStore, judge: dg.ResourceParam[ChatModel]
) -> dg.MaterializeResult:
    """The four-item knowledge-dependence checklist per claim."""
    model = _Tally(judge)
    out = stages.audit_stage(_read_records(store, SHARED_PARTITION, "claims"), model)
    return _write_stage(context, store, SHARED_PARTITION, "claim_audit", out, {"judge": model})


@dg.asset(
    group_name=GROUP,
    deps=[claim_audit],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(1, "recall_probes"),
    kinds={"parquet"},
)
def probes(
    context: dg.AssetExecutionContext, store: ArtifactStore, judge: dg.ResourceParam[ChatModel]
) -> dg.MaterializeResult:
    """Five probing questions per knowledge-dependent claim."""
    model = _Tally(judge)
    out = stages.probes_stage(_read_records(store, SHARED_PARTITION, "claim_audit"), model)
    return _write_stage(context, store, SHARED_PARTITION, "probes", out, {"judge": model})


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=[probes],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(1, "recall_base_qa"),
    kinds={"parquet"},
)
def probe_answers(
    context: dg.AssetExecutionContext,
    config: RecallConfig,
    store: ArtifactStore,
    base_model: dg.ResourceParam[Any],
) -> dg.MaterializeResult:
    """The base model answers each question twice (temperature 0.5, seeded, few-shot QA completion)."""
    key = context.partition_key
    model = _Tally(registry.resource_for_key(base_model, key))
    out = stages.answers_stage(_read_records(store, SHARED_PARTITION, "probes"), model, config.seed)
    result = _write_stage(context, store, model_partition(key), "probe_answers", out, {"base_model": model})
    result.metadata["seed"] = config.seed  # type: ignore[index]
    return result


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=[probe_answers],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(1, "recall_label"),
    kinds={"parquet"},
)
def probe_labels(
    context: dg.AssetExecutionContext, store: ArtifactStore, judge: dg.ResourceParam[ChatModel]
) -> dg.MaterializeResult:
    """The judge labels each answer against its claim: ENTAILS, CONTRADICTS or UNRELATED."""
    part = model_partition(context.partition_key)
    model = _Tally(judge)
    out = stages.labels_stage(_read_records(store, part, "probe_answers"), model)
    return _write_stage(context, store, part, "probe_labels", out, {"judge": model})


@dg.asset(partitions_def=base_model_partitions, group_name=GROUP, deps=[probe_labels], code_version="1")
def known_claims(
    context: dg.AssetExecutionContext, config: RecallConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """The threshold rule j_e/k_e/j_c/k_c over the labels (no model call)."""
    part = model_partition(context.partition_key)
    t = _thresholds(config)
    out = stages.known_stage(_read_records(store, part, "probe_labels"), t)
    result = _write_stage(context, store, part, "known_claims", out)
    result.metadata["thresholds"] = str(t)  # type: ignore[index]
    return result


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=[known_claims],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    code_version=_cv(1, "recall_rewrite"),
    kinds={"parquet"},
)
def rewrites(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    generator: dg.ResourceParam[ChatModel],
    base_model: dg.ResourceParam[Any],
) -> dg.MaterializeResult:
    """Unknown claims removed with minimal edits, or the fixed refusal: rows in the ``-full`` schema."""
    key = context.partition_key
    part = model_partition(key)
    hf_id = registry.resource_for_key(base_model, key).model_identity()["model"]
    model = _Tally(generator)
    out = stages.rewrites_stage(_read_records(store, part, "known_claims"), model, hf_id)
    rows = sorted(out.records, key=lambda r: r["id"])
    table = pa.Table.from_pylist(rows, schema=FULL_SCHEMA)
    result = _write_stage(context, store, part, "rewrites", out, {"generator": model}, table=table)
    result.metadata["base_model"] = hf_id  # type: ignore[index]
    result.metadata["statistics"] = dg.MetadataValue.json(stages.statistics(rows))  # type: ignore[index]
    return result


def release_folder(store: ArtifactStore) -> Path:
    return store.home_path / "releases" / "recall"


def card_body(stats_by_model: dict[str, dict[str, Any]], empty: Sequence[str] = ()) -> str:
    """The dataset card's body: what the configs are and the paper's statistics table per model."""
    names = list(next(iter(stats_by_model.values())).keys()) if stats_by_model else []
    table = markdown_table(
        ["statistic", *stats_by_model], [[n, *(s[n] for s in stats_by_model.values())] for n in names]
    )
    return (
        "# Recall Rewrite (knowledge-aligned SFT)\n\n"
        "OASST1 first turns whose gold responses keep only the claims each base model consistently "
        "recalls (unknown claims rewritten away, or the fixed refusal). `<model>-sft` is the training "
        "view; `<model>-full` carries every claim, probe, answer and label, so `ragsft recall rule` "
        "re-derives the set under other thresholds with no model call.\n\n"
        f"## Statistics\n\n{table}\n"
        + (
            f"\nLeft out (every example dropped, nothing to load): {', '.join(f'`{k}`' for k in empty)}\n"
            if empty
            else ""
        )
    )


def build_recall_release(store: ArtifactStore, target: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """Build ``releases/recall/`` from every base model whose ``rewrites`` are stored.

    Returns ``({config: rows}, released base-model keys, keys left out because every example was
    dropped)``; raises ``ValueError`` when no model has a row. Built in a staging folder beside the target and
    swapped in, so a reader never sees half a release.
    """
    keys = sorted(
        p.name[len(SHARED_PARTITION) + 1 :]
        for p in store.root.glob(f"{SHARED_PARTITION}-*")
        if store.path(p.name, "rewrites").is_file()
    )
    tables: dict[str, dict[str, pa.Table]] = {}
    stats: dict[str, dict[str, Any]] = {}
    empty: list[str] = []
    for key in keys:
        full = store.read(model_partition(key), "rewrites").cast(FULL_SCHEMA).sort_by("id")
        if full.num_rows == 0:
            # Every example was dropped (e.g. no readable decomposition): an empty split does not
            # load with `datasets`, so the model is left out of the release and named on the card.
            empty.append(key)
            continue
        rows = full.to_pylist()
        tables[f"{key}-sft"] = {"train": pa.Table.from_pylist([sft_row(r) for r in rows], schema=SFT_SCHEMA)}
        tables[f"{key}-full"] = {"train": full.replace_schema_metadata(None)}
        stats[key] = stages.statistics(rows)
    if not tables:
        raise ValueError(
            "nothing to release under releases/recall: "
            + (
                f"every example was dropped for {', '.join(empty)}"
                if empty
                else "no base model has `rewrites`"
            )
            + "; see each partition's rewrites/claims metadata for the reasons"
        )
    staging = layout.staging_dir(target)
    files = layout.write_data_files(staging, tables)
    layout.write_readme(staging, files, card_body(stats, empty), "ragsft recall")
    prompts = {k: v for k, v in manifest.prompt_hashes().items() if k.startswith("recall_")}
    for config, splits in files.items():
        key = config.rsplit("-", 1)[0]
        doc = manifest.build_manifest(
            staging,
            config=config,
            asset="rewrites",
            partition=key,
            data_files=splits,
            source={"dataset": oasst.HUB_DATASET, "base_model_key": key},
            run_config={},
            llm_roles={"statistics": stats[key]},
            prompts=prompts,
        )
        manifest.write_manifest(staging, doc)
    manifest.write_release_index(staging, list(files))
    layout.swap_into_place(staging, target)
    return {c: t["train"].num_rows for c, t in tables.items()}, [k for k in keys if k not in empty], empty


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=[rewrites],
    code_version="1",
    kinds={"parquet", "huggingface"},
)
def recall_release(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """``releases/recall/``: a ``<model>-sft`` and a ``<model>-full`` config per base model, verified."""
    target = release_folder(store)
    rows, keys, empty = build_recall_release(store, target)
    report = verify_release(target)
    if not report.ok:
        raise RuntimeError("recall release does not verify:\n" + "\n".join(report.lines()))
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(rows.values()),
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(rows),
            "base_models": dg.MetadataValue.json(keys),
            "empty_base_models": dg.MetadataValue.json(empty),
            "verified_files": report.checked,
        }
    )


ALL_ASSETS = [
    oasst_pairs,
    claims,
    claim_audit,
    probes,
    probe_answers,
    probe_labels,
    known_claims,
    rewrites,
    recall_release,
]
