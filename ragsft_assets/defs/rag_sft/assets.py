"""RAG SFT with verified citations: prompts, generated targets, verdicts, formatted chat rows.

One factory, :func:`build_sft_chain`, builds the four stages for each kind of input: the snapshot
chain (on a snapshot's ``multihop_questions``, today's keys) and the QA chain (on a ``qa_source``
partition's ``qa/questions``, keys under the ``qa/`` prefix). The Parquet artifacts keep the stage
names (``assets/<key>/rag_prompts/...``): keys are unique across partition sets.

What each stage does is the run's recipe (``rag_sft/recipes.py``: one per published config,
resolved once per stage from ``recipe`` and ``overrides``); each stage writes the resolved recipe
beside its files (``_recipe.json``) and into its metadata.

No ``from __future__ import annotations`` here: Dagster resolves the config and resource
annotations at decoration time.
"""

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets import published_configs
from ragsft_assets import recipes as recipe_records
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.check_results import check_result
from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions, snapshot_language, snapshot_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table
from ragsft_assets.llm.types import BatchStats, ChatModel, SamplingParams
from ragsft_assets.rag_sft import citations, examples, formatting, statistics, verdicts
from ragsft_assets.rag_sft.hotpot_input import records_from_table
from ragsft_assets.rag_sft.recipes import RagSftRecipe, chain_record, default_recipe
from ragsft_assets.rag_sft.recipes import resolve as resolve_recipe
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.stage_versions import stage_version
from ragsft_assets.storage import SPLITS, atomic_write_bytes

GROUP = "rag_sft"
QA_GROUP = "qa_sft"
QA_PREFIX = "qa"
INPUT_ASSET = "multihop_questions"
QA_INPUT_ASSET = "questions"  # store name of qa/questions
JUDGE_TASKS = ("rag_judge_factual", "rag_judge_refusal", "rag_judge_language", "rag_judge_factual_multi")
STATISTICS_FILE = "_statistics.json"  # beside rag_sft's files: what the card shows
# The question configurations the snapshot chain can read: config name -> store name of its asset.
SNAPSHOT_INPUTS = {c.name: c.asset for c in published_configs.of_family("multihop")}


class RagSftConfig(dg.Config):
    """Run settings of the rag_sft family (every stage reads the ones it needs).

    The data's recipe is the card's: ``recipe`` names it and ``overrides`` changes some of its
    fields (``rag_sft/recipes.py`` lists them, e.g. ``{"twin_share": 0.3}``); the rest is the
    run's shape.
    """

    seed: int = DEFAULT_SEED
    max_questions: int = 0  # 0 = every question; a quick run sets e.g. 50 (the smallest ids)
    language: str = ""  # the data's language (refusal phrases, judges); default: the partition key's
    # None = the partition's product recipe, by its source and language (``recipes.default_recipe``).
    recipe: str | None = None
    overrides: dict[str, Any] = {}  # recipe fields changed for this run (recorded in the manifest)
    # Token counts (the token budget, the statistics): "embedded" (the embedded model's,
    # whitespace if absent), "whitespace", or a local tokenizer folder (tokenizer.json, or one
    # that transformers loads offline), e.g. the Luciole tokenizer for the card's lengths.
    tokenizer: str = "embedded"


def _language(config: RagSftConfig, partition: str) -> str:
    return config.language or snapshot_language(partition)


def product_name(lang: str, partition: str = "") -> str:
    """The published config a partition builds by default (``recipes.default_recipe``)."""
    return default_recipe(lang, partition)


def run_recipe(config: RagSftConfig, partition: str) -> RagSftRecipe:
    """The stage's resolved recipe; a bad name or override fails the run with the recipe's message."""
    try:
        return resolve_recipe(config.recipe, config.overrides, _language(config, partition), partition)
    except (KeyError, ValueError) as exc:
        raise dg.Failure(f"rag_sft recipe: {exc.args[0] if exc.args else exc}") from exc


