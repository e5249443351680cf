"""RAG SFT with verified citations: prompts, generated targets, verdicts, formatted chat rows.

One factory, :func:`build_sft_chain`, builds the four stages for each kind of input: the snapshot
chain (on a snapshot's ``multihop_questions``, today's keys) and the QA chain (on a ``qa_source``
partition's ``qa/questions``, keys under the ``qa/`` prefix). The Parquet artifacts keep the stage
names (``assets/<key>/rag_prompts/...``): keys are unique across partition sets.

What each stage does is the run's recipe (``rag_sft/recipes.py``: one per published config,
resolved once per stage from ``recipe`` and ``overrides``); each stage writes the resolved recipe
beside its files (``_recipe.json``) and into its metadata.

Each stage declares what it reads once (``reads``: its deps, and the only tables its reader
``declared_inputs`` allows), calls one step of ``rag_sft/steps.py`` (Dagster-free), writes and
shows metadata. The code versions derive from the templates and the recipe fields each step reads
(``steps.STEP_FIELDS``, ``stage_versions``).

No ``from __future__ import annotations`` here: Dagster resolves the config and resource
annotations at decoration time.
"""

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import dagster as dg
import pyarrow as pa

from ragsft_assets import published_configs
from ragsft_assets import recipes as recipe_records
from ragsft_assets.defs import streaming
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.check_results import check_result
from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions, snapshot_language, snapshot_partitions
from ragsft_assets.defs.rag_sft import stream as rag_stream
from ragsft_assets.defs.wiring import declared_inputs, reads
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import Decision, ledger_table
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.rag_sft import citations, examples, steps
from ragsft_assets.rag_sft.recipes import RagSftRecipe, default_recipe
from ragsft_assets.rag_sft.recipes import resolve as resolve_recipe
from ragsft_assets.rag_sft.steps import (  # noqa: F401 (re-exported: tests, the QA chain, the card)
    JUDGE_TASKS,
    PROMPT_TASKS,
    STATISTICS_FILE,
    StageOutput,
    generate_stage,
    judge_stage,
    question_input,
    read_questions,
)
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.stage_versions import stage_version

