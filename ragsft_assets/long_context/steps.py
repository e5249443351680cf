"""The long-context assets' steps over stored tables (Dagster-free): what ``defs/long_context`` calls
between reading its declared inputs and writing Parquet, ledger rows and metadata.

Store tables carry an ``lc_`` prefix (``assets/<key>/lc_raft/``), so they never meet the QA chain's
of the same key; :func:`store_names` gives the tables an asset writes (its rows and their lineage),
from which its readers' declared inputs are made. Each variant's step takes a :class:`StepInput` and
returns a :class:`StepOutput`; :data:`STEP_FIELDS` names the recipe fields each reads (its code
version follows them, ``stage_versions``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ragsft_assets.ledger import DROPPED, KEPT, Decision
from ragsft_assets.long_context import build, raft, translate
from ragsft_assets.long_context import recipes as lc_recipes
from ragsft_assets.stage_versions import recipe_fields
from ragsft_assets.table_reader import TableReader

STORE_PREFIX = "lc_"
EXAMPLES = "lc_examples"
EMBEDDINGS = "lc_passage_embeddings"
NEIGHBOURS = "lc_neighbours"
RAFT = "lc_raft"
RAFT_LINEAGE = "lc_raft_lineage"
LINEAGE_SUFFIX = "_lineage"


def store_names(asset: str) -> tuple[str, str]:
    """The store tables of the asset ``long_context/<asset>``: its rows, then their lineage."""
    return f"{STORE_PREFIX}{asset}", f"{STORE_PREFIX}{asset}{LINEAGE_SUFFIX}"


def ledger_stage(variant: str) -> str:
    """The ledger stage of a variant (``long_context_raft``): also its family recipe's name."""
    return f"{lc_recipes.FAMILY}_{variant}"


# The recipe fields each variant's step reads (the budget and the tokenizer that counts it always)
_COUNTED = ("budget_tokens", "tokenizer_dir")
STEP_FIELDS: dict[str, tuple[str, ...]] = {
    lc_recipes.RAFT: (*_COUNTED, "k", "p_oracle"),
    lc_recipes.SYNTACTIC: (*_COUNTED, "k", "p_oracle", "syntactic_reserve_tokens"),
    lc_recipes.CLUSTERED: (*_COUNTED, "n_clusters", "cluster_size"),
    lc_recipes.TRANSLATED: (*_COUNTED, "k", "p_oracle", "translate_language", "translate_max_tokens"),
}


def step_fields(variant: str) -> dict[str, Any]:
    """The values of the fields a variant's step reads, in its family recipe (the card's numbers
    every source's build shares): what its code version follows."""
    return recipe_fields(lc_recipes.RECIPES[ledger_stage(variant)], STEP_FIELDS[variant])


EMBEDDINGS_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("passage_id", pa.string()),
        ("example_id", pa.string()),
        ("embedding_key", pa.string()),
    ]
)  # the vectors: VECTORS_FILE beside it, float32 rows in this order, read memory-mapped
NEIGHBOURS_SCHEMA = pa.schema(
    [("row", pa.int64()), ("indices", pa.list_(pa.int64())), ("scores", pa.list_(pa.float64()))]
)


@dataclass(frozen=True, slots=True)
class SourceExamples:
    """The examples of an installed source's splits, with what was counted on the way."""

    examples: list[raft.QAExample]
    table: pa.Table  # the built examples (EXAMPLES)
    rejected: list[dict[str, str]]  # {id, reason, detail}
    funnel: dict[str, int]  # source rows -> in splits -> examples


def source_examples(folder: Path, partition: str, splits: Sequence[str]) -> SourceExamples:
    """The QA examples of the source installed in ``folder``, from the rows of ``splits``.

    Raises:
        ValueError: no row in those splits, naming the splits the source has and the config field.
    """
    import pyarrow.compute as pc

    from ragsft_assets.sources.read import read_source_folder

    read = read_source_folder(folder)
    table = read.table.filter(pc.is_in(read.table["split"], value_set=pa.array(list(splits))))
    if table.num_rows == 0:
        found = sorted(set(read.table["split"].to_pylist()))
        raise ValueError(
            f"{partition}: no source row in split(s) {list(splits)} (the source has {found});"
            " set the `splits` of long_context/examples' config"
        )
    exs, rejected = build.examples_from_source(table.to_pylist(), cites=read.cites)
    funnel = {"source rows": read.table.num_rows, "in splits": table.num_rows, "examples": len(exs)}
    return SourceExamples(exs, build.examples_table(exs), rejected, funnel)


