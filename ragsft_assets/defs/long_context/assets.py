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

import dagster as dg
import numpy as np
import pyarrow as pa

from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table
from ragsft_assets.long_context import build, raft, translate
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
    budget_tokens: int = raft.DEFAULT_BUDGET
    k: int = 0  # most distractors per example; 0 = as many as fit the budget
    p_oracle: float = 1.0  # RAFT's P: the share of examples that keep the oracle
    neighbours: int = 64  # candidates per passage (enough to fill the budget)
    tokenizer_dir: str = ""  # model folder of the trained model's tokenizer; "" = the embedded chat model's
    syntactic_reserve_tokens: int = build.DEFAULT_RESERVE
    n_clusters: int = 0  # clustered: k of both k-means; 0 = about one cluster per cluster_size examples
    cluster_size: int = 8
    # variants to build for this source (raft, raft_syntactic, clustered, raft_translated);
    # [] = the card's for its sources (build.DEFAULT_VARIANTS), the first three for any other
    variants: list[str] = []
    translate_language: str = translate.DEFAULT_LANGUAGE  # raft_translated: target language code
    translate_max_tokens: int = 2048  # raft_translated: most tokens of one translated piece


class LongContextReleaseConfig(dg.Config):
    """Settings of the release: the card's license lines."""

    license: str = ""  # "" = the texts keep their source's license
    # a translation can carry its model's license (the seed's Chinese set: Llama 3.1, non-commercial)
    translation_license: str = ""


def _wanted(config: LongContextConfig, partition: str, variant: str) -> bool:
    return variant in (config.variants or build.default_variants(partition))


def _write_variant(
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


def _not_built(context: dg.AssetExecutionContext, store: ArtifactStore, names, schema, config_name):  # noqa: ANN001, ANN202
    """A variant this source does not build: empty outputs (the release leaves the config out)."""
    context.log.info(f"{context.partition_key}: {config_name} not built (not in this source's variants)")
    yield from _write_variant(
        context, store, names, schema, build.VariantOutput(), config_name, 0, {"built": False}
    )


def _raft_config(config: LongContextConfig, budget: int | None = None) -> raft.RaftConfig:
    return raft.RaftConfig(
        budget_tokens=config.budget_tokens if budget is None else budget,
        k=config.k or None,
        p_oracle=config.p_oracle,
        seed=config.seed,
    )


def _counter(config: LongContextConfig) -> raft.ChatTokenCounter:
    return raft.ChatTokenCounter(config.tokenizer_dir or None)


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
    exs, rejected = build.examples_from_source(table.to_pylist())
    out = build.examples_table(exs)
    path = store.write(out, partition, EXAMPLES)
    product = build.config_names(partition)[raft.VARIANT]
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
        ("vector", pa.list_(pa.float32())),
    ]
)


# Embedding steps sit in the `gpu` pool with the LLM steps: the embedder may run vLLM on the GPU.
@_asset("passage_embeddings", "1", deps=[examples], pool="gpu", retry_policy=LLM_RETRY_POLICY)
def passage_embeddings(
    context: dg.AssetExecutionContext, store: ArtifactStore, embedder: EmbeddingResource
) -> dg.MaterializeResult:
    """One vector per (example, oracle passage) row, from the ``embedder`` role (cached by content)."""
    partition = context.partition_key
    exs = build.examples_from_table(store.read(partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    result = embedder.embed(rows.texts, log=context.log)
    table = pa.table(
        {
            "row": pa.array(range(len(rows.texts)), pa.int64()),
            "passage_id": rows.ids,
            "example_id": rows.groups,
            "embedding_key": result.keys,
            "vector": pa.array(list(result.vectors), pa.list_(pa.float32())),
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
            "unique_passages": len(set(rows.ids)),
        }
    )


NEIGHBOURS_SCHEMA = pa.schema(
    [("row", pa.int64()), ("indices", pa.list_(pa.int64())), ("scores", pa.list_(pa.float64()))]
)


@_asset("neighbours", "1", deps=[passage_embeddings])
def neighbours(
    context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """Exact top-k passages by inner product per row (itself, duplicates and its example excluded)."""
    from ragsft_assets.long_context.neighbours import nearest_neighbours

    partition = context.partition_key
    emb = store.read(partition, EMBEDDINGS)
    vectors = _vectors(emb)
    nb = nearest_neighbours(
        vectors,
        config.neighbours,
        keys=emb["passage_id"].to_pylist(),
        groups=emb["example_id"].to_pylist(),
    )
    table = pa.table(
        {
            "row": emb["row"],
            "indices": pa.array(nb.indices.tolist(), pa.list_(pa.int64())),
            # NaN pads the -1 indices: kept as null so the Parquet holds no NaN
            "scores": pa.array(
                [[None if np.isnan(s) else float(s) for s in r] for r in nb.scores.tolist()],
                pa.list_(pa.float64()),
            ),
        },
        schema=NEIGHBOURS_SCHEMA,
    )
    path = store.write(table, partition, NEIGHBOURS)
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema),
            "k": config.neighbours,
            "fallbacks": nb.fallbacks,
            "wall_s": round(nb.wall_s, 3),
        }
    )


