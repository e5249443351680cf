"""Long-context SFT assets (group ``long_context``, ``qa_source`` partitions, prefix ``long_context/``).

``examples`` -> ``passage_embeddings`` (the ``embedder`` role) -> ``neighbours`` -> ``raft``
(variant 1, config ``<source>_raft``) -> ``raft_syntactic`` (variant 2, ``<source>_raft_syntactic``);
``passage_embeddings`` -> ``clustered`` (variant 3, ``<source>_clustered``; question embeddings
from the ``embedder`` role too) -> ``release`` (``releases/long_context/<key>/``). A table of
declarations: each asset declares what it reads once (``reads=``, its deps and its reader), calls
``ragsft_assets.long_context`` (the variants' steps: ``long_context.steps``), writes Parquet, ledger
rows and metadata. Store tables carry an ``lc_`` prefix (``assets/<key>/lc_raft/``), so they never
meet the QA chain's of the same key. A variant's code version follows its templates and the recipe
fields its step reads (``stage_versions``), never bumped by hand.

No ``from __future__ import annotations`` here: Dagster resolves config and resource annotations at
decoration time.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from ragsft_assets import recipes
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.check_results import check_result, verify_failures
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions
from ragsft_assets.defs.wiring import DeclaredInputs, declared_inputs, reads
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import ledger_table
from ragsft_assets.long_context import build, raft, steps, translate
from ragsft_assets.long_context import recipes as lc_recipes
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.stage_versions import stage_version

GROUP = "long_context"
PREFIX = "long_context"


class LongContextConfig(dg.Config):
    """Run settings of the long-context family (each asset reads the ones it needs)."""

    splits: list[str] = ["train"]  # source splits to build from (the dev/test sets stay for evaluation)
    seed: int = DEFAULT_SEED
    neighbours: int = 64  # candidates per passage (enough to fill the budget)
    # neighbours: exact search up to this many unique passages, a seeded IVF index above it
    # (its recall@k against exact, measured on a sample, is in the asset's metadata)
    neighbours_exact_max: int = 200_000
    # The card's values of this asset's variant. None = the partition's product recipe: the card's
    # config of its source (narrativeqa: only narrativeqa_clustered is built), or for any other
    # source the family recipe (long_context_raft, ...). Name one to build a variant the product
    # leaves out (e.g. long_context_raft on narrativeqa.en gives narrativeqa_raft).
    recipe: str | None = None
    overrides: dict[str, Any] = {}  # fields of the recipe, e.g. {"budget_tokens": 8192}


def _asset(name: str, code_version: str, inputs: Sequence[str] = (), **kw: Any):  # noqa: ANN202
    """``dg.asset`` of the family: its prefix, partitions and group; ``inputs``: the assets of the
    family it reads (its deps, and its reader's only tables)."""
    return dg.asset(
        name=name,
        key_prefix=[PREFIX],
        partitions_def=qa_source_partitions,
        group_name=GROUP,
        code_version=code_version,
        deps=reads(*(dg.AssetKey([PREFIX, r]) for r in inputs)),
        kinds={"parquet"},
        **kw,
    )


def _inputs(context: dg.AssetExecutionContext, store: ArtifactStore) -> DeclaredInputs:
    """The running asset's reader: its declared inputs' ``lc_`` tables (rows and lineage)."""
    return declared_inputs(context, store, steps.store_names)


def _vectors_path(store: ArtifactStore, partition: str) -> Path:
    from ragsft_assets.resources.embedder import VECTORS_FILE

    return store.path(partition, steps.EMBEDDINGS).with_name(VECTORS_FILE)


@_asset("examples", "2")
def examples(
    context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """QA examples of the installed source: question, answer and oracle passages (supporting paragraphs)."""
    partition = context.partition_key
    src = steps.source_examples(store.home_path / "sources" / partition, partition, config.splits)
    path = store.write(src.table, partition, steps.EXAMPLES)
    product = f"{lc_recipes.source_name(partition)}_{raft.VARIANT}"
    stage = "long_context_examples"
    decisions = steps.rejection_decisions(src.rejected)
    store.write_ledger(ledger_table(partition, product, stage, decisions), partition, stage)
    context.log.info(
        f"{partition}: {len(src.examples)} example(s) from {src.funnel['in splits']} source row(s)"
    )
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], src.table.schema, preview_columns=["id", "question", "answer"]),
            **funnel_metadata(src.funnel),
            "passages": sum(len(e.passages) for e in src.examples),
            "rejected": len(src.rejected),
        }
    )