def question_input(
    recipe: RagSftRecipe, overrides: Mapping[str, Any], input_store: str, inputs: Mapping[str, str] | None
) -> tuple[str, str, tuple[str, ...]]:
    """The questions a chain reads: ``(config name, store name, splits)``; no splits = every split.

    ``inputs`` (config name -> store name) are the configurations the chain can choose from (the
    snapshot chain's, chosen by the recipe's ``questions``/``questions_splits``); ``None`` is a
    chain with one input (the QA chain), which refuses an override of them.

    Raises:
        ValueError: an unknown questions config, or one given to a chain with a single input.
    """
    if inputs is None:
        if {"questions", "questions_splits"} & set(overrides):
            raise ValueError(
                "questions / questions_splits choose among a snapshot's question configurations; this "
                f"chain reads {input_store!r} only (choose its splits on qa/questions)"
            )
        return "", input_store, ()
    name, splits = recipe.questions, recipe.questions_splits
    if name not in inputs:
        raise ValueError(f"questions config {name!r} is not one of {sorted(inputs)}")
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise ValueError(f"questions_splits {unknown} are not splits ({', '.join(SPLITS)})")
    return name, inputs[name], tuple(splits)


def read_questions(
    store: ArtifactStore, partition: str, name: str, store_name: str, splits: tuple[str, ...]
) -> pa.Table:
    """The chosen questions: the given splits of the asset (all of them when none is given)."""
    if not store.files(partition, store_name):
        raise FileNotFoundError(
            f"partition {partition!r}: the questions config {name or store_name!r} (asset {store_name!r}) "
            "is not materialized: materialize it first, or choose another with the recipe override "
            "`questions` (e.g. `default`)"
        )
    table = store.read(partition, store_name)
    if splits and "split" in table.column_names:
        table = table.filter(pc.is_in(table["split"], value_set=pa.array(list(splits), pa.string())))
    return table


PROMPT_TASKS = examples.PROMPT_TASKS


def _sft_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            "twins_together", asset=key, blocking=True, description="Twins kept or dropped together."
        ),
        dg.AssetCheckSpec(
            "citations_verified",
            asset=key,
            blocking=True,
            description="Every row's citations pass the deterministic verifier (F1 = 1 for answerable rows).",
        ),
        dg.AssetCheckSpec(
            "layout_intact",
            asset=key,
            blocking=True,
            description="The system message parses back into exactly chunks_total OpenRAG blocks.",
        ),
    ]


def sft_checks(
    rows: list[dict],
    prompts: list[examples.RagPrompt],
    *,
    strict_quotes: bool = True,
    min_quote_words: int = citations.MIN_WORDS,
    require_f1: bool = True,
) -> list[dg.AssetCheckResult]:
    """The invariants of the final rows, as check results (computed in the materialization).

    ``require_f1=False`` (the multi-answer recipe) checks the tags only, no citation F1.
    """
    from ragsft_assets.rag_sft.layout import parse_documents

    pair_sizes: dict[str, int] = {}
    for p in prompts:
        pair_sizes[p.pair_id] = pair_sizes.get(p.pair_id, 0) + 1
    row_pairs: dict[str, int] = {}
    for r in rows:
        row_pairs[r["pair_id"]] = row_pairs.get(r["pair_id"], 0) + 1
    split_pairs = [pid for pid, n in row_pairs.items() if n != pair_sizes.get(pid)]
    failing, broken = [], []
    for r in rows:
        system, _, assistant = (m["content"] for m in r["messages"])
        docs = parse_documents(system)
        if len(docs) != r["chunks_total"]:
            broken.append(r["id"])
        rep = citations.check_response(
            assistant,
            [d for _, d in docs],
            [t for t, _ in docs],
            (r["supporting_facts_titles"] or None) if require_f1 else None,
            strict=strict_quotes,  # the check re-verifies with the settings the verdicts used
            min_words=min_quote_words,
        )
        if not rep.passes:
            failing.append(r["id"])
    return [
        check_result(
            check_name="twins_together",
            passed=not split_pairs,
            failures=len(split_pairs),
            metadata={
                "split_pairs": len(split_pairs),
                "examples": dg.MetadataValue.json(sorted(split_pairs)[:20]),
            },
        ),
        check_result(
            check_name="citations_verified",
            passed=not failing,
            failures=len(failing),
            metadata={"failing": len(failing), "examples": dg.MetadataValue.json(sorted(failing)[:20])},
        ),
        check_result(
            check_name="layout_intact",
            passed=not broken,
            failures=len(broken),
            metadata={"broken": len(broken), "examples": dg.MetadataValue.json(sorted(broken)[:20])},
        ),
    ]


