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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
import pyarrow as pa
import yaml

from ragsft_assets import recipes
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.metadata import column_schema, funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import base_model_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import ledger_table
from ragsft_assets.llm.types import BatchStats
from ragsft_assets.prompts import templates_version
from ragsft_assets.recall import oasst, registry, release_files, stages
from ragsft_assets.recall import recipes as recall_recipes
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA, sft_row
from ragsft_assets.release import layout, manifest
from ragsft_assets.release.card import CARDS_DOC_LINE
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
    seed: int = DEFAULT_SEED
    # The card's values: None = the product's recipe (recall_oasst1); overrides change fields of it,
    # e.g. {"j_e": 3, "j_c": 1} for other thresholds of the rule.
    recipe: str | None = None
    overrides: dict[str, Any] = {}


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

    def _count(self, batch: Any) -> Any:
        self.stats = self.stats.add(batch.stats)
        return batch

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.chat(*args, **kwargs))

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.complete(*args, **kwargs))

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.run(*args, **kwargs))


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


def resolve_recipe(config: RecallConfig) -> recall_recipes.RecallRecipe:
    """The run's resolved recipe (the card's unless the config names another or overrides fields)."""
    return recall_recipes.resolve(config.recipe, config.overrides)


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
    """One Recall Rewrite stage as an asset: where it reads, which role it calls, its step."""

    name: str
    prev: str  # the stage it reads
    role: str | None  # the LLM role it calls (None: no model call)
    version: int  # bumped by hand; the prompt hash is added to it
    task: str | None  # its prompt template
    doc: str  # the asset's description in the UI
    step: Callable[[StageInput], stages.StageOut]
    per_model: bool = True  # partitioned by base model (else shared, unpartitioned)


def _input_records(store: ArtifactStore, stage: Stage, key: str | None) -> list[Any]:
    if stage.prev == "oasst_pairs":
        return [oasst.OasstPair(**r) for r in _read_records(store, SHARED_PARTITION, "oasst_pairs")]
    shared = stage.prev in SHARED_STAGES
    return _read_records(
        store, SHARED_PARTITION if shared or key is None else model_partition(key), stage.prev
    )


def _stage_asset(stage: Stage) -> dg.AssetsDefinition:
    """The asset of ``stage``: read, call the step with one batch per stage, write records, ledger
    rows, the recipe record and metadata. One factory for every stage, so their wiring is one."""
    keys = {"store", *([stage.role] if stage.role else []), *(["base_model"] if stage.per_model else [])}
    llm = {"pool": "gpu", "retry_policy": LLM_RETRY_POLICY} if stage.role else {}

    @dg.asset(
        name=stage.name,
        group_name=GROUP,
        deps=[dg.AssetKey(stage.prev)],
        partitions_def=base_model_partitions if stage.per_model else None,
        code_version=_cv(stage.version, *([stage.task] if stage.task else [])),
        kinds={"parquet"},
        required_resource_keys=keys,
        description=stage.doc,
        **llm,
    )
    def _asset(context: dg.AssetExecutionContext, config: RecallConfig) -> dg.MaterializeResult:
        store: ArtifactStore = context.resources.store
        key = context.partition_key if stage.per_model else None
        part = model_partition(key) if key else SHARED_PARTITION
        recipe = resolve_recipe(config)
        base = registry.resource_for_key(context.resources.base_model, key) if key else None
        model = None
        if stage.role == "base_model":
            model = _Tally(base)
        elif stage.role:
            model = _Tally(getattr(context.resources, stage.role))
        hf_id = base.model_identity()["model"] if base is not None else ""
        out = stage.step(StageInput(_input_records(store, stage, key), model, recipe, config, key, hf_id))
        table = None
        if stage.name == "rewrites":  # stored in the -full schema itself
            table = pa.Table.from_pylist(sorted(out.records, key=lambda r: r["id"]), schema=FULL_SCHEMA)
        result = _write_stage(
            context, store, part, stage.name, out, {stage.role: model} if model else None, table
        )
        rec = recipes.record(recipe)
        recipes.write_record(store.path(part, stage.name).parent, rec)
        md = result.metadata  # type: ignore[assignment]
        md["recipe"] = dg.MetadataValue.json(rec)  # type: ignore[index]
        if stage.name == "probe_answers":
            md["seed"] = config.seed  # type: ignore[index]
        if stage.name == "known_claims":
            md["thresholds"] = str(recipe.thresholds)  # type: ignore[index]
        if stage.name == "rewrites":
            md["base_model"] = hf_id  # type: ignore[index]
            md["statistics"] = dg.MetadataValue.json(stages.statistics(out.records))  # type: ignore[index]
        return result

    return _asset


