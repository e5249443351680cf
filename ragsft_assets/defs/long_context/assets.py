"""Long-context SFT assets (group ``long_context``, ``qa_source`` partitions, prefix ``long_context/``).

``examples`` -> ``passage_embeddings`` (the ``embedder`` role) -> ``neighbours`` -> ``raft``
(variant 1, config ``<source>_raft``) -> ``raft_syntactic`` (variant 2, ``<source>_raft_syntactic``);
``passage_embeddings`` -> ``clustered`` (variant 3, ``<source>_clustered``; question embeddings
from the ``embedder`` role too) -> ``release`` (``releases/long_context/<key>/``). Thin: each reads its inputs from the store, calls
``ragsft_assets.long_context``, writes Parquet, ledger rows and metadata. Store folders carry an
``lc_`` prefix (``assets/<key>/lc_raft/``), so they never meet the QA chain's of the same key.

No ``from __future__ import annotations`` here: Dagster resolves config and resource annotations at
decoration time.
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa

from ragsft_assets import recipes
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.check_results import check_result, verify_failures
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table
from ragsft_assets.long_context import build, raft, translate
from ragsft_assets.long_context import recipes as lc_recipes
from ragsft_assets.prompts import templates_version
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.store import ArtifactStore

GROUP = "long_context"
PREFIX = "long_context"
EXAMPLES = "lc_examples"
EMBEDDINGS = "lc_passage_embeddings"
NEIGHBOURS = "lc_neighbours"
RAFT = "lc_raft"
RAFT_LINEAGE = "lc_raft_lineage"
SYNTACTIC = "lc_raft_syntactic"
SYNTACTIC_LINEAGE = "lc_raft_syntactic_lineage"
STAGE_RAFT = "long_context_raft"
STAGE_SYNTACTIC = "long_context_raft_syntactic"
CLUSTERED = "lc_clustered"
CLUSTERED_LINEAGE = "lc_clustered_lineage"
STAGE_CLUSTERED = "long_context_clustered"
PROMPTS_VERSION = templates_version((raft.PROMPT_TASK,), ("en",))
TRANSLATED = "lc_raft_translated"
TRANSLATED_LINEAGE = "lc_raft_translated_lineage"
STAGE_TRANSLATED = "long_context_raft_translated"
TRANSLATE_VERSION = templates_version((raft.PROMPT_TASK, translate.PROMPT_TASK), ("en", "zh"))


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


def _variant_result(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    names: tuple[str, str, str],
    schema: pa.Schema,
    out,  # noqa: ANN001  (any variant output: rows, lineage, rejections)
    config_name: str,
    budget: int,
    extra: dict,
    kept_ids=None,  # noqa: ANN001
):  # noqa: ANN202
    """Write a variant's rows, lineage and ledger, then yield its result and within_budget check."""
    table_name, lineage_name, stage = names
    partition = context.partition_key
    table = build.rows_table(out.rows, schema)
    path = store.write(table, partition, table_name)
    store.write(build.lineage_table(out.lineage, config_name), partition, lineage_name)
    ids = kept_ids if kept_ids is not None else [r["id"] for r in out.rows]
    store.write_ledger(_ledger(partition, config_name, stage, ids, out), partition, stage)
    context.log.info(f"{partition}: {config_name}: {len(out.rows)} row(s), {len(out.rejections)} rejected")
    yield from _result(
        context, [path], table.schema, out.rows, out.rejections, budget, {"config_name": config_name, **extra}
    )


def _raft_config(
    recipe: lc_recipes.LongContextRecipe, seed: int, budget: int | None = None
) -> raft.RaftConfig:
    return raft.RaftConfig(
        budget_tokens=recipe.budget_tokens if budget is None else budget,
        k=recipe.k,
        p_oracle=recipe.p_oracle,
        seed=seed,
    )


def _counter(recipe: lc_recipes.LongContextRecipe) -> raft.ChatTokenCounter:
    return raft.ChatTokenCounter(recipe.tokenizer_dir)


