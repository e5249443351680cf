"""RAG SFT with verified citations: prompts, generated targets, verdicts, formatted chat rows.

One factory, :func:`build_sft_chain`, builds the four stages for each kind of input: the snapshot
chain (on a snapshot's ``multihop_questions``, today's keys) and the QA chain (on a ``qa_source``
partition's ``qa/questions``, keys under the ``qa/`` prefix). The Parquet artifacts keep the stage
names (``assets/<key>/rag_prompts/...``): keys are unique across partition sets.

No ``from __future__ import annotations`` here: Dagster resolves the config and resource
annotations at decoration time.
"""

import time
from collections.abc import Mapping

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions, snapshot_language, snapshot_partitions
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table
from ragsft_assets.llm.types import ChatModel, SamplingParams
from ragsft_assets.prompts import templates_version
from ragsft_assets.rag_sft import citations, examples, formatting, multi_answer, statistics, verdicts
from ragsft_assets.rag_sft.hotpot_input import records_from_table
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS

GROUP = "rag_sft"
QA_GROUP = "qa_sft"
QA_PREFIX = "qa"
INPUT_ASSET = "multihop_questions"
QA_INPUT_ASSET = "questions"  # store name of qa/questions
JUDGE_TASKS = ("rag_judge_factual", "rag_judge_refusal", "rag_judge_language", multi_answer.FACTUAL_TASK)
# The question configurations the snapshot chain can read: config name -> store name of its asset.
SNAPSHOT_INPUTS = {
    "default": INPUT_ASSET,
    "filtered": "multihop_filtered",
    "filtered_qwen": "multihop_filtered_qwen",
    "filtered_qwen_v2": "multihop_filtered_qwen_v2",
}
# A product's input when the run config leaves it out: (questions config, splits; () = all). The
# French card builds hotpotqa_fr_abstracts_v2 from filtered_qwen_v2's train split; hotpotqa_cite
# (the English snapshot chain) reads default, every split, as before.
PRODUCT_INPUTS = {"hotpotqa_fr_abstracts_v2": ("filtered_qwen_v2", ("train",))}


class RagSftConfig(dg.Config):
    """Run settings of the rag_sft family (every asset reads the ones it needs)."""

    seed: int = DEFAULT_SEED
    max_questions: int = 0  # 0 = every question; a quick run sets e.g. 50 (the smallest ids)
    # Snapshot chain only: the question configuration read (default | filtered | filtered_qwen |
    # filtered_qwen_v2) and its splits; "" / [] = the product's (filtered_qwen_v2, train for
    # hotpotqa_fr_abstracts_v2 as its card; default, every split, for hotpotqa_cite).
    questions: str = ""
    questions_splits: list[str] = []
    language: str = ""  # the data's language (refusal phrases, judges); default: the partition key's
    # The system instructions' language; "" = the product's (English for hotpotqa_fr_abstracts_v2,
    # as its card), else the data's.
    instructions_language: str = ""
    twin_share: float = 0.22
    # Of twins, the share losing both golds; -1 = the product's (1.0 for hotpotqa_fr_abstracts_v2
    # as its card, 0.6 for hotpotqa_cite).
    twin_both_share: float = -1.0
    references_share: float = 0.04
    strict_share: float = 0.05
    max_drop_fraction: float = 0.7
    temperature: float = 0.1
    max_tokens: int = 512
    rewrite_refusals: bool = False
    # Drop (with the twin) an answer whose gold answer appears only inside a <ref> tag; None = the
    # product's (on for hotpotqa_fr_abstracts_v2 as its card, off for hotpotqa_cite).
    drop_answer_only_in_ref: bool | None = None
    # Drop (with the twin) a response not in the data's language; None = the product's (on for
    # hotpotqa_fr_abstracts_v2 as its card, off for hotpotqa_cite).
    drop_wrong_language: bool | None = None
    # The citation verifier's strict quoting (partial_word, too_short); off only to compare with
    # data built without it.
    strict_quotes: bool = True
    min_quote_words: int = 3
    # Which non-English examples the language judge gates: "all" | "answerable"; "" = the
    # product's ("answerable" for hotpotqa_fr_abstracts_v2 as its card, "all" otherwise).
    language_judge_scope: str = ""
    # Questions whose documents exceed this many tokens are dropped (rag_prompts); 0 = no budget,
    # -1 = the product's (8,192 for hotpotqa_fr_abstracts_v2, as its card; none for hotpotqa_cite).
    max_document_tokens: int = -1
    tokenizer: str = "embedded"  # "embedded" (the embedded model's, whitespace if absent) | "whitespace"


def _language(config: RagSftConfig, partition: str) -> str:
    return config.language or snapshot_language(partition)