def _write_stage(
    store: ArtifactStore,
    partition: str,
    stage: str,
    recipe: RagSftRecipe,
    table: pa.Table,
    decisions: Sequence[Decision],
    *,
    preview: Sequence[str],
    funnel: Mapping[str, int],
    funnel_key: str = "funnel",
) -> dict[str, Any]:
    """Write a stage's split files, its ledger rows and its recipe record; its common metadata."""
    paths = store.write_splits(table, partition, stage)
    store.write_ledger(ledger_table(partition, recipe.name, stage, list(decisions)), partition, stage)
    record = recipe_records.record(recipe)
    recipe_records.write_record(store.path(partition, stage).parent, record)
    files = [paths[s] for s in sorted(paths)]
    return {
        **table_metadata(files, table.schema, preview_columns=list(preview), split_column="split"),
        **funnel_metadata(dict(sorted(funnel.items())), key=funnel_key),
        "recipe": dg.MetadataValue.json(record),
    }


def _stage_inputs(
    context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
) -> tuple[str, RagSftRecipe, list[examples.RagPrompt]]:
    """What every stage after the prompts starts from: the partition, the recipe, the prompts."""
    partition = context.partition_key
    prompts = examples.prompts_from_table(store.read(partition, "rag_prompts"))
    return partition, run_recipe(config, partition), prompts


@dataclass(slots=True)
class StageOutput:
    """What an LLM stage's work gives its asset to write and show."""

    table: pa.Table
    decisions: list[Decision]
    funnel: Mapping[str, int]
    stats: BatchStats
    preview: list[str]
    metadata: dict[str, Any]
    funnel_key: str = "funnel"


def generate_stage(
    store: ArtifactStore,
    partition: str,
    recipe: RagSftRecipe,
    prompts: list[examples.RagPrompt],
    generator: ChatModel,
    seed: int,
    log: Any,
) -> StageOutput:
    """``rag_responses``: every prompt answered with the recipe's sampling; one decision per example."""
    params = SamplingParams(
        temperature=recipe.temperature,
        max_tokens=recipe.max_tokens,
        seed=seed,
        enable_thinking=recipe.generation_thinking,
    )
    table, stats = verdicts.generate_responses(prompts, generator, params, log=log)
    rows = table.to_pylist()
    decisions = [
        Decision(
            r["id"],
            KEPT if r["status"] == "ok" else verdicts.UNREADABLE,
            "generated" if r["status"] == "ok" else f"response_{r['status']}",
            {"error": r["error"]} if r["error"] else None,
            [r["cache_key"]] if r["cache_key"] else [],
        )
        for r in rows
    ]
    status_counts = Counter(r["status"] for r in rows)
    metadata = {"temperature": recipe.temperature, "seed": seed}
    return StageOutput(
        table, decisions, status_counts, stats, ["id", "status", "response"], metadata, "status"
    )


def judge_stage(
    store: ArtifactStore,
    partition: str,
    recipe: RagSftRecipe,
    prompts: list[examples.RagPrompt],
    judge: ChatModel,
    seed: int,
    log: Any,
) -> StageOutput:
    """``rag_verdicts``: the deterministic checks and the judges on every response (``seed`` unused:
    the judges sample at temperature 0)."""
    responses = store.read(partition, "rag_responses").to_pylist()
    run = verdicts.judge_examples(prompts, responses, judge, recipe=recipe, log=log)
    metadata = {
        "kept": sum(v.kept for v in run.verdicts),
        "quote_flags": dg.MetadataValue.json(verdicts.quote_flag_counts(run.verdicts)),
    }
    preview = ["id", "kind", "verdict", "reason", "f1", "factual_score", "refuses", "quote_flags"]
    return StageOutput(
        verdicts.verdicts_table(run.verdicts),
        verdicts.verdict_decisions(run.verdicts),
        run.funnel,
        run.stats,
        preview,
        metadata,
    )