STAGES = (
    Stage(
        "claims", "oasst_pairs", "judge", 3, "recall_claims",  # 3: no cap, int claim ids
        "Each gold response as atomic claims (JSON, schema-constrained); unparseable drops the example.",
        lambda s: stages.claims_stage(s.records, s.model, s.recipe),
        per_model=False,
    ),
    Stage(
        "claim_audit", "claims", "judge", 2, "recall_audit",
        "The four-item knowledge-dependence checklist per claim.",
        lambda s: stages.audit_stage(s.records, s.model),
        per_model=False,
    ),
    Stage(
        "probes", "claim_audit", "judge", 2, "recall_probes",
        "Five probing questions per knowledge-dependent claim.",
        lambda s: stages.probes_stage(s.records, s.model, s.recipe),
        per_model=False,
    ),
    Stage(
        "probe_answers", "probes", "base_model", 2, "recall_base_qa",
        "The base model answers each question twice (temperature 0.5, seeded, few-shot QA"
        " completion), all in one batch.",
        lambda s: stages.answers_stage(s.records, s.model, s.config.seed, s.recipe),
    ),
    Stage(
        "probe_labels", "probe_answers", "judge", 2, "recall_label",
        "The judge labels each answer against its claim: ENTAILS, CONTRADICTS or UNRELATED.",
        lambda s: stages.labels_stage(s.records, s.model),
    ),
    Stage(
        "known_claims", "probe_labels", None, 2, None,
        "The threshold rule j_e/k_e/j_c/k_c over the labels (no model call).",
        lambda s: stages.known_stage(s.records, s.recipe.thresholds),
    ),
    Stage(
        "rewrites", "known_claims", "generator", 2, "recall_rewrite",
        "Unknown claims removed with minimal edits, or the fixed refusal: rows in the -full schema.",
        lambda s: stages.rewrites_stage(s.records, s.model, s.hf_id, s.recipe),
    ),
)  # fmt: skip
SHARED_STAGES = {s.name for s in STAGES if not s.per_model}
STAGE_ASSETS = [_stage_asset(s) for s in STAGES]


def release_folder(store: ArtifactStore) -> Path:
    return store.home_path / "releases" / "recall"


def card_body(
    stats_by_model: dict[str, dict[str, Any]],
    empty: Sequence[str] = (),
    *,
    recipe_lines: Sequence[str] = (),
    license_notice: str = recall_recipes.RECALL_OASST1.license_notice,
    ids_note: str = "",
) -> str:
    """The dataset card's body: what the configs are, the paper's statistics table per model, the
    recipe line of each model's build, which ids the models share, and the license."""
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
        + (f"\n{ids_note}\n" if ids_note else "")
        + (
            f"\nLeft out (every example dropped, nothing to load): {', '.join(f'`{k}`' for k in empty)}\n"
            if empty
            else ""
        )
        + ("\n## Recipe\n\n" + "\n".join(f"- {line}" for line in recipe_lines) + "\n" if recipe_lines else "")
        + f"\n## License\n\n{license_notice}\n"
        + f"\n{CARDS_DOC_LINE}\n"
    )


def _ids_note(ids_by_model: dict[str, list[str]]) -> str:
    """The card's sentence on the example ids the base models share (the card's configs hold the same)."""
    if len(ids_by_model) < 2:
        return ""
    sets = {k: set(v) for k, v in ids_by_model.items()}
    common = set.intersection(*sets.values())
    if all(len(v) == len(common) for v in sets.values()):
        return f"Every base model's `-sft` holds the same {len(common)} example ids."
    extra = {k: len(v - common) for k, v in sets.items() if v - common}
    return (
        f"The base models share {len(common)} example ids; ids held by one model only (other runs"
        f" of the shared stages): {', '.join(f'`{k}` {n}' for k, n in sorted(extra.items()))}."
    )