def _vectors(emb: pa.Table) -> np.ndarray:
    if emb.num_rows == 0:
        return np.zeros((0, 1), np.float32)
    return np.asarray(emb["vector"].to_pylist(), dtype=np.float32)


def _neighbours(store: ArtifactStore, partition: str):  # noqa: ANN202
    from ragsft_assets.long_context.neighbours import Neighbours

    t = store.read(partition, NEIGHBOURS)
    idx = np.asarray(t["indices"].to_pylist(), dtype=np.int64)
    scores = np.asarray(
        [[np.nan if s is None else s for s in r] for r in t["scores"].to_pylist()], dtype=np.float64
    )
    return Neighbours(idx, scores)


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
    yield dg.AssetCheckResult(
        check_name="within_budget",
        passed=over == 0,
        metadata={"rows_over_budget": over, "max_tokens": max(n_tokens, default=0)},
    )


def _budget_check(name: str) -> list:
    return [dg.AssetCheckSpec("within_budget", asset=dg.AssetKey([PREFIX, name]), blocking=True)]


@_asset("raft", f"2-{PROMPTS_VERSION}", deps=[neighbours], check_specs=_budget_check("raft"))
def raft_rows(context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore):  # noqa: ANN201
    """Variant 1 (``<source>_raft``): oracle + nearest passages up to the token budget, shuffled."""
    partition = context.partition_key
    names = (RAFT, RAFT_LINEAGE, STAGE_RAFT)
    config_name = build.config_names(partition)[raft.VARIANT]
    # the translation (variant 5) reads variant 1's rows: built whenever either is wanted
    if not (_wanted(config, partition, raft.VARIANT) or _wanted(config, partition, translate.VARIANT)):
        yield from _not_built(context, store, names, build.RAFT_SCHEMA, config_name)
        return
    t0 = time.monotonic()
    exs, rows, nb, keys = _inputs(store, partition)
    counter = _counter(config)
    out = raft.raft_examples(exs, rows, nb, counter, _raft_config(config), embedding_keys=keys)
    extra = {
        "tokenizer": str(counter.model_dir),
        "p_oracle": config.p_oracle,
        "oracle_kept": sum(1 for x in out.lineage if x["oracle_kept"]),
        "wall_s": round(time.monotonic() - t0, 1),
        "built": _wanted(config, partition, raft.VARIANT),  # else only the translation's input
    }
    yield from _write_variant(
        context, store, names, build.RAFT_SCHEMA, out, config_name, config.budget_tokens, extra,
        kept_ids=[r["source_id"] for r in out.rows],
    )  # fmt: skip


@_asset(
    "raft_syntactic", f"2-{PROMPTS_VERSION}", deps=[neighbours], check_specs=_budget_check("raft_syntactic")
)
def raft_syntactic(context: dg.AssetExecutionContext, config: LongContextConfig, store: ArtifactStore):  # noqa: ANN201
    """Variant 2 (``<source>_raft_syntactic``): a RAFT context and five exact syntactic QA pairs, a row each."""
    partition = context.partition_key
    names = (SYNTACTIC, SYNTACTIC_LINEAGE, STAGE_SYNTACTIC)
    config_name = build.config_names(partition)[build.SYNTACTIC_VARIANT]
    if not _wanted(config, partition, build.SYNTACTIC_VARIANT):
        yield from _not_built(context, store, names, build.SYNTACTIC_SCHEMA, config_name)
        return
    exs, rows, nb, keys = _inputs(store, partition)
    counter = _counter(config)
    reserve = max(0, config.syntactic_reserve_tokens)
    contexts = raft.raft_examples(
        exs, rows, nb, counter, _raft_config(config, config.budget_tokens - reserve), embedding_keys=keys
    )
    texts = dict(zip(rows.ids, rows.texts, strict=True))
    out = build.syntactic_examples(contexts, texts, counter, config.budget_tokens, config.seed)
    out.rejections = contexts.rejections + out.rejections
    extra = {
        "contexts": len(contexts.rows),
        "skipped_questions": dg.MetadataValue.json(dict(sorted(out.skipped.items()))),
        "question_types": dg.MetadataValue.json(
            dict(sorted(Counter(r["question_type"] for r in out.rows).items()))
        ),
    }
    yield from _write_variant(
        context, store, names, build.SYNTACTIC_SCHEMA, out, config_name, config.budget_tokens, extra
    )