def rejection_decisions(rejections: Sequence[Mapping[str, str]]) -> list[Decision]:
    """A ledger row per rejection, its detail kept."""
    return [Decision(r["id"], DROPPED, r["reason"], {"detail": r["detail"]}) for r in rejections]


def variant_decisions(kept_ids: Sequence[str], out: build.VariantOutput) -> list[Decision]:
    """A variant's ledger rows: the kept ids, then the rejections."""
    return [Decision(i, KEPT) for i in kept_ids] + rejection_decisions(out.rejections)


def embeddings_table(rows: raft.PassageRows, keys: Sequence[str]) -> pa.Table:
    """The passage rows in the order embedded, with each vector's cache key."""
    return pa.table(
        {
            "row": pa.array(range(len(rows.texts)), pa.int64()),
            "passage_id": rows.ids,
            "example_id": rows.groups,
            "embedding_key": list(keys),
        },
        schema=EMBEDDINGS_SCHEMA,
    )


def open_passage_vectors(path: Path, partition: str, n_rows: int) -> np.ndarray:
    """The passage vectors, memory-mapped (row-aligned with ``passage_embeddings``' table).

    Raises:
        FileNotFoundError, RuntimeError: missing or misaligned, saying to rematerialize them.
    """
    from ragsft_assets.vector_files import open_vectors

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


@dataclass(frozen=True, slots=True)
class StepInput:
    """What a variant's step gets: its declared inputs, the partition, the resolved recipe, the
    seed, where the passage vectors are, the models of the roles it calls and a logger."""

    reader: TableReader
    partition: str
    recipe: lc_recipes.LongContextRecipe
    seed: int
    vectors_path: Path
    models: Mapping[str, Any]  # role -> model (the embedder, the generator)
    log: logging.Logger | Any


@dataclass(slots=True)
class StepOutput:
    """A step's output rows, its extra metadata (plain values) and the ids its ledger keeps
    (None: the rows' ids)."""

    out: build.VariantOutput | Any
    extra: dict[str, Any]
    kept: list[str] | None = None


Step = Callable[[StepInput], StepOutput]


@dataclass(frozen=True, slots=True)
class StoredInputs:
    """The examples, their passage rows, the neighbours (when read) and the embedding keys."""

    examples: list[raft.QAExample]
    rows: raft.PassageRows
    neighbours: Any  # long_context.neighbours.Neighbours, None when not read
    keys: list[str]