def _asset(name: str, code_version: str, **kw):  # noqa: ANN202
    return dg.asset(
        name=name,
        key_prefix=[PREFIX],
        partitions_def=qa_source_partitions,
        group_name=GROUP,
        code_version=code_version,
        kinds={"parquet"},
        **kw,
    )


@_asset("examples", "2")
def examples(
    context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """QA examples of the installed source: question, answer and oracle passages (supporting paragraphs)."""
    import pyarrow.compute as pc

    from ragsft_assets.sources.read import read_source_folder

    partition = context.partition_key
    read = read_source_folder(store.home_path / "sources" / partition)
    table = read.table.filter(pc.is_in(read.table["split"], value_set=pa.array(config.splits)))
    if table.num_rows == 0:
        found = sorted(set(read.table["split"].to_pylist()))
        raise ValueError(
            f"{partition}: no source row in split(s) {config.splits} (the source has {found});"
            " set the `splits` of long_context/examples' config"
        )
    exs, rejected = build.examples_from_source(table.to_pylist(), cites=read.cites)
    out = build.examples_table(exs)
    path = store.write(out, partition, EXAMPLES)
    product = f"{lc_recipes.source_name(partition)}_{raft.VARIANT}"
    store.write_ledger(
        ledger_table(
            partition,
            product,
            "long_context_examples",
            [Decision(r["id"], DROPPED, r["reason"], {"detail": r["detail"]}) for r in rejected],
        ),
        partition,
        "long_context_examples",
    )
    context.log.info(f"{partition}: {len(exs)} example(s) from {table.num_rows} source row(s)")
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], out.schema, preview_columns=["id", "question", "answer"]),
            **funnel_metadata(
                {"source rows": read.table.num_rows, "in splits": table.num_rows, "examples": len(exs)}
            ),
            "passages": sum(len(e.passages) for e in exs),
            "rejected": len(rejected),
        }
    )


EMBEDDINGS_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("passage_id", pa.string()),
        ("example_id", pa.string()),
        ("embedding_key", pa.string()),
    ]
)  # the vectors: VECTORS_FILE beside it, float32 rows in this order, read memory-mapped


# Embedding steps sit in the `gpu` pool with the LLM steps: the embedder may run vLLM on the GPU.
@_asset("passage_embeddings", "2", deps=[examples], pool="gpu", retry_policy=LLM_RETRY_POLICY)
def passage_embeddings(
    context: dg.AssetExecutionContext, store: ArtifactStore, embedder: EmbeddingResource
) -> dg.MaterializeResult:
    """One vector per (example, oracle passage) row, from the ``embedder`` role (cached by content)."""
    partition = context.partition_key
    exs = build.examples_from_table(store.read(partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    result = embedder.embed(rows.texts, log=context.log, out=_vectors_path(store, partition))
    table = pa.table(
        {
            "row": pa.array(range(len(rows.texts)), pa.int64()),
            "passage_id": rows.ids,
            "example_id": rows.groups,
            "embedding_key": result.keys,
        },
        schema=EMBEDDINGS_SCHEMA,
    )
    path = store.write(table, partition, EMBEDDINGS)
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


NEIGHBOURS_SCHEMA = pa.schema(
    [("row", pa.int64()), ("indices", pa.list_(pa.int64())), ("scores", pa.list_(pa.float64()))]
)


@_asset("neighbours", "2", deps=[passage_embeddings])
def neighbours(
    context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """Top-k passages by inner product per row (itself, duplicates and its example excluded):
    exact up to ``neighbours_exact_max`` unique passages, a seeded IVF index above it."""
    from ragsft_assets.long_context import neighbours as lc_nb

    partition = context.partition_key
    emb = store.read(partition, EMBEDDINGS)
    nb = lc_nb.nearest_neighbours(
        _vectors(store, partition, emb.num_rows),  # memory-mapped
        config.neighbours,
        keys=lc_nb.arrow_codes(emb["passage_id"]),
        groups=lc_nb.arrow_codes(emb["example_id"]),
        settings=lc_nb.SearchSettings(exact_max=config.neighbours_exact_max, seed=config.seed),
        log=context.log,
    )
    # NaN pads the -1 indices: kept as null so the Parquet holds no NaN
    table = lc_nb.neighbours_table(emb["row"], nb).cast(NEIGHBOURS_SCHEMA)
    path = store.write(table, partition, NEIGHBOURS)
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema),
            "k": config.neighbours,
            "fallbacks": nb.fallbacks,
            "wall_s": round(nb.wall_s, 3),
            **nb.metadata(),  # search/method, search/recall_at_k, search/nprobe, ...
        }
    )