@_asset(
    "clustered",
    f"2-{PROMPTS_VERSION}",
    deps=[passage_embeddings],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    check_specs=_budget_check("clustered"),
)
def clustered(
    context: dg.AssetExecutionContext,
    config: LongContextConfig,
    store: ArtifactStore,
    embedder: EmbeddingResource,
):  # noqa: ANN201
    """Variant 3 (``<source>_clustered``): contexts from seeded k-means clusters of passages and
    questions, several QA pairs per context."""
    from ragsft_assets.long_context.clustered import ClusterConfig, clustered_examples

    partition = context.partition_key
    names = (CLUSTERED, CLUSTERED_LINEAGE, STAGE_CLUSTERED)
    config_name = build.config_names(partition)[build.CLUSTERED_VARIANT]
    if not _wanted(config, partition, build.CLUSTERED_VARIANT):
        yield from _not_built(context, store, names, build.CLUSTERED_SCHEMA, config_name)
        return
    exs, rows, _, keys = _inputs(store, partition, neighbours_too=False)
    vectors = _vectors(store.read(partition, EMBEDDINGS))
    # an example's passage vector: the mean of its oracle passages' vectors (normalised later)
    pv = np.stack([vectors[rows.example_rows[e.id]].mean(axis=0) for e in exs]) if exs else vectors
    questions = embedder.embed([e.question for e in exs], log=context.log)
    out, labels = clustered_examples(
        exs,
        pv,
        questions.vectors if exs else vectors,
        _counter(config),
        ClusterConfig(
            budget_tokens=config.budget_tokens,
            n_clusters=config.n_clusters,
            cluster_size=config.cluster_size,
            seed=config.seed,
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
    yield from _write_variant(
        context, store, names, build.CLUSTERED_SCHEMA, out, config_name, config.budget_tokens, extra,
        kept_ids=[r["source_id"] for r in out.rows],
    )  # fmt: skip


@_asset(
    "raft_translated",
    f"1-{TRANSLATE_VERSION}",
    deps=[raft_rows],
    pool="gpu",
    retry_policy=LLM_RETRY_POLICY,
    check_specs=_budget_check("raft_translated"),
)
def raft_translated(
    context: dg.AssetExecutionContext,
    config: LongContextConfig,
    store: ArtifactStore,
    generator: LLMResource,
):  # noqa: ANN201
    """Variant 5 (``<source>_raft_<lang>``, ``rag_tge_raft_zh``): variant 1 translated piece by piece
    by the generator role, recounted within the budget."""
    from ragsft_assets.llm.types import SamplingParams

    partition = context.partition_key
    names = (TRANSLATED, TRANSLATED_LINEAGE, STAGE_TRANSLATED)
    config_name = build.config_names(partition, config.translate_language)[translate.VARIANT]
    if not _wanted(config, partition, translate.VARIANT):
        yield from _not_built(context, store, names, build.RAFT_SCHEMA, config_name)
        return
    exs = build.examples_from_table(store.read(partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    texts = dict(zip(rows.ids, rows.texts, strict=True))
    stats = {}
    params = SamplingParams(temperature=0.0, max_tokens=config.translate_max_tokens, seed=config.seed)

    def run(pieces: list[str]) -> list[str | None]:
        batch = generator.chat(
            [translate.translation_request(t, config.translate_language) for t in pieces],
            params,
            template_version=translate.prompt_version(),
            log=context.log,
        )
        stats["llm"] = batch.stats
        return [r.text.strip() if r.ok and r.text.strip() else None for r in batch.results]

    out = translate.translate_rows(
        store.read(partition, RAFT).to_pylist(),
        store.read(partition, RAFT_LINEAGE).to_pylist(),
        texts,
        run,
        _counter(config),
        translate.TranslateConfig(
            language=config.translate_language,
            budget_tokens=config.budget_tokens,
            max_tokens=config.translate_max_tokens,
        ),
    )
    extra = {
        "language": config.translate_language,
        "pieces": out.texts,
        "dropped_distractors": out.dropped_distractors,
        "generator/model": dg.MetadataValue.json(generator.model_identity()),
        **(stats["llm"].to_metadata("generator") if "llm" in stats else {}),
    }
    yield from _write_variant(
        context, store, names, build.RAFT_SCHEMA, out, config_name, config.budget_tokens, extra,
        kept_ids=[r["source_id"] for r in out.rows],
    )  # fmt: skip


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
    code_version="2",  # 2: a source exported from a snapshot names it as origin
    deps=[raft_rows, raft_syntactic, clustered, raft_translated],
    kinds={"parquet", "huggingface"},
    check_specs=[
        dg.AssetCheckSpec("release_verifies", asset=dg.AssetKey([PREFIX, "release"]), blocking=True)
    ],
)
def release(  # noqa: ANN201
    context: dg.AssetExecutionContext,
    config: LongContextReleaseConfig,
    store: ArtifactStore,
    embedder: EmbeddingResource,
):
    """``releases/long_context/<key>/``: the RAFT configs with card, decisions, lineage, manifests."""
    from ragsft_assets.defs.release.assets import resource_settings, upstream_provenance
    from ragsft_assets.release.decisions import ledger_files
    from ragsft_assets.release.manifest import source_info
    from ragsft_assets.release.verify import verify_release

    partition = context.partition_key
    known = {
        k: a
        for a in (
            examples,
            passage_embeddings,
            neighbours,
            raft_rows,
            raft_syntactic,
            clustered,
            raft_translated,
        )
        for k in a.keys
    }
    run_config, upstream_md, _ = upstream_provenance(context, UPSTREAM, known)
    language = run_config.get("raft_translated", {}).get("translate_language", translate.DEFAULT_LANGUAGE)
    names = build.config_names(partition, language)
    # variant -> (store name, lineage store name, ledger stage, asset name)
    variants = {
        raft.VARIANT: (RAFT, RAFT_LINEAGE, STAGE_RAFT, "raft"),
        build.SYNTACTIC_VARIANT: (SYNTACTIC, SYNTACTIC_LINEAGE, STAGE_SYNTACTIC, "raft_syntactic"),
        build.CLUSTERED_VARIANT: (CLUSTERED, CLUSTERED_LINEAGE, STAGE_CLUSTERED, "clustered"),
        translate.VARIANT: (TRANSLATED, TRANSLATED_LINEAGE, STAGE_TRANSLATED, "raft_translated"),
    }
    # A variant never materialized for this key, or not built for its source, is left out, and the
    # card says so.
    notes = [
        f"`{names[v]}` is not built: `long_context/{a}` was never materialized for `{partition}`."
        for v, (t, _, _, a) in variants.items()
        if not store.files(partition, t)
    ]
    variants = {v: x for v, x in variants.items() if store.files(partition, x[0])}
    tables = {names[v]: store.read(partition, t) for v, (t, _, _, _) in variants.items()}
    notes += [
        f"`{c}` is not built for `{partition}` (the source's variants)."
        for c, t in tables.items()
        if not t.num_rows
    ]
    tables = {c: t for c, t in tables.items() if t.num_rows}
    variants = {v: x for v, x in variants.items() if names[v] in tables}
    lineage = {names[v]: store.read(partition, x) for v, (_, x, _, _) in variants.items()}
    stats = {}
    for variant, (_, _, stage, asset_name) in variants.items():
        config_name = names[variant]
        table = tables[config_name]
        rows = table.select(["oracle_positions", "num_tokens"]).to_pylist()
        ledger = store.read(partition, "_ledger", stage).to_pylist()
        stats[config_name] = {
            "rows": table.num_rows,
            "budget": run_config.get(asset_name, {}).get("budget_tokens", raft.DEFAULT_BUDGET),
            "length": raft.length_stats([r["num_tokens"] for r in rows]),
            "positions": raft.oracle_position_histogram(rows),
            "rejections": dict(
                sorted(Counter(r["reason"] for r in ledger if r["verdict"] == DROPPED).items())
            ),
        }
    ours = [f for f in ledger_files(store.root, partition) if f.stem.startswith("long_context")]
    target = release_folder(store, partition)
    source = source_info(store.root, store.home_path / "sources", partition)
    # The embedder's identity (not its calls: those depend on the cache, and the release must not)
    source["embedder"] = embedder.model_identity()
    written = build.write_release(
        target,
        partition,
        tables,
        lineage,
        ours,
        build.card_body(
            partition,
            stats,
            notes,
            license=config.license,
            translation_license=config.translation_license,
            language=language,
        ),
        source=source,
        run_config=run_config,
        resources=resource_settings(context),
    )
    report = verify_release(target)
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(written.values()),
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
    yield dg.AssetCheckResult(
        check_name="release_verifies",
        passed=report.ok,
        metadata={"report": dg.MetadataValue.md("\n".join(f"- {x}" for x in report.lines()))},
    )


ALL_ASSETS = [
    examples,
    passage_embeddings,
    neighbours,
    raft_rows,
    raft_syntactic,
    clustered,
    raft_translated,
    release,
]