def build_sft_chain(
    *,
    partitions_def: dg.PartitionsDefinition,
    input_key: dg.AssetKey,
    input_store: str,
    group: str,
    key_prefix: list[str] | None = None,
    inputs: Mapping[str, str] | None = None,
) -> list[dg.AssetsDefinition]:
    """The four SFT stages (prompts, responses, verdicts, sft) over one kind of input.

    Args:
        partitions_def: the partition set of the input (``snapshot`` or ``qa_source``).
        input_key: the asset key of the HotpotQA-layout questions the prompts read.
        input_store: the store name of that asset's Parquet files.
        group: the Dagster group of the four stages.
        key_prefix: the asset key prefix (``["qa"]`` for the QA chain; none for the snapshot chain).
        inputs: question configurations the prompts may read instead (config name -> store name,
            each an asset of the same partitions, declared as a dependency); see ``question_input``.
    """
    prefix = list(key_prefix or [])
    prompts_key, responses_key, verdicts_key, sft_key = (
        dg.AssetKey([*prefix, n]) for n in ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
    )

    def stage(name: str, deps: list, code_version: str, *, llm: bool = False, **extra: Any) -> Callable:
        """The decorator every stage shares: partitions, group, prefix; the GPU pool for LLM stages."""
        return dg.asset(
            name=name,
            partitions_def=partitions_def,
            group_name=group,
            key_prefix=prefix or None,
            deps=deps,
            code_version=code_version,
            kinds={"parquet"},
            **({"pool": "gpu", "retry_policy": LLM_RETRY_POLICY} if llm else {}),
            **extra,
        )

    # the question configurations the recipe may pick: read by rag_prompts and again by rag_sft
    input_deps = [
        input_key,
        *(dg.AssetKey(n) for n in sorted(set((inputs or {}).values())) if n != input_store),
    ]

    @stage(
        "rag_prompts",
        input_deps,
        stage_version("/".join([*prefix, "rag_prompts"]), PROMPT_TASKS, ("en", "fr")),
    )
    def rag_prompts(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG prompts: OpenRAG documents, instruction variants and unanswerable twins per question."""
        partition = context.partition_key
        lang = _language(config, partition)
        recipe = run_recipe(config, partition)
        name, source, splits = question_input(recipe, config.overrides, input_store, inputs)
        records, bad = records_from_table(read_questions(store, partition, name, source, splits))
        records.sort(key=lambda r: r.id)
        selected = records[: config.max_questions] if config.max_questions > 0 else records
        budget = recipe.document_token_budget
        over: list[Decision] = []
        if budget > 0:
            counter, tokenizer = statistics.token_counter(config.tokenizer)
            selected, over = examples.within_token_budget(selected, counter, budget)
            context.log.info(
                f"{partition}: {len(over)} question(s) dropped for documents over the {budget}-token"
                f" budget (tokens counted with {tokenizer})"
            )
        build = examples.build_prompts(
            selected, seed=config.seed, lang=lang, recipe=recipe, pool_records=records
        )
        decisions = (
            build.decisions
            + over
            + [Decision(rid, DROPPED, "bad_record", {"error": err}) for rid, err in bad]
        )
        build.funnel["bad_record"] = len(bad)
        build.funnel[f"dropped:{examples.OVER_TOKEN_BUDGET}"] = len(over)
        build.funnel["not_selected (max_questions)"] = len(records) - len(selected)
        table = examples.prompts_table(build.prompts)
        preview = ["id", "kind", "twin_kind", "citation_style", "refusal_rule", "chunks_total", "question"]
        return dg.MaterializeResult(
            metadata={
                **_write_stage(
                    store,
                    partition,
                    "rag_prompts",
                    recipe,
                    table,
                    decisions,
                    preview=preview,
                    funnel=build.funnel,
                ),
                "seed": config.seed,
                "language": lang,
                "questions": name or source,
                "questions_asset": source,
                "questions_splits": dg.MetadataValue.json(list(splits) or "all"),
                "document_token_budget": budget,
                "instructions_language": recipe.instructions_language,
                "prompt_versions": dg.MetadataValue.json(
                    examples.prompt_template_versions(recipe.instructions_language)
                ),
            }
        )

    def llm_stage(
        name: str, deps: list, code_version: str, role: str, description: str, work: Callable
    ) -> Any:
        """A stage that calls one model role: ``work`` turns the prompts into a :class:`StageOutput`."""

        @stage(
            name,
            deps,
            code_version,
            llm=True,
            required_resource_keys={"store", role},
            description=description,
        )
        def _llm_stage(context: dg.AssetExecutionContext, config: RagSftConfig) -> dg.MaterializeResult:
            store: ArtifactStore = context.resources.store
            partition, recipe, prompts = _stage_inputs(context, config, store)
            model: ChatModel = getattr(context.resources, role)
            t0 = time.perf_counter()
            out = work(store, partition, recipe, prompts, model, config.seed, context.log)
            out.stats.wall_s = out.stats.wall_s or time.perf_counter() - t0
            written = _write_stage(
                store,
                partition,
                name,
                recipe,
                out.table,
                out.decisions,
                preview=out.preview,
                funnel=out.funnel,
                funnel_key=out.funnel_key,
            )
            return dg.MaterializeResult(
                metadata={
                    **written,
                    **out.metadata,
                    **out.stats.to_metadata("llm"),
                    **model_metadata(model, role),
                }
            )

        return _llm_stage

    rag_responses = llm_stage(
        "rag_responses",
        [prompts_key],
        "2",
        "generator",
        "Generated targets: the generator answers under exactly the training prompt (no gold answer).",
        generate_stage,
    )
    rag_verdicts = llm_stage(
        "rag_verdicts",
        [responses_key, prompts_key],
        stage_version("/".join([*prefix, "rag_verdicts"]), JUDGE_TASKS, ("en", "fr")),
        "judge",
        "Verdicts: factual/refusal/language judges plus the deterministic citation checks; twins together.",
        judge_stage,
    )

    @stage(
        "rag_sft",
        [verdicts_key, responses_key, prompts_key, *input_deps],
        "6",
        check_specs=_sft_check_specs(sft_key),
    )
    def rag_sft(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG SFT chat rows with verified citations (system with documents, user question, assistant target)."""
        partition, recipe, prompts = _stage_inputs(context, config, store)
        lang = _language(config, partition)
        responses = {r["id"]: r["response"] for r in store.read(partition, "rag_responses").to_pylist()}
        kept = {r["id"] for r in store.read(partition, "rag_verdicts").to_pylist() if r["kept"]}
        fmt = formatting.format_examples(prompts, responses, kept, seed=config.seed, recipe=recipe)
        table = formatting.sft_table(fmt.rows)
        metadata = _write_stage(
            store,
            partition,
            "rag_sft",
            recipe,
            table,
            fmt.decisions,
            preview=["id", "pair_id", "chunks_total"],
            funnel=fmt.funnel,
        )
        counter, tokenizer = statistics.token_counter(config.tokenizer)
        # Type/level shares of the generated and the kept questions (the filter must not skew them).
        name, store_name, splits = question_input(recipe, config.overrides, input_store, inputs)
        source = (
            read_questions(store, partition, name, store_name, splits)
            .select(["id", "type", "level"])
            .to_pylist()
        )
        rows = table.to_pylist()
        stats = statistics.chain_statistics(
            rows,
            {q["id"]: (q["type"], q["level"]) for q in source},
            {p.id: p.question_id for p in prompts},
            counter,
            tokenizer,
            strict_phrases=examples.refusal_phrases(lang),
            prompts=prompts,
            recipe=recipe,
        )
        # The card's recipe sentence covers every stage's overrides, not only this one's.
        stats["recipe"] = chain_record(recipe_records.read_records(store.root / partition), stats["recipe"])
        atomic_write_bytes(
            store.path(partition, "rag_sft").parent / STATISTICS_FILE,
            orjson.dumps(stats, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2),
        )
        return dg.MaterializeResult(
            metadata={
                **metadata,
                "statistics": dg.MetadataValue.json(stats),
                "tokenizer": stats["tokenizer"],
                "seed": config.seed,
                "rewrite_refusals": recipe.rewrite_refusals,
                "drop_answer_only_in_ref": recipe.drop_answer_only_in_ref,
                "drop_wrong_language": recipe.drop_wrong_language,
            },
            check_results=sft_checks(
                rows,
                prompts,
                strict_quotes=recipe.strict_quotes_drop,
                min_quote_words=recipe.min_quote_words,
                require_f1=not recipe.multi_answer,
            ),
        )

    return [rag_prompts, rag_responses, rag_verdicts, rag_sft]


rag_prompts, rag_responses, rag_verdicts, rag_sft = build_sft_chain(
    partitions_def=snapshot_partitions,
    input_key=dg.AssetKey(INPUT_ASSET),
    input_store=INPUT_ASSET,
    group=GROUP,
    inputs=SNAPSHOT_INPUTS,
)
qa_rag_prompts, qa_rag_responses, qa_rag_verdicts, qa_rag_sft = build_sft_chain(
    partitions_def=qa_source_partitions,
    input_key=dg.AssetKey([QA_PREFIX, QA_INPUT_ASSET]),
    input_store=QA_INPUT_ASSET,
    group=QA_GROUP,
    key_prefix=[QA_PREFIX],
)