def _token_counter(config: RagSftConfig) -> tuple[statistics.TokenCounter, str]:
    """The config's tokenizer: whitespace words, or the embedded model's (whitespace if absent)."""
    if config.tokenizer == "whitespace":
        return statistics.whitespace_counter, "whitespace"
    return statistics.default_token_counter()


def product_name(lang: str, partition: str = "") -> str:
    """The seed dataset this reproduces: a ``trust_align.<lang>`` source is ``trust_align`` (the
    multi-answer recipe, ``rag_sft/multi_answer.py``); French input is ``hotpotqa_fr_abstracts_v2``."""
    if multi_answer.is_multi_answer(partition):
        return multi_answer.PRODUCT
    return "hotpotqa_fr_abstracts_v2" if lang == "fr" else "hotpotqa_cite"


def question_input(
    config: RagSftConfig, lang: str, input_store: str, inputs: Mapping[str, str] | None
) -> tuple[str, str, tuple[str, ...]]:
    """The questions a chain reads: ``(config name, store name, splits)``; no splits = every split.

    ``inputs`` (config name -> store name) are the configurations the chain can choose from (the
    snapshot chain's); ``None`` is a chain with one input (the QA chain), which refuses a choice.

    Raises:
        ValueError: an unknown questions config, or one given to a chain with a single input.
    """
    if inputs is None:
        if config.questions or config.questions_splits:
            raise ValueError(
                "questions / questions_splits choose among a snapshot's question configurations; this "
                f"chain reads {input_store!r} only (choose its splits on qa/questions)"
            )
        return "", input_store, ()
    name, splits = PRODUCT_INPUTS.get(product_name(lang), ("default", ()))
    name = config.questions or name
    if name not in inputs:
        raise ValueError(f"questions config {name!r} is not one of {sorted(inputs)}")
    if config.questions_splits:
        splits = tuple(config.questions_splits)
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
            "is not materialized: materialize it first, or choose another with the rag_prompts config "
            "`questions` (e.g. `default`)"
        )
    table = store.read(partition, store_name)
    if splits and "split" in table.column_names:
        table = table.filter(pc.is_in(table["split"], value_set=pa.array(list(splits), pa.string())))
    return table