# Embedding steps sit in the `gpu` pool with the LLM steps: the embedder may run vLLM on the GPU.
@_asset("passage_embeddings", "2", ["examples"], pool="gpu", retry_policy=LLM_RETRY_POLICY)
def passage_embeddings(
    context: dg.AssetExecutionContext, store: ArtifactStore, embedder: EmbeddingResource
) -> dg.MaterializeResult:
    """One vector per (example, oracle passage) row, from the ``embedder`` role (cached by content)."""
    partition = context.partition_key
    exs = build.examples_from_table(_inputs(context, store).read(partition, steps.EXAMPLES))
    rows = raft.passage_rows(exs)
    result = embedder.embed(rows.texts, log=context.log, out=_vectors_path(store, partition))
    table = steps.embeddings_table(rows, result.keys)
    path = store.write(table, partition, steps.EMBEDDINGS)
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema),
            **result.stats.as_metadata(),
            "embedder/model": dg.MetadataValue.json(embedder.model_identity()),
            "dim": int(result.vectors.shape[1]) if result.vectors.size else 0,
            "vectors": dg.MetadataValue.path(str(_vectors_path(store, partition))),
            "unique_passages": len(set(rows.ids)),
        }
    )


@_asset("neighbours", "2", ["passage_embeddings"])
def neighbours(
    context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """Top-k passages by inner product per row (itself, duplicates and its example excluded):
    exact up to ``neighbours_exact_max`` unique passages, a seeded IVF index above it."""
    from ragsft_assets.long_context import neighbours as lc_nb

    partition = context.partition_key
    emb = _inputs(context, store).read(partition, steps.EMBEDDINGS)
    nb = lc_nb.nearest_neighbours(
        steps.open_passage_vectors(_vectors_path(store, partition), partition, emb.num_rows),
        config.neighbours,
        keys=lc_nb.arrow_codes(emb["passage_id"]),
        groups=lc_nb.arrow_codes(emb["example_id"]),
        settings=lc_nb.SearchSettings(exact_max=config.neighbours_exact_max, seed=config.seed),
        log=context.log,
    )
    # NaN pads the -1 indices: kept as null so the Parquet holds no NaN
    table = lc_nb.neighbours_table(emb["row"], nb).cast(steps.NEIGHBOURS_SCHEMA)
    path = store.write(table, partition, steps.NEIGHBOURS)
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema),
            "k": config.neighbours,
            "fallbacks": nb.fallbacks,
            "wall_s": round(nb.wall_s, 3),
            **nb.metadata(),  # search/method, search/recall_at_k, search/nprobe, ...
        }
    )


@dataclass(frozen=True, slots=True)
class Variant:
    """One long-context variant as an asset: what it reads, its schema, its step and the prompt
    templates its code version follows (with the recipe fields of ``steps.STEP_FIELDS``)."""

    variant: str  # lc_recipes.RAFT, SYNTACTIC, CLUSTERED or TRANSLATED
    schema: pa.Schema
    reads: tuple[str, ...]
    doc: str
    step: steps.Step
    roles: tuple[str, ...] = ()  # roles it calls (the embedder, the generator)
    tasks: tuple[str, ...] = (raft.PROMPT_TASK,)
    langs: tuple[str, ...] = ("en",)

    def version(self) -> str:
        fields = partial(steps.step_fields, self.variant)
        return stage_version(f"{PREFIX}/{self.variant}", self.tasks, self.langs, fields)