GROUP = "rag_sft"
QA_GROUP = "qa_sft"
QA_PREFIX = "qa"
INPUT_ASSET = "multihop_questions"
QA_INPUT_ASSET = "questions"  # store name of qa/questions
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
    # rag_responses' setting: each prompt streams in the background through its generator call
    # and, as soon as it answers, its verdict judging (rag_verdicts' own config), to fill the LLM
    # cache both stages then read (defs/rag_sft/stream.py); rag_verdicts waits for it. "auto" (both
    # roles have a cache on an HTTP fleet), "on" (both have a cache) or "off"
    stream: str = "off"
    # requests the stream keeps in flight; None: twice the generator's window ceiling times its URLs
    stream_in_flight: int | None = None


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
    """The invariants of the final rows (``steps.sft_failures``), as check results (computed in
    the materialization). ``require_f1=False`` (the multi-answer recipe) checks the tags only."""
    f = steps.sft_failures(
        rows, prompts, strict_quotes=strict_quotes, min_quote_words=min_quote_words, require_f1=require_f1
    )
    return [
        check_result(
            check_name=name,
            passed=not ids,
            failures=len(ids),
            metadata={label: len(ids), "examples": dg.MetadataValue.json(ids[:20])},
        )
        for name, label, ids in (
            ("twins_together", "split_pairs", f.split_pairs),
            ("citations_verified", "failing", f.failing),
            ("layout_intact", "broken", f.broken),
        )
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


def _json(metadata: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """``metadata`` with ``keys`` shown as JSON (a list, a dict or a word such as "all")."""
    return {k: dg.MetadataValue.json(v) if k in keys else v for k, v in metadata.items()}


def _run_selects(context: dg.AssetExecutionContext, key: dg.AssetKey) -> bool:
    """Whether this run materializes ``key`` (its selection, else every asset of its job)."""
    op_ctx = context.op_execution_context
    graph = op_ctx.job_def.asset_layer.asset_graph
    keys = op_ctx.dagster_run.asset_selection or graph.get_all_asset_keys()
    return key in keys and graph.has(key) and graph.get(key).is_materializable


def _start_stream(
    context: dg.AssetExecutionContext,
    config: RagSftConfig,
    reader: Any,
    recipe: RagSftRecipe,
    prompts: list[examples.RagPrompt],
    generator: ChatModel,
    verdicts_key: dg.AssetKey,
) -> dict[str, Any]:
    """``rag_responses``: start the stream of its generator calls and each example's judging
    (``config.stream``, ``defs/rag_sft/stream.py``) and wait for the generator calls, so that the
    stage's own batch then reads them from the cache; the metadata ({} when ``off``)."""
    partition, chain = context.partition_key, verdicts_key.to_user_string()
    judge: ChatModel = context.resources.judge
    why = (
        streaming.usable(generator, config.stream)
        or (None if _run_selects(context, verdicts_key) else f"{chain} not in this run")
        or streaming.usable(judge, config.stream)
        or rag_stream.one_language(prompts)
    )
    if why is None:  # the judging as rag_verdicts will run it: its own config and recipe
        verdicts_config = RagSftConfig(
            **streaming.op_config(context.run_config, "__".join(verdicts_key.path))
        )
        try:
            verdicts_recipe = run_recipe(verdicts_config, partition)
        except dg.Failure as exc:  # rag_verdicts fails with it; the responses need not
            why = f"{chain}: {exc.description}"
    if why is not None:
        context.log.info(f"stream: off ({why})")
        return {} if config.stream == "off" else {"stream/skipped": why}
    generate, judge_examples = rag_stream.stage_steps(
        partition,
        reader,
        (generate_stage, recipe, config.seed),
        (judge_stage, verdicts_recipe, verdicts_config.seed),
    )
    prefetch = rag_stream.Prefetch(
        prompts=prompts,
        generator=generator,
        judge=judge,
        generate=generate,
        judge_examples=judge_examples,
        log=context.log,
        limit=config.stream_in_flight or streaming.in_flight(generator),
        finished=streaming.run_finished(context),
    ).start()
    rag_stream.register(context.run_id, partition, chain, prefetch)
    context.log.info(
        f"stream: {len(prompts)} prompts through the generator and, as each answers, the verdict"
        f" judging, {prefetch.budget.limit} requests in flight at most; {chain} waits for it"
    )
    prefetch.wait_generated(log=context.log)
    return {
        "stream/prompts": len(prompts),
        "stream/in_flight": prefetch.budget.limit,
        "stream/generated_wall_s": round(prefetch.report.generated_wall_s, 3),
    }


def _join_stream(context: dg.AssetExecutionContext, verdicts_key: dg.AssetKey) -> dict[str, Any]:
    """``rag_verdicts``: wait for the stream ``rag_responses`` started in this run, if any, so that
    the stage's judges then read their calls from the cache; its metadata."""
    prefetch = rag_stream.take(context.run_id, context.partition_key, verdicts_key.to_user_string())
    if prefetch is None:
        return {}
    report = prefetch.join(log=context.log)
    context.log.info(
        f"stream: {report.prompts} prompts generated and {report.judged} examples judged in"
        f" {report.wall_s:.1f}s ({report.calls} calls); the judges now read their calls from the cache"
    )
    return report.metadata()


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
    prompts_key, responses_key, verdicts_key = (
        dg.AssetKey([*prefix, n]) for n in ("rag_prompts", "rag_responses", "rag_verdicts")
    )

    def version(name: str, tasks: Sequence[str] = ()) -> str:
        """Derived from the stage's templates (en, fr) and the recipe fields its step reads."""
        return stage_version("/".join([*prefix, name]), tasks, ("en", "fr"), partial(steps.step_fields, name))

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
    input_deps = reads(input_key, *(n for n in sorted(set((inputs or {}).values())) if n != input_store))

    def question(config: RagSftConfig, recipe: RagSftRecipe) -> tuple[str, str, tuple[str, ...]]:
        return question_input(recipe, config.overrides, input_store, inputs)

    @stage("rag_prompts", input_deps, version("rag_prompts", PROMPT_TASKS))
    def rag_prompts(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG prompts: OpenRAG documents, instruction variants and unanswerable twins per question."""
        partition = context.partition_key
        recipe = run_recipe(config, partition)
        out = steps.prompts_step(
            declared_inputs(context, store),
            partition,
            recipe,
            question(config, recipe),
            lang=_language(config, partition),
            seed=config.seed,
            max_questions=config.max_questions,
            tokenizer=config.tokenizer,
            info=context.log.info,
        )
        written = _write_stage(
            store,
            partition,
            "rag_prompts",
            recipe,
            out.table,
            out.decisions,
            preview=steps.PROMPTS_PREVIEW,
            funnel=out.funnel,
        )
        return dg.MaterializeResult(
            metadata={**written, **_json(out.metadata, "questions_splits", "prompt_versions")}
        )

    def llm_stage(
        name: str,
        deps: list,
        role: str,
        description: str,
        work: Callable,
        tasks=(),
        *,
        before: Callable[..., dict[str, Any]] | None = None,
        streams: tuple[str, ...] = (),
    ) -> Any:
        """A stage that calls one model role: ``work`` turns the prompts into a :class:`StageOutput`;
        ``before`` (the stream's start or join) runs first, its metadata shown; ``streams``: the
        other roles the stream it starts calls."""

        @stage(
            name,
            deps,
            version(name, tasks),
            llm=True,
            required_resource_keys={"store", role, *streams},
            description=description,
        )
        def _llm_stage(context: dg.AssetExecutionContext, config: RagSftConfig) -> dg.MaterializeResult:
            store: ArtifactStore = context.resources.store
            reader = declared_inputs(context, store)
            partition = context.partition_key
            recipe = run_recipe(config, partition)
            prompts = examples.prompts_from_table(reader.read(partition, "rag_prompts"))
            model: ChatModel = getattr(context.resources, role)
            t0 = time.perf_counter()
            streamed = before(context, config, reader, recipe, prompts, model) if before else {}
            out = work(reader, partition, recipe, prompts, model, config.seed, context.log)
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
                    **_json(out.metadata, "quote_flags"),
                    **out.stats.to_metadata("llm"),
                    **model_metadata(model, role),
                    **streamed,
                }
            )

        return _llm_stage

    rag_responses = llm_stage(
        "rag_responses",
        reads(prompts_key),
        "generator",
        "Generated targets: the generator answers under exactly the training prompt (no gold answer).",
        generate_stage,
        before=partial(_start_stream, verdicts_key=verdicts_key),
        streams=("judge",),
    )
    rag_verdicts = llm_stage(
        "rag_verdicts",
        reads(responses_key, prompts_key),
        "judge",
        "Verdicts: factual/refusal/language judges plus the deterministic citation checks; twins together.",
        judge_stage,
        JUDGE_TASKS,
        before=lambda context, *_: _join_stream(context, verdicts_key),
    )

    @stage(
        "rag_sft",
        reads(verdicts_key, responses_key, prompts_key, *input_deps),
        "6",
        check_specs=_sft_check_specs(dg.AssetKey([*prefix, "rag_sft"])),
    )
    def rag_sft(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG SFT chat rows with verified citations (system with documents, user question, assistant target)."""
        partition = context.partition_key
        recipe = run_recipe(config, partition)
        reader = declared_inputs(context, store)
        prompts = examples.prompts_from_table(reader.read(partition, "rag_prompts"))
        out = steps.sft_step(reader, partition, recipe, prompts, config.seed)
        written = _write_stage(
            store,
            partition,
            "rag_sft",
            recipe,
            out.table,
            out.decisions,
            preview=["id", "pair_id", "chunks_total"],
            funnel=out.funnel,
        )
        stats = steps.sft_statistics(
            reader,
            partition,
            recipe,
            prompts,
            out.rows,
            question(config, recipe),
            lang=_language(config, partition),
            tokenizer=config.tokenizer,
            recipe_records=recipe_records.read_records(store.root / partition),
        )
        steps.write_statistics(store.path(partition, "rag_sft").parent, stats)
        return dg.MaterializeResult(
            metadata={
                **written,
                "statistics": dg.MetadataValue.json(stats),
                "tokenizer": stats["tokenizer"],
                "seed": config.seed,
                "rewrite_refusals": recipe.rewrite_refusals,
                "drop_answer_only_in_ref": recipe.drop_answer_only_in_ref,
                "drop_wrong_language": recipe.drop_wrong_language,
            },
            check_results=sft_checks(
                out.rows,
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