PROMPT_TASKS = (
    "rag_system",
    "rag_rule_cite_inline",
    "rag_rule_cite_references",
    "rag_rule_refusal_generic",
    "rag_rule_refusal_strict",
)


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
        dg.AssetCheckResult(
            check_name="twins_together",
            passed=not split_pairs,
            metadata={
                "split_pairs": len(split_pairs),
                "examples": dg.MetadataValue.json(sorted(split_pairs)[:20]),
            },
        ),
        dg.AssetCheckResult(
            check_name="citations_verified",
            passed=not failing,
            metadata={"failing": len(failing), "examples": dg.MetadataValue.json(sorted(failing)[:20])},
        ),
        dg.AssetCheckResult(
            check_name="layout_intact",
            passed=not broken,
            metadata={"broken": len(broken), "examples": dg.MetadataValue.json(sorted(broken)[:20])},
        ),
    ]


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
    key_prefix = prefix or None

    @dg.asset(
        partitions_def=partitions_def,
        group_name=group,
        key_prefix=key_prefix,
        deps=[input_key, *(dg.AssetKey(n) for n in sorted(set((inputs or {}).values())) if n != input_store)],
        code_version=f"5-{templates_version(PROMPT_TASKS)}",
        kinds={"parquet"},
    )
    def rag_prompts(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG prompts: OpenRAG documents, instruction variants and unanswerable twins per question."""
        partition = context.partition_key
        lang = _language(config, partition)
        name, source, splits = question_input(config, lang, input_store, inputs)
        records, bad = records_from_table(read_questions(store, partition, name, source, splits))
        records.sort(key=lambda r: r.id)
        selected = records[: config.max_questions] if config.max_questions > 0 else records
        budget = examples.document_token_budget(config.max_document_tokens, product_name(lang, partition))
        over: list[Decision] = []
        if budget > 0:
            counter, tokenizer = _token_counter(config)
            selected, over = examples.within_token_budget(selected, counter, budget)
            context.log.info(f"{partition}: {len(over)} question(s) over {budget} {tokenizer} tokens dropped")
        shares = examples.PromptShares(
            config.twin_share,
            examples.twin_both_share(config.twin_both_share, product_name(lang, partition)),
            config.references_share,
            config.strict_share,
            config.max_drop_fraction,
        )
        multi = multi_answer.is_multi_answer(partition)
        if multi:  # trust_align's card: no twins, inline citations only, the strict rule on ~4%
            shares = examples.PromptShares(0.0, 0.0, 0.0, multi_answer.STRICT_SHARE, config.max_drop_fraction)
        ilang = examples.instructions_language(
            config.instructions_language, lang, product_name(lang, partition)
        )
        build = examples.build_prompts(
            selected,
            seed=config.seed,
            lang=lang,
            shares=shares,
            pool_records=records,
            instructions_lang=ilang,
            multi_answer=multi,
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
        paths = store.write_splits(table, partition, "rag_prompts")
        store.write_ledger(
            ledger_table(partition, product_name(lang, partition), "rag_prompts", decisions),
            partition,
            "rag_prompts",
        )
        files = [paths[s] for s in sorted(paths)]
        return dg.MaterializeResult(
            metadata={
                **table_metadata(
                    files,
                    table.schema,
                    preview_columns=[
                        "id",
                        "kind",
                        "twin_kind",
                        "citation_style",
                        "refusal_rule",
                        "chunks_total",
                        "question",
                    ],
                    split_column="split",
                ),
                **funnel_metadata(dict(sorted(build.funnel.items()))),
                "seed": config.seed,
                "language": lang,
                "questions": name or source,
                "questions_asset": source,
                "questions_splits": dg.MetadataValue.json(list(splits) or "all"),
                "document_token_budget": budget,
                "shares": dg.MetadataValue.json(
                    {
                        "twin": shares.twin,
                        "twin_both": shares.twin_both,
                        "references": shares.references,
                        "strict": shares.strict,
                        "max_drop_fraction": shares.max_drop_fraction,
                    }
                ),
                "instructions_language": ilang,
                "prompt_versions": dg.MetadataValue.json(examples.prompt_template_versions(ilang)),
            }
        )

    @dg.asset(
        partitions_def=partitions_def,
        group_name=group,
        key_prefix=key_prefix,
        deps=[prompts_key],
        pool="gpu",
        retry_policy=LLM_RETRY_POLICY,
        code_version="1",
        kinds={"parquet"},
    )
    def rag_responses(
        context: dg.AssetExecutionContext,
        config: RagSftConfig,
        store: ArtifactStore,
        generator: dg.ResourceParam[ChatModel],
    ) -> dg.MaterializeResult:
        """Generated targets: the generator answers under exactly the training prompt (no gold answer)."""
        partition = context.partition_key
        lang = _language(config, partition)
        prompts = examples.prompts_from_table(store.read(partition, "rag_prompts"))
        params = SamplingParams(
            temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed
        )
        t0 = time.perf_counter()
        table, stats = verdicts.generate_responses(prompts, generator, params, log=context.log)
        stats.wall_s = stats.wall_s or time.perf_counter() - t0
        paths = store.write_splits(table, partition, "rag_responses")
        decisions = [
            Decision(
                r["id"],
                KEPT if r["status"] == "ok" else verdicts.UNREADABLE,
                "generated" if r["status"] == "ok" else f"response_{r['status']}",
                {"error": r["error"]} if r["error"] else None,
                [r["cache_key"]] if r["cache_key"] else [],
            )
            for r in table.to_pylist()
        ]
        store.write_ledger(
            ledger_table(partition, product_name(lang, partition), "rag_responses", decisions),
            partition,
            "rag_responses",
        )
        files = [paths[s] for s in sorted(paths)]
        status_counts: dict[str, int] = {}
        for s in table.column("status").to_pylist():
            status_counts[s] = status_counts.get(s, 0) + 1
        return dg.MaterializeResult(
            metadata={
                **table_metadata(
                    files, table.schema, preview_columns=["id", "status", "response"], split_column="split"
                ),
                **funnel_metadata(dict(sorted(status_counts.items())), key="status"),
                **stats.to_metadata("llm"),
                **model_metadata(generator, "generator"),
                "temperature": config.temperature,
                "seed": config.seed,
            }
        )

    @dg.asset(
        partitions_def=partitions_def,
        group_name=group,
        key_prefix=key_prefix,
        deps=[responses_key],
        pool="gpu",
        retry_policy=LLM_RETRY_POLICY,
        code_version=f"3-{templates_version(JUDGE_TASKS)}",
        kinds={"parquet"},
    )
    def rag_verdicts(
        context: dg.AssetExecutionContext,
        config: RagSftConfig,
        store: ArtifactStore,
        judge: dg.ResourceParam[ChatModel],
    ) -> dg.MaterializeResult:
        """Verdicts: factual/refusal/language judges plus the deterministic citation checks; twins together."""
        partition = context.partition_key
        lang = _language(config, partition)
        prompts = examples.prompts_from_table(store.read(partition, "rag_prompts"))
        responses = store.read(partition, "rag_responses").to_pylist()
        t0 = time.perf_counter()
        run = verdicts.judge_examples(
            prompts,
            responses,
            judge,
            log=context.log,
            strict_quotes=config.strict_quotes,
            min_quote_words=config.min_quote_words,
            language_scope=verdicts.language_judge_scope(
                config.language_judge_scope, product_name(lang, partition)
            ),
            multi_answer=multi_answer.is_multi_answer(partition),
        )
        run.stats.wall_s = run.stats.wall_s or time.perf_counter() - t0
        table = verdicts.verdicts_table(run.verdicts)
        paths = store.write_splits(table, partition, "rag_verdicts")
        ledger = ledger_table(
            partition, product_name(lang, partition), "rag_verdicts", verdicts.verdict_decisions(run.verdicts)
        )
        store.write_ledger(ledger, partition, "rag_verdicts")
        files = [paths[s] for s in sorted(paths)]
        return dg.MaterializeResult(
            metadata={
                **table_metadata(
                    files,
                    table.schema,
                    preview_columns=["id", "kind", "verdict", "reason", "f1", "factual_score", "refuses"],
                    split_column="split",
                ),
                **funnel_metadata(dict(sorted(run.funnel.items()))),
                "kept": sum(v.kept for v in run.verdicts),
                **run.stats.to_metadata("llm"),
                **model_metadata(judge, "judge"),
            }
        )

    @dg.asset(
        partitions_def=partitions_def,
        group_name=group,
        key_prefix=key_prefix,
        deps=[verdicts_key],
        code_version="5",
        kinds={"parquet"},
        check_specs=_sft_check_specs(sft_key),
    )
    def rag_sft(
        context: dg.AssetExecutionContext, config: RagSftConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        """RAG SFT chat rows with verified citations (system with documents, user question, assistant target)."""
        partition = context.partition_key
        lang = _language(config, partition)
        prompts = examples.prompts_from_table(store.read(partition, "rag_prompts"))
        responses = {r["id"]: r["response"] for r in store.read(partition, "rag_responses").to_pylist()}
        kept = {r["id"] for r in store.read(partition, "rag_verdicts").to_pylist() if r["kept"]}
        only_in_ref = config.drop_answer_only_in_ref
        if only_in_ref is None:
            only_in_ref = formatting.PRODUCT_DROP_ANSWER_ONLY_IN_REF.get(product_name(lang, partition), False)
        wrong_lang = config.drop_wrong_language
        if wrong_lang is None:
            wrong_lang = formatting.PRODUCT_DROP_WRONG_LANGUAGE.get(product_name(lang, partition), False)
        fmt = formatting.format_examples(
            prompts,
            responses,
            kept,
            seed=config.seed,
            rewrite_refusals=config.rewrite_refusals,
            drop_answer_only_in_ref=only_in_ref,
            drop_wrong_language=wrong_lang,
            multi_answer=multi_answer.is_multi_answer(partition),
        )
        table = formatting.sft_table(fmt.rows)
        paths = store.write_splits(table, partition, "rag_sft")
        store.write_ledger(
            ledger_table(partition, product_name(lang, partition), "rag_sft", fmt.decisions),
            partition,
            "rag_sft",
        )
        files = [paths[s] for s in sorted(paths)]
        counter, name = _token_counter(config)
        # Type/level shares of the generated and the kept questions (the filter must not skew them).
        name, store_name, splits = question_input(config, lang, input_store, inputs)
        source = (
            read_questions(store, partition, name, store_name, splits)
            .select(["id", "type", "level"])
            .to_pylist()
        )
        stats = statistics.chain_statistics(
            table.to_pylist(),
            {q["id"]: (q["type"], q["level"]) for q in source},
            {p.id: p.question_id for p in prompts},
            counter,
            name,
            strict_phrases=examples.refusal_phrases(lang),
        )
        return dg.MaterializeResult(
            metadata={
                **table_metadata(
                    files,
                    table.schema,
                    preview_columns=["id", "pair_id", "chunks_total"],
                    split_column="split",
                ),
                **funnel_metadata(dict(sorted(fmt.funnel.items()))),
                "statistics": dg.MetadataValue.json(stats),
                "tokenizer": stats["tokenizer"],
                "seed": config.seed,
                "rewrite_refusals": config.rewrite_refusals,
                "drop_answer_only_in_ref": only_in_ref,
                "drop_wrong_language": wrong_lang,
            },
            check_results=sft_checks(
                table.to_pylist(),
                prompts,
                strict_quotes=config.strict_quotes,
                min_quote_words=config.min_quote_words,
                require_f1=not multi_answer.is_multi_answer(partition),
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