def _write_variant(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    variant: str,
    schema: pa.Schema,
    result: steps.StepOutput,
    config_name: str,
    budget: int,
):  # noqa: ANN202
    """Write a variant's rows, lineage and ledger, then yield its result and within_budget check."""
    partition = context.partition_key
    out = result.out
    table_name, lineage_name = steps.store_names(variant)
    stage = steps.ledger_stage(variant)
    table = build.rows_table(out.rows, schema)
    path = store.write(table, partition, table_name)
    store.write(build.lineage_table(out.lineage, config_name), partition, lineage_name)
    ids = result.kept if result.kept is not None else [r["id"] for r in out.rows]
    decisions = steps.variant_decisions(ids, out)
    store.write_ledger(ledger_table(partition, config_name, stage, decisions), partition, stage)
    context.log.info(f"{partition}: {config_name}: {len(out.rows)} row(s), {len(out.rejections)} rejected")
    yield dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema, preview_columns=["id", "source_id", "num_tokens"]),
            **steps.variant_metadata(out.rows, out.rejections, budget),
            "config_name": config_name,
            **result.extra,
        }
    )
    counts = steps.over_budget(out.rows, budget)
    yield check_result(
        check_name="within_budget",
        passed=counts["rows_over_budget"] == 0,
        failures=counts["rows_over_budget"],
        metadata=counts,
    )


def _variant_asset(v: Variant) -> dg.AssetsDefinition:
    """The asset of a variant: resolve its recipe (not built: empty outputs, the release leaves the
    config out), run its step, write rows, lineage, ledger, the recipe record and metadata."""
    llm = {"pool": "gpu", "retry_policy": LLM_RETRY_POLICY} if v.roles else {}

    @_asset(
        v.variant,
        v.version(),
        v.reads,
        check_specs=[
            dg.AssetCheckSpec("within_budget", asset=dg.AssetKey([PREFIX, v.variant]), blocking=True)
        ],
        required_resource_keys={"store", *v.roles},
        description=v.doc,
        **llm,
    )
    def _variant(context: dg.AssetExecutionContext, config: LongContextConfig):  # noqa: ANN202
        store: ArtifactStore = context.resources.store
        partition = context.partition_key
        recipe = lc_recipes.resolve(partition, v.variant, config.recipe, config.overrides)
        folder = store.path(partition, steps.store_names(v.variant)[0]).parent
        if recipe is None:
            context.log.info(f"{partition}: {v.variant} not built (no recipe of this source builds it)")
            (folder / recipes.RECORD_FILE).unlink(missing_ok=True)
            name = f"{lc_recipes.source_name(partition)}_{v.variant}"
            empty = steps.StepOutput(build.VariantOutput(), {"built": False})
            yield from _write_variant(context, store, v.variant, v.schema, empty, name, 0)
            return
        t0 = time.monotonic()
        models = {r: getattr(context.resources, r) for r in v.roles}
        result = v.step(
            steps.StepInput(
                _inputs(context, store),
                partition,
                recipe,
                config.seed,
                _vectors_path(store, partition),
                models,
                context.log,
            )
        )
        rec = recipes.record(recipe)
        recipes.write_record(folder, rec)
        result.extra.update(
            recipe=dg.MetadataValue.json(rec),
            tokenizer=recipe.tokenizer_dir,
            built=True,
            wall_s=round(time.monotonic() - t0, 1),
        )
        name = lc_recipes.config_name(partition, recipe)
        yield from _write_variant(context, store, v.variant, v.schema, result, name, recipe.budget_tokens)

    return _variant


