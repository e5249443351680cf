"""The RAG SFT chain's steps (Dagster-free): what each stage computes from what it reads.

The wiring (``defs/rag_sft/assets.py``) reads, calls one step, writes and shows metadata; the
steps here choose the questions, build the prompts, run the generator and the judges, format the
rows and their statistics, and check the final rows' invariants. :data:`STEP_FIELDS` names the
recipe fields each stage reads, which its code version follows (``stage_versions``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.ledger import DROPPED, KEPT, Decision
from ragsft_assets.llm.types import BatchStats, ChatModel, SamplingParams
from ragsft_assets.rag_sft import citations, examples, formatting, statistics, verdicts
from ragsft_assets.rag_sft import recipes as sft_recipes
from ragsft_assets.rag_sft.hotpot_input import records_from_table
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.rag_sft.recipes import RagSftRecipe
from ragsft_assets.stage_versions import recipe_fields
from ragsft_assets.storage import SPLITS, atomic_write_bytes
from ragsft_assets.table_reader import TableReader

STATISTICS_FILE = "_statistics.json"  # beside rag_sft's files: what the card shows
PROMPT_TASKS = examples.PROMPT_TASKS
JUDGE_TASKS = ("rag_judge_factual", "rag_judge_refusal", "rag_judge_language", "rag_judge_factual_multi")

# The recipe fields each LLM-facing stage reads (``recipe.<field>`` in the step and the helpers it
# calls): its code version follows their values in every recipe of the family.
STEP_FIELDS: dict[str, tuple[str, ...]] = {
    "rag_prompts": (
        "questions",
        "questions_splits",
        "instructions_language",
        "twin_share",
        "twin_both_share",
        "references_share",
        "strict_share",
        "max_drop_fraction",
        "document_token_budget",
        "multi_answer",
    ),
    "rag_responses": ("temperature", "max_tokens", "generation_thinking"),
    "rag_verdicts": (
        "judges_thinking",
        "factual_rubric",
        "factual_judge_thinking",
        "factual_judge_max_tokens",
        "factual_judge_thinking_max_tokens",
        "judges_thinking_max_tokens",
        "citation_check",
        "min_quote_words",
        "language_judge_scope",
        "multi_answer",
    ),
}


def step_fields(stage: str) -> dict[str, Any]:
    """The values of the fields ``stage`` reads, in every recipe of the family (a stage serves each
    published config's partitions): what its code version follows."""
    return {
        name: recipe_fields(recipe, STEP_FIELDS[stage])
        for name, recipe in sorted(sft_recipes.RECIPES.items())
    }


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
    store: TableReader, partition: str, name: str, store_name: str, splits: tuple[str, ...]
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


@dataclass(slots=True)
class StageOutput:
    """What a stage's work gives its asset to write and show."""

    table: pa.Table
    decisions: list[Decision]
    funnel: Mapping[str, int]
    stats: BatchStats
    preview: list[str]
    metadata: dict[str, Any]
    funnel_key: str = "funnel"


@dataclass(slots=True)
class PromptsOutput:
    """``rag_prompts``' table, ledger rows, funnel and what its metadata shows."""

    table: pa.Table
    decisions: list[Decision]
    funnel: dict[str, int]
    metadata: dict[str, Any] = field(default_factory=dict)


PROMPTS_PREVIEW = ["id", "kind", "twin_kind", "citation_style", "refusal_rule", "chunks_total", "question"]


def prompts_step(
    store: TableReader,
    partition: str,
    recipe: RagSftRecipe,
    question: tuple[str, str, tuple[str, ...]],
    *,
    lang: str,
    seed: int,
    max_questions: int,
    tokenizer: str,
    info: Callable[[str], Any],
) -> PromptsOutput:
    """``rag_prompts``: OpenRAG documents, instruction variants and unanswerable twins per question
    (``question``: :func:`question_input`'s choice; ``info``: where the budget's drops are told)."""
    name, source, splits = question
    records, bad = records_from_table(read_questions(store, partition, name, source, splits))
    records.sort(key=lambda r: r.id)
    selected = records[:max_questions] if max_questions > 0 else records
    budget = recipe.document_token_budget
    over: list[Decision] = []
    if budget > 0:
        counter, tokenizer_name = statistics.token_counter(tokenizer)
        selected, over = examples.within_token_budget(selected, counter, budget)
        info(
            f"{partition}: {len(over)} question(s) dropped for documents over the {budget}-token"
            f" budget (tokens counted with {tokenizer_name})"
        )
    build = examples.build_prompts(selected, seed=seed, lang=lang, recipe=recipe, pool_records=records)
    decisions = (
        build.decisions + over + [Decision(rid, DROPPED, "bad_record", {"error": err}) for rid, err in bad]
    )
    build.funnel["bad_record"] = len(bad)
    build.funnel[f"dropped:{examples.OVER_TOKEN_BUDGET}"] = len(over)
    build.funnel["not_selected (max_questions)"] = len(records) - len(selected)
    metadata = {
        "seed": seed,
        "language": lang,
        "questions": name or source,
        "questions_asset": source,
        "questions_splits": list(splits) or "all",
        "document_token_budget": budget,
        "instructions_language": recipe.instructions_language,
        "prompt_versions": examples.prompt_template_versions(recipe.instructions_language),
    }
    return PromptsOutput(examples.prompts_table(build.prompts), decisions, build.funnel, metadata)


def generate_stage(
    store: TableReader,
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
    store: TableReader,
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
        "quote_flags": verdicts.quote_flag_counts(run.verdicts),
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


@dataclass(slots=True)
class SftOutput:
    """``rag_sft``'s chat rows (as a table and as dicts), ledger rows and funnel."""

    table: pa.Table
    rows: list[dict[str, Any]]
    decisions: list[Decision]
    funnel: Mapping[str, int]


def sft_step(
    store: TableReader, partition: str, recipe: RagSftRecipe, prompts: list[examples.RagPrompt], seed: int
) -> SftOutput:
    """``rag_sft``: the kept responses formatted as chat rows (the card's cleanup steps)."""
    responses = {r["id"]: r["response"] for r in store.read(partition, "rag_responses").to_pylist()}
    kept = {r["id"] for r in store.read(partition, "rag_verdicts").to_pylist() if r["kept"]}
    fmt = formatting.format_examples(prompts, responses, kept, seed=seed, recipe=recipe)
    table = formatting.sft_table(fmt.rows)
    return SftOutput(table, table.to_pylist(), fmt.decisions, fmt.funnel)


def sft_statistics(
    store: TableReader,
    partition: str,
    recipe: RagSftRecipe,
    prompts: list[examples.RagPrompt],
    rows: list[dict[str, Any]],
    question: tuple[str, str, tuple[str, ...]],
    *,
    lang: str,
    tokenizer: str,
    recipe_records: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The chain's statistics (what the card shows) over the final ``rows``.

    ``recipe_records``: every stage's recipe record, rag_sft's included (read once it is written):
    the card's recipe sentence covers every stage's overrides, not only this one's."""
    counter, tokenizer_name = statistics.token_counter(tokenizer)
    # Type/level shares of the generated and the kept questions (the filter must not skew them).
    name, store_name, splits = question
    source = (
        read_questions(store, partition, name, store_name, splits).select(["id", "type", "level"]).to_pylist()
    )
    stats = statistics.chain_statistics(
        rows,
        {q["id"]: (q["type"], q["level"]) for q in source},
        {p.id: p.question_id for p in prompts},
        counter,
        tokenizer_name,
        strict_phrases=examples.refusal_phrases(lang),
        prompts=prompts,
        recipe=recipe,
    )
    stats["recipe"] = sft_recipes.chain_record(recipe_records, stats["recipe"])
    return stats


def write_statistics(folder: Path, stats: Mapping[str, Any]) -> None:
    """The chain's statistics beside rag_sft's files (:data:`STATISTICS_FILE`, what the card reads)."""
    atomic_write_bytes(
        folder / STATISTICS_FILE, orjson.dumps(stats, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    )


@dataclass(frozen=True, slots=True)
class SftFailures:
    """The final rows' broken invariants: pairs split apart, rows failing the citation verifier,
    rows whose system message does not parse back into ``chunks_total`` blocks (ids, sorted)."""

    split_pairs: list[str]
    failing: list[str]
    broken: list[str]


def sft_failures(
    rows: list[dict],
    prompts: list[examples.RagPrompt],
    *,
    strict_quotes: bool = True,
    min_quote_words: int = citations.MIN_WORDS,
    require_f1: bool = True,
) -> SftFailures:
    """The invariants of the final rows. ``require_f1=False`` (the multi-answer recipe) checks the
    tags only, no citation F1."""
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
    return SftFailures(sorted(split_pairs), sorted(failing), sorted(broken))