def build_recall_release(store: ArtifactStore, target: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """Build ``releases/recall/`` from every base model whose ``rewrites`` are stored.

    Returns ``({config: rows}, released base-model keys, keys left out because every example was
    dropped)``; raises ``ValueError`` when no model has a row. Built in a staging folder beside the
    target and swapped in, so a reader never sees half a release. Each config's manifest holds the
    license and the recipe record of its ``rewrites`` (values and the fields the run changed).
    """
    keys = sorted(
        p.name[len(SHARED_PARTITION) + 1 :]
        for p in store.root.glob(f"{SHARED_PARTITION}-*")
        if store.path(p.name, "rewrites").is_file()
    )
    tables: dict[str, dict[str, pa.Table]] = {}
    stats: dict[str, dict[str, Any]] = {}
    records: dict[str, dict[str, Any]] = {}
    ids: dict[str, list[str]] = {}
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
        ids[key] = [r["id"] for r in rows]
        records[key] = recipes.read_records(store.root / model_partition(key)).get(
            "rewrites", recipes.record(recall_recipes.RECALL_OASST1)
        )
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
    resolved = {k: recipes.apply_overrides(
        recipes.get(r["recipe"]), {f: v["run"] for f, v in r["changed"].items()}
    ) for k, r in records.items()}  # fmt: skip
    licenses = sorted({r.license for r in resolved.values()})
    notices = list(dict.fromkeys(r.license_notice for r in resolved.values()))
    staging = layout.staging_dir(target)
    # "Files are plain JSONL (gzip-compressed where large)": not Parquet (release_files.py)
    files = release_files.write_jsonl_files(staging, tables)
    body = card_body(
        stats,
        empty,
        recipe_lines=[f"`{k}`: {recipes.card_sentence(r)}" for k, r in records.items()],
        license_notice="\n\n".join(notices),
        ids_note=_ids_note(ids),
    )
    layout.write_readme(staging, files, body, "ragsft recall")
    _set_header_license(staging, licenses)
    prompts = {k: v for k, v in manifest.prompt_hashes().items() if k.startswith("recall_")}
    for config, splits in files.items():
        key = config.rsplit("-", 1)[0]
        doc = manifest.build_manifest(
            staging,
            config=config,
            asset="rewrites",
            partition=key,
            data_files={},  # JSON lines: their entries come from release_files below
            source={"dataset": resolved[key].dataset, "base_model_key": key},
            run_config={},
            llm_roles={},
            prompts=prompts,
            review_sample=0,  # the shared one reads Parquet: the same draw, from the rows, below
        )
        # the JSON-lines files' entries and review sample (the shared manifest reads Parquet footers)
        doc["files"] = release_files.file_entries(
            staging, splits, {s: t.num_rows for s, t in tables[config].items()}
        )
        doc["row_counts"] = {s: t.num_rows for s, t in tables[config].items()}
        doc["rows_total"] = sum(doc["row_counts"].values())
        sample = release_files.write_review_sample(staging, config, tables[config], DEFAULT_SEED)
        doc["review_sample"] = sample
        doc["provenance_files"][sample] = {"sha256": manifest.sha256_file(staging / sample)}
        doc["statistics"] = stats[key]
        doc["license"] = resolved[key].license
        doc["recipe"] = records[key]
        manifest.write_manifest(staging, doc)
    manifest.write_release_index(staging, list(files))
    layout.swap_into_place(staging, target)
    return {c: t["train"].num_rows for c, t in tables.items()}, [k for k in keys if k not in empty], empty


def _set_header_license(folder: Path, licenses: Sequence[str]) -> None:
    """Put the configs' license(s) in the README's YAML header (one id, or the list of them)."""
    from ragsft_assets.storage import atomic_write_bytes

    readme = folder / layout.README
    text = readme.read_text(encoding="utf-8")
    value = licenses[0] if len(licenses) == 1 else list(licenses)
    _, header, body = text.split("---\n", 2)
    meta = yaml.safe_load(header)
    meta["license"] = value
    new = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body
    atomic_write_bytes(readme, new.encode("utf-8"))


@dg.asset(
    partitions_def=base_model_partitions,
    group_name=GROUP,
    deps=[STAGE_ASSETS[-1]],
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