VARIANTS = (
    Variant(
        lc_recipes.RAFT, build.RAFT_SCHEMA, ("examples", "passage_embeddings", "neighbours"),
        "Variant 1 (<source>_raft): oracle + nearest passages up to the token budget, shuffled.",
        steps.raft_step,
    ),
    Variant(
        lc_recipes.SYNTACTIC, build.SYNTACTIC_SCHEMA, ("examples", "passage_embeddings", "neighbours"),
        "Variant 2 (<source>_raft_syntactic): a RAFT context and five exact syntactic QA pairs about"
        " its documents, a row each.",
        steps.syntactic_step,
    ),
    Variant(
        lc_recipes.CLUSTERED, build.CLUSTERED_SCHEMA, ("examples", "passage_embeddings"),
        "Variant 3 (<source>_clustered): contexts from seeded k-means clusters of passages and"
        " questions, several QA pairs per context.",
        steps.clustered_step,
        ("embedder",),
    ),
    Variant(
        lc_recipes.TRANSLATED, build.RAFT_SCHEMA, ("examples", "raft"),
        "Variant 5 (<source>_raft_<lang>, rag_tge_raft_zh): variant 1 translated piece by piece by"
        " the generator role (instruction included), checked, recounted within the budget.",
        steps.translated_step,
        ("generator",),
        (raft.PROMPT_TASK, translate.PROMPT_TASK),
        ("en", "zh"),
    ),
)  # fmt: skip
VARIANT_ASSETS = {v.variant: _variant_asset(v) for v in VARIANTS}
UPSTREAM = [
    dg.AssetKey([PREFIX, n]) for n in ("examples", "passage_embeddings", "neighbours", *VARIANT_ASSETS)
]


def release_folder(store: ArtifactStore, partition: str) -> Path:
    """``releases/long_context/<key>/``: beside, never inside, the QA chain's ``releases/<key>/``."""
    return store.home_path / "releases" / "long_context" / partition


@dg.asset(
    name="release",
    key_prefix=[PREFIX],
    partitions_def=qa_source_partitions,
    group_name=GROUP,
    code_version="3",  # 3: licenses and recipes per config
    deps=reads(*(dg.AssetKey([PREFIX, v]) for v in VARIANT_ASSETS)),
    kinds={"parquet", "huggingface"},
    check_specs=[
        dg.AssetCheckSpec("release_verifies", asset=dg.AssetKey([PREFIX, "release"]), blocking=True)
    ],
)
def release(  # noqa: ANN201
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    embedder: EmbeddingResource,
):
    """``releases/long_context/<key>/``: the RAFT configs with card, licenses, decisions, lineage, manifests."""
    from ragsft_assets.defs.release.assets import resource_settings, upstream_provenance
    from ragsft_assets.release.decisions import ledger_files
    from ragsft_assets.release.manifest import source_info

    partition = context.partition_key
    run_config, upstream_md, _ = upstream_provenance(context, UPSTREAM)
    records = recipes.read_records(store.root / partition)
    inputs = steps.release_inputs(_inputs(context, store), partition, list(VARIANT_ASSETS), records)
    ours = [f for f in ledger_files(store.root, partition) if f.stem.startswith("long_context")]
    target = release_folder(store, partition)
    source = source_info(store.root, store.home_path / "sources", partition)
    # The embedder's identity (not its calls: those depend on the cache, and the release must not)
    source["embedder"] = embedder.model_identity()
    written, stats = build.write_release(
        target,
        partition,
        inputs.built,
        ours,
        inputs.notes,
        source=source,
        run_config=run_config,
        resources=resource_settings(context),
    )
    yield from _release_result(context, target, written, stats, upstream_md)


def _release_result(context, target, written, stats, upstream_md):  # noqa: ANN001, ANN202
    from ragsft_assets.defs.release.assets import record_digest
    from ragsft_assets.release.verify import verify_release

    digest, _ = record_digest(context, target, target.parents[2], context.partition_key)  # the home
    report = verify_release(target, expected_digest=digest)
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(written.values()),
            "root_digest": digest,
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(written),
            "statistics": dg.MetadataValue.json(
                {
                    c: {**s, "positions": {str(k): v for k, v in s["positions"].items()}}
                    for c, s in stats.items()
                }
            ),
            "upstream_materialized": dg.MetadataValue.json(sorted(upstream_md)),
        }
    )
    yield check_result(
        check_name="release_verifies",
        passed=report.ok,
        failures=verify_failures(report),
        metadata={"report": dg.MetadataValue.md("\n".join(f"- {x}" for x in report.lines()))},
    )


ALL_ASSETS = [examples, passage_embeddings, neighbours, *VARIANT_ASSETS.values(), release]