def _vectors_path(store: ArtifactStore, partition: str):  # noqa: ANN202
    from ragsft_assets.resources.embedder import VECTORS_FILE

    return store.path(partition, EMBEDDINGS).with_name(VECTORS_FILE)


def _vectors(store: ArtifactStore, partition: str, n_rows: int) -> np.ndarray:
    """The passage vectors, memory-mapped (row-aligned with ``passage_embeddings``' table)."""
    from ragsft_assets.resources.embedder import open_vectors

    path = _vectors_path(store, partition)
    if not path.is_file():
        raise FileNotFoundError(
            f"{partition}: {path} is missing: rematerialize long_context/passage_embeddings"
        )
    vectors = open_vectors(path)
    if len(vectors) != n_rows:
        raise RuntimeError(
            f"{partition}: {path} holds {len(vectors)} vectors for {n_rows} passage rows:"
            " rematerialize long_context/passage_embeddings"
        )
    return vectors if n_rows else np.zeros((0, 1), np.float32)


def _neighbours(store: ArtifactStore, partition: str):  # noqa: ANN202
    from ragsft_assets.long_context.neighbours import neighbours_from_table

    return neighbours_from_table(store.read(partition, NEIGHBOURS))


def _inputs(store: ArtifactStore, partition: str, neighbours_too: bool = True):  # noqa: ANN202
    exs = build.examples_from_table(store.read(partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    emb = store.read(partition, EMBEDDINGS)
    if emb["passage_id"].to_pylist() != rows.ids:
        raise RuntimeError(
            f"{partition}: passage_embeddings is stale for these examples: rematerialize it first"
        )
    nb = _neighbours(store, partition) if neighbours_too else None
    return exs, rows, nb, emb["embedding_key"].to_pylist()


def _ledger(partition: str, product: str, stage: str, kept_ids, out) -> pa.Table:  # noqa: ANN001
    decisions = [Decision(i, KEPT) for i in kept_ids]
    decisions += [Decision(r["id"], DROPPED, r["reason"], {"detail": r["detail"]}) for r in out.rejections]
    return ledger_table(partition, product, stage, decisions)


def _result(
    context: dg.AssetExecutionContext,
    paths: list,
    schema: pa.Schema,
    rows: list[dict],
    rejections: list[dict],
    budget: int,
    extra: dict,
):  # noqa: ANN202
    n_tokens = [r["num_tokens"] for r in rows]
    over = sum(1 for n in n_tokens if n > budget)
    yield dg.MaterializeResult(
        metadata={
            **table_metadata(paths, schema, preview_columns=["id", "source_id", "num_tokens"]),
            "length": dg.MetadataValue.json(raft.length_stats(n_tokens)),
            "oracle_positions": dg.MetadataValue.json(
                {str(k): v for k, v in raft.oracle_position_histogram(rows).items()}
            ),
            "rejections": dg.MetadataValue.json(dict(Counter(r["reason"] for r in rejections))),
            "budget_tokens": budget,
            **extra,
        }
    )
    yield check_result(
        check_name="within_budget",
        passed=over == 0,
        failures=over,
        metadata={"rows_over_budget": over, "max_tokens": max(n_tokens, default=0)},
    )


def _budget_check(name: str) -> list:
    return [dg.AssetCheckSpec("within_budget", asset=dg.AssetKey([PREFIX, name]), blocking=True)]


@dataclass(frozen=True)
class VariantInput:
    """What a variant's step gets: the run config, the resolved recipe, the store, the context."""

    context: dg.AssetExecutionContext
    config: LongContextConfig
    recipe: lc_recipes.LongContextRecipe
    store: ArtifactStore
    partition: str


@dataclass(frozen=True)
class Variant:
    """One long-context variant as an asset: its store names, schema, inputs and its step."""

    variant: str  # lc_recipes.RAFT, SYNTACTIC, CLUSTERED or TRANSLATED
    names: tuple[str, str, str]  # (rows, lineage, ledger stage)
    schema: pa.Schema
    version: str
    deps: tuple[str, ...]
    doc: str
    # -> (output, extra metadata, kept ids for the ledger or None for the rows' ids)
    step: Callable[[VariantInput], tuple[Any, dict, list | None]]
    resources: tuple[str, ...] = ()  # roles it calls (the embedder, the generator)


def _variant_asset(v: Variant) -> dg.AssetsDefinition:
    """The asset of a variant: resolve its recipe (not built: empty outputs, the release leaves the
    config out), run its step, write rows, lineage, ledger, the recipe record and metadata."""
    llm = {"pool": "gpu", "retry_policy": LLM_RETRY_POLICY} if v.resources else {}

    @_asset(
        v.variant,
        v.version,
        deps=[dg.AssetKey([PREFIX, d]) for d in v.deps],
        check_specs=_budget_check(v.variant),
        required_resource_keys={"store", *v.resources},
        description=v.doc,
        **llm,
    )
    def _variant(context: dg.AssetExecutionContext, config: LongContextConfig):  # noqa: ANN202
        store: ArtifactStore = context.resources.store
        partition = context.partition_key
        recipe = lc_recipes.resolve(partition, v.variant, config.recipe, config.overrides)
        folder = store.path(partition, v.names[0]).parent
        if recipe is None:
            context.log.info(f"{partition}: {v.variant} not built (no recipe of this source builds it)")
            (folder / recipes.RECORD_FILE).unlink(missing_ok=True)
            name = f"{lc_recipes.source_name(partition)}_{v.variant}"
            yield from _variant_result(
                context, store, v.names, v.schema, build.VariantOutput(), name, 0, {"built": False}
            )
            return
        t0 = time.monotonic()
        out, extra, kept = v.step(VariantInput(context, config, recipe, store, partition))
        rec = recipes.record(recipe)
        recipes.write_record(folder, rec)
        extra = {
            **extra,
            "recipe": dg.MetadataValue.json(rec),
            "tokenizer": recipe.tokenizer_dir,
            "built": True,
            "wall_s": round(time.monotonic() - t0, 1),
        }
        name = lc_recipes.config_name(partition, recipe)
        yield from _variant_result(
            context, store, v.names, v.schema, out, name, recipe.budget_tokens, extra, kept_ids=kept
        )

    return _variant


def _raft_step(s: VariantInput) -> tuple[Any, dict, list | None]:
    exs, rows, nb, keys = _inputs(s.store, s.partition)
    out = raft.raft_examples(
        exs, rows, nb, _counter(s.recipe), _raft_config(s.recipe, s.config.seed), embedding_keys=keys
    )
    extra = {"p_oracle": s.recipe.p_oracle, "oracle_kept": sum(1 for x in out.lineage if x["oracle_kept"])}
    return out, extra, [r["source_id"] for r in out.rows]


def _syntactic_step(s: VariantInput) -> tuple[Any, dict, list | None]:
    exs, rows, nb, keys = _inputs(s.store, s.partition)
    counter = _counter(s.recipe)
    budget = s.recipe.budget_tokens
    reserved = _raft_config(s.recipe, s.config.seed, budget - max(0, s.recipe.syntactic_reserve_tokens))
    contexts = raft.raft_examples(exs, rows, nb, counter, reserved, embedding_keys=keys)
    texts = dict(zip(rows.ids, rows.texts, strict=True))
    out = build.syntactic_examples(contexts, texts, counter, budget, s.config.seed)
    out.rejections = contexts.rejections + out.rejections
    extra = {
        "contexts": len(contexts.rows),
        "skipped_questions": dg.MetadataValue.json(dict(sorted(out.skipped.items()))),
        "question_types": dg.MetadataValue.json(
            dict(sorted(Counter(r["question_type"] for r in out.rows).items()))
        ),
    }
    return out, extra, None


def _clustered_step(s: VariantInput) -> tuple[Any, dict, list | None]:
    from ragsft_assets.long_context.clustered import ClusterConfig, clustered_examples

    embedder: EmbeddingResource = s.context.resources.embedder
    exs, rows, _, keys = _inputs(s.store, s.partition, neighbours_too=False)
    vectors = _vectors(s.store, s.partition, len(rows.ids))
    # an example's passage vector: the mean of its oracle passages' vectors (normalised later)
    pv = np.stack([vectors[rows.example_rows[e.id]].mean(axis=0) for e in exs]) if exs else vectors
    questions = embedder.embed([e.question for e in exs], log=s.context.log)
    out, labels = clustered_examples(
        exs,
        pv,
        questions.vectors if exs else vectors,
        _counter(s.recipe),
        ClusterConfig(
            budget_tokens=s.recipe.budget_tokens,
            n_clusters=s.recipe.n_clusters or 0,
            cluster_size=s.recipe.cluster_size,
            seed=s.config.seed,
        ),
        passage_keys=dict(zip(rows.ids, keys, strict=True)),
        question_keys=questions.keys,
    )
    extra = {
        "clusters": dg.MetadataValue.json({k: len(set(v.tolist())) for k, v in labels.items()}),
        "qa_pairs_per_row": dg.MetadataValue.json(
            raft.length_stats([len(r["qa_source_ids"]) for r in out.rows])
        ),
        **questions.stats.as_metadata("embedder_questions"),
    }
    return out, extra, [r["source_id"] for r in out.rows]


def _translated_step(s: VariantInput) -> tuple[Any, dict, list | None]:
    from ragsft_assets.llm.types import SamplingParams

    generator: LLMResource = s.context.resources.generator
    language, max_tokens = s.recipe.translate_language, s.recipe.translate_max_tokens
    if not s.store.files(s.partition, RAFT) or not s.store.read(s.partition, RAFT).num_rows:
        raise ValueError(
            f"{s.partition}: the translation reads long_context/raft's rows and there are none;"
            " name a recipe for long_context/raft too (e.g. long_context_raft)"
        )
    exs = build.examples_from_table(s.store.read(s.partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    stats: list = []
    # The translation runs without thinking (a role's setting still wins): reasoning would eat the
    # piece's token budget.
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=s.config.seed, enable_thinking=False)

    def run(pieces: list[str]) -> list[translate.Piece]:  # one batch per call
        batch = generator.chat(
            [translate.translation_request(t, language) for t in pieces],
            params,
            template_version=translate.prompt_version(),
            log=s.context.log,
        )
        stats.append(batch.stats)
        return [translate.piece_of(r.text, r.ok, r.completion_tokens, max_tokens) for r in batch.results]

    out = translate.translate_rows(
        s.store.read(s.partition, RAFT).to_pylist(),
        s.store.read(s.partition, RAFT_LINEAGE).to_pylist(),
        dict(zip(rows.ids, rows.texts, strict=True)),
        run,
        _counter(s.recipe),
        translate.TranslateConfig(
            language=language, budget_tokens=s.recipe.budget_tokens, max_tokens=max_tokens
        ),
        citing=frozenset(e.id for e in exs if e.cites),
    )
    total = stats[0] if stats else None
    for more in stats[1:]:
        total = total.add(more)
    extra = {
        "language": language,
        "pieces": out.texts,
        "dropped_distractors": out.dropped_distractors,
        "generator/model": dg.MetadataValue.json(generator.model_identity()),
        "generator/batches": len(stats),
        **(total.to_metadata("generator") if total is not None else {}),
    }
    return out, extra, [r["source_id"] for r in out.rows]


VARIANTS = (
    Variant(
        lc_recipes.RAFT, (RAFT, RAFT_LINEAGE, STAGE_RAFT), build.RAFT_SCHEMA, f"3-{PROMPTS_VERSION}",
        ("neighbours",),
        "Variant 1 (<source>_raft): oracle + nearest passages up to the token budget, shuffled.",
        _raft_step,
    ),
    Variant(
        lc_recipes.SYNTACTIC, (SYNTACTIC, SYNTACTIC_LINEAGE, STAGE_SYNTACTIC), build.SYNTACTIC_SCHEMA,
        f"3-{PROMPTS_VERSION}", ("neighbours",),
        "Variant 2 (<source>_raft_syntactic): a RAFT context and five exact syntactic QA pairs about"
        " its documents, a row each.",
        _syntactic_step,
    ),
    Variant(
        lc_recipes.CLUSTERED, (CLUSTERED, CLUSTERED_LINEAGE, STAGE_CLUSTERED), build.CLUSTERED_SCHEMA,
        f"3-{PROMPTS_VERSION}", ("passage_embeddings",),
        "Variant 3 (<source>_clustered): contexts from seeded k-means clusters of passages and"
        " questions, several QA pairs per context.",
        _clustered_step,
        ("embedder",),
    ),
    Variant(
        lc_recipes.TRANSLATED, (TRANSLATED, TRANSLATED_LINEAGE, STAGE_TRANSLATED), build.RAFT_SCHEMA,
        f"2-{TRANSLATE_VERSION}", ("raft",),
        "Variant 5 (<source>_raft_<lang>, rag_tge_raft_zh): variant 1 translated piece by piece by"
        " the generator role (instruction included), checked, recounted within the budget.",
        _translated_step,
        ("generator",),
    ),
)  # fmt: skip
VARIANT_ASSETS = {v.variant: _variant_asset(v) for v in VARIANTS}


UPSTREAM = [
    dg.AssetKey([PREFIX, n])
    for n in (
        "examples",
        "passage_embeddings",
        "neighbours",
        "raft",
        "raft_syntactic",
        "clustered",
        "raft_translated",
    )
]


def release_folder(store: ArtifactStore, partition: str):  # noqa: ANN201
    """``releases/long_context/<key>/``: beside, never inside, the QA chain's ``releases/<key>/``."""
    return store.home_path / "releases" / "long_context" / partition


@dg.asset(
    name="release",
    key_prefix=[PREFIX],
    partitions_def=qa_source_partitions,
    group_name=GROUP,
    code_version="3",  # 3: licenses and recipes per config
    deps=list(VARIANT_ASSETS.values()),
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
    built: dict[str, build.BuiltConfig] = {}
    notes = []
    for v in VARIANTS:
        table_name, lineage_name, stage = v.names
        rec = records.get(table_name)
        name = f"{lc_recipes.source_name(partition)}_{v.variant}"
        if not store.files(partition, table_name):
            notes.append(f"`{name}` is not built: `long_context/{v.variant}` was never materialized.")
            continue
        table = store.read(partition, table_name)
        if rec is None or not table.num_rows:
            notes.append(f"`{name}` is not built for `{partition}` (no recipe of this source builds it).")
            continue
        recipe = recipes.apply_overrides(
            recipes.get(rec["recipe"]), {f: c["run"] for f, c in rec["changed"].items()}
        )
        ledger = store.read(partition, "_ledger", stage).to_pylist()
        built[lc_recipes.config_name(partition, recipe)] = build.BuiltConfig(
            table=table,
            lineage=store.read(partition, lineage_name),
            asset=f"long_context/{v.variant}",
            recipe=recipe,
            record=rec,
            rejections=dict(sorted(Counter(r["reason"] for r in ledger if r["verdict"] == DROPPED).items())),
        )
    ours = [f for f in ledger_files(store.root, partition) if f.stem.startswith("long_context")]
    target = release_folder(store, partition)
    source = source_info(store.root, store.home_path / "sources", partition)
    # The embedder's identity (not its calls: those depend on the cache, and the release must not)
    source["embedder"] = embedder.model_identity()
    written, stats = build.write_release(
        target,
        partition,
        built,
        ours,
        notes,
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