def stored_inputs(reader: TableReader, partition: str, neighbours_too: bool = True) -> StoredInputs:
    """The examples, passage rows and embeddings (and neighbours) a variant builds from.

    Raises:
        RuntimeError: the embeddings were built from other examples (rematerialize them first).
    """
    from ragsft_assets.long_context.neighbours import neighbours_from_table

    exs = build.examples_from_table(reader.read(partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    emb = reader.read(partition, EMBEDDINGS)
    if emb["passage_id"].to_pylist() != rows.ids:
        raise RuntimeError(
            f"{partition}: passage_embeddings is stale for these examples: rematerialize it first"
        )
    nb = neighbours_from_table(reader.read(partition, NEIGHBOURS)) if neighbours_too else None
    return StoredInputs(exs, rows, nb, emb["embedding_key"].to_pylist())


def raft_config(
    recipe: lc_recipes.LongContextRecipe, seed: int, budget: int | None = None
) -> raft.RaftConfig:
    return raft.RaftConfig(
        budget_tokens=recipe.budget_tokens if budget is None else budget,
        k=recipe.k,
        p_oracle=recipe.p_oracle,
        seed=seed,
    )


def counter(recipe: lc_recipes.LongContextRecipe) -> raft.ChatTokenCounter:
    return raft.ChatTokenCounter(recipe.tokenizer_dir)


def raft_step(s: StepInput) -> StepOutput:
    """Variant 1: oracle + nearest passages up to the budget, shuffled."""
    i = stored_inputs(s.reader, s.partition)
    out = raft.raft_examples(
        i.examples,
        i.rows,
        i.neighbours,
        counter(s.recipe),
        raft_config(s.recipe, s.seed),
        embedding_keys=i.keys,
    )
    extra = {"p_oracle": s.recipe.p_oracle, "oracle_kept": sum(1 for x in out.lineage if x["oracle_kept"])}
    return StepOutput(out, extra, [r["source_id"] for r in out.rows])


def syntactic_step(s: StepInput) -> StepOutput:
    """Variant 2: a RAFT context under the budget less the reserve, five syntactic QA pairs each."""
    i = stored_inputs(s.reader, s.partition)
    count = counter(s.recipe)
    budget = s.recipe.budget_tokens
    reserved = raft_config(s.recipe, s.seed, budget - max(0, s.recipe.syntactic_reserve_tokens))
    contexts = raft.raft_examples(i.examples, i.rows, i.neighbours, count, reserved, embedding_keys=i.keys)
    texts = dict(zip(i.rows.ids, i.rows.texts, strict=True))
    out = build.syntactic_examples(contexts, texts, count, budget, s.seed)
    out.rejections = contexts.rejections + out.rejections
    extra = {
        "contexts": len(contexts.rows),
        "skipped_questions": dict(sorted(out.skipped.items())),
        "question_types": dict(sorted(Counter(r["question_type"] for r in out.rows).items())),
    }
    return StepOutput(out, extra)


def clustered_step(s: StepInput) -> StepOutput:
    """Variant 3: contexts from seeded k-means clusters of passages and questions (the embedder)."""
    from ragsft_assets.long_context.clustered import ClusterConfig, clustered_examples

    embedder = s.models["embedder"]
    i = stored_inputs(s.reader, s.partition, neighbours_too=False)
    exs, rows = i.examples, i.rows
    vectors = open_passage_vectors(s.vectors_path, s.partition, len(rows.ids))
    # an example's passage vector: the mean of its oracle passages' vectors (normalised later)
    pv = np.stack([vectors[rows.example_rows[e.id]].mean(axis=0) for e in exs]) if exs else vectors
    questions = embedder.embed([e.question for e in exs], log=s.log)
    out, labels = clustered_examples(
        exs,
        pv,
        questions.vectors if exs else vectors,
        counter(s.recipe),
        ClusterConfig(
            budget_tokens=s.recipe.budget_tokens,
            n_clusters=s.recipe.n_clusters or 0,
            cluster_size=s.recipe.cluster_size,
            seed=s.seed,
        ),
        passage_keys=dict(zip(rows.ids, i.keys, strict=True)),
        question_keys=questions.keys,
    )
    extra = {
        "clusters": {k: len(set(v.tolist())) for k, v in labels.items()},
        "qa_pairs_per_row": raft.length_stats([len(r["qa_source_ids"]) for r in out.rows]),
        **questions.stats.as_metadata("embedder_questions"),
    }
    return StepOutput(out, extra, [r["source_id"] for r in out.rows])


def translated_step(s: StepInput) -> StepOutput:
    """Variant 5: variant 1's rows translated piece by piece by the generator, recounted.

    Raises:
        ValueError: variant 1 has no rows here (name a recipe for long_context/raft too).
    """
    from ragsft_assets.llm.types import SamplingParams

    generator = s.models["generator"]
    language, max_tokens = s.recipe.translate_language, s.recipe.translate_max_tokens
    if not s.reader.files(s.partition, RAFT) or not s.reader.read(s.partition, RAFT).num_rows:
        raise ValueError(
            f"{s.partition}: the translation reads long_context/raft's rows and there are none;"
            " name a recipe for long_context/raft too (e.g. long_context_raft)"
        )
    exs = build.examples_from_table(s.reader.read(s.partition, EXAMPLES))
    rows = raft.passage_rows(exs)
    stats: list = []
    # The translation runs without thinking (a role's setting still wins): reasoning would eat the
    # piece's token budget.
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=s.seed, enable_thinking=False)

    def run(pieces: list[str]) -> list[translate.Piece]:  # one batch per call
        batch = generator.chat(
            [translate.translation_request(t, language) for t in pieces],
            params,
            template_version=translate.prompt_version(),
            log=s.log,
        )
        stats.append(batch.stats)
        return [translate.piece_of(r.text, r.ok, r.completion_tokens, max_tokens) for r in batch.results]

    out = translate.translate_rows(
        s.reader.read(s.partition, RAFT).to_pylist(),
        s.reader.read(s.partition, RAFT_LINEAGE).to_pylist(),
        dict(zip(rows.ids, rows.texts, strict=True)),
        run,
        counter(s.recipe),
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
        "generator/model": generator.model_identity(),
        "generator/batches": len(stats),
        **(total.to_metadata("generator") if total is not None else {}),
    }
    return StepOutput(out, extra, [r["source_id"] for r in out.rows])


def variant_metadata(
    rows: Sequence[Mapping[str, Any]], rejections: Sequence[Mapping[str, str]], budget: int
) -> dict[str, Any]:
    """A variant's statistics: lengths, oracle positions, rejections by reason, the budget."""
    n_tokens = [r["num_tokens"] for r in rows]
    return {
        "length": raft.length_stats(n_tokens),
        "oracle_positions": {str(k): v for k, v in raft.oracle_position_histogram(list(rows)).items()},
        "rejections": dict(Counter(r["reason"] for r in rejections)),
        "budget_tokens": budget,
    }


def over_budget(rows: Sequence[Mapping[str, Any]], budget: int) -> dict[str, int]:
    """The ``within_budget`` check's counts: rows over the budget and the longest row."""
    n_tokens = [r["num_tokens"] for r in rows]
    return {
        "rows_over_budget": sum(1 for n in n_tokens if n > budget),
        "max_tokens": max(n_tokens, default=0),
    }


@dataclass(frozen=True, slots=True)
class ReleaseInputs:
    """The built configs of a partition (by config name) and a note per variant left out."""

    built: dict[str, build.BuiltConfig]
    notes: list[str]


def release_inputs(
    reader: TableReader, partition: str, variants: Sequence[str], records: Mapping[str, Mapping[str, Any]]
) -> ReleaseInputs:
    """What the release holds: each variant's stored rows, lineage, recipe and rejections, or why
    it is left out (never materialized, or no recipe of this source builds it). ``records``: the
    recipe records by store name (``recipes.read_records``)."""
    from ragsft_assets import recipes

    built: dict[str, build.BuiltConfig] = {}
    notes = []
    for variant in variants:
        table_name, lineage_name = store_names(variant)
        rec = records.get(table_name)
        name = f"{lc_recipes.source_name(partition)}_{variant}"
        if not reader.files(partition, table_name):
            notes.append(f"`{name}` is not built: `long_context/{variant}` was never materialized.")
            continue
        table = reader.read(partition, table_name)
        if rec is None or not table.num_rows:
            notes.append(f"`{name}` is not built for `{partition}` (no recipe of this source builds it).")
            continue
        recipe = recipes.apply_overrides(
            recipes.get(rec["recipe"]), {f: c["run"] for f, c in rec["changed"].items()}
        )
        ledger = reader.read(partition, "_ledger", ledger_stage(variant)).to_pylist()
        built[lc_recipes.config_name(partition, recipe)] = build.BuiltConfig(
            table=table,
            lineage=reader.read(partition, lineage_name),
            asset=f"long_context/{variant}",
            recipe=recipe,
            record=rec,
            rejections=dict(sorted(Counter(r["reason"] for r in ledger if r["verdict"] == DROPPED).items())),
        )
    return ReleaseInputs(built, notes)
