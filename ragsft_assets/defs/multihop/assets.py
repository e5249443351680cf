"""Multihop assets: drafts -> checks -> distractors -> ablation verdicts -> questions -> audit.

No ``from __future__ import annotations``: Dagster resolves config and resource types at
decoration time. Thin wiring: each asset reads its inputs through the ``store``, calls the logic of
``ragsft_assets.multihop``, writes Parquet and ledger rows, and returns metadata.
"""

import dataclasses
import os
import time
from collections import Counter
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets import recipes
from ragsft_assets.defs import streaming as shared_streams
from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.multihop import stream as streaming
from ragsft_assets.defs.multihop.checks import invariant_check_results, invariant_check_specs
from ragsft_assets.defs.multihop.common import (
    RecipeConfig,
    docs,
    language,
    multihop_asset,
    recipe_metadata,
    role_model,
    stage_version,
    write_ledger,
)
from ragsft_assets.ids import DEFAULT_SEED, item_uniform
from ragsft_assets.ledger import Decision
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import (
    ablations,
    audit,
    caps,
    config_recipes,
    distractors,
    generation,
    hotpot_format,
)
from ragsft_assets.multihop import question_checks as checks_logic
from ragsft_assets.multihop.funnel import OVER_LIMIT, build_funnel
from ragsft_assets.multihop.recipes import MultihopRecipe
from ragsft_assets.prompts import PromptTemplate, load_prompt
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.worker_pools import run_apart

# ours: the niceness added to the distractor search's worker while a stream runs: the system runs
# the stream's client first when both want a core
SEARCH_NICE = 10


class MultihopConfig(RecipeConfig):
    """Run shape of the multihop assets (same defaults everywhere); the card's values are the recipe's
    (``default`` unless ``recipe`` names another; ``overrides`` changes fields of it)."""

    seed: int = DEFAULT_SEED
    # the first N pairs of bridge_pairs' seeded bridge-first order; None: every pair bridge_pairs
    # drew (its draw is the recipe's ``pairs_drawn``, the card's 200,000, or a snapshot.json's
    # ``max_pairs``: the sample's quick demo). A quick run sets N here, never as a default
    max_pairs: int | None = None
    max_judged: int | None = None  # per-stage limit on questions sent to the judge; None: no limit
    # search processes for distractors (forkserver, never fork); None: min(2, CPUs this process may
    # use; one fewer while a stream runs, and then in a niced process apart), the pool `ragsft bench
    # distractors` times; the hits are the same for any value
    distractors_workers: int | None = None
    language: str | None = None  # prompt language; None: the partition key's (20240916.fr -> fr)
    # question_drafts streams each pair in the background through its draft, its checks, the
    # ablation cascade and the judges after it, in small batches of ready items, to fill the LLM cache the
    # stages then read (defs/multihop/stream.py); ablation_verdicts waits for it (its own setting
    # streams the cascade and judges alone when the drafts did not). "auto" (the roles that have a
    # cache on an HTTP fleet), "on" (any cached role) or "off"
    stream: str = "off"
    # requests the stream keeps in flight; None: twice the generator's window ceiling
    # (max_concurrency) times its URLs
    stream_in_flight: int | None = None


Context, Model, Result = dg.AssetExecutionContext, dg.ResourceParam[ChatModel], dg.MaterializeResult


def llm_asset(*tasks: str, deps: list[str]) -> Any:
    """An LLM stage of the production: its code version follows its prompt ``tasks``' templates and
    its recipe (``common.stage_version``), it runs in the GPU pool with the LLM retry policy."""

    def wrap(fn: Any) -> dg.AssetsDefinition:
        version = stage_version(fn.__name__, tasks)
        return multihop_asset(code_version=version, deps=deps, llm=True, retry=True)(fn)

    return wrap


def _llm_metadata(model: ChatModel, stats: Any, prefix: str, template: Any) -> dict[str, Any]:
    md: dict[str, Any] = dict(stats.to_metadata(prefix))
    md.update(model_metadata(model, prefix))
    md[f"{prefix}/prompt"] = f"{template.name}@{template.version}"
    return md


@llm_asset("multihop_question", deps=["bridge_pairs", "abstracts"])
def question_drafts(
    context: Context,
    config: MultihopConfig,
    store: ArtifactStore,
    generator: Model,
    judge: Model,
    annotator: Model,
) -> Result:
    """Bridge-question drafts written by the generator, several per (source a, bridge b) pair, for
    every pair bridge_pairs drew (at most the recipe's ``pairs_drawn``; ``max_pairs`` takes the
    first N of its seeded bridge-first order, no new draw)."""
    partition = context.partition_key
    started = time.monotonic()
    recipe = config.resolved("question_drafts")
    by_id = docs(store, partition)
    pairs_table = store.read(partition, "bridge_pairs")
    limit = config.max_pairs if config.max_pairs is not None else recipe.pairs_drawn
    pairs, missing = generation.first_pairs(pairs_table, by_id, limit)
    template = load_prompt("multihop_question", language(partition, config.language))
    params = dataclasses.replace(
        generation.GENERATION_PARAMS, seed=config.seed, temperature=recipe.generation_temperature
    )
    step = streaming.DraftStep(
        pairs,
        by_id,
        generator,
        template,
        recipe.drafts_per_pair,
        params,
        recipe.answer_max_words,
        recipe.answer_max_chars,
    )
    prefetch = _start_prefetch(context, config, store, step, {"judge": judge, "annotator": annotator})
    if prefetch is not None:
        prefetch.wait_drafts()  # the drafts below then come from the cache
    table, stats = step.run(pairs, generator, context.log)
    streamed: dict[str, Any] = {}
    if prefetch is not None:
        if prefetch.cascade is None:  # nothing after the drafts streams: done with it here
            prefetch.join()
        streamed = {
            "stream/pairs": len(pairs),
            "stream/in_flight": prefetch.budget.limit,
            "stream/drafts_wall_s": round(prefetch.report.drafts_wall_s, 3),
        }
    path = store.write(table, partition, "question_drafts")
    rows = table.select(["id", "status", "error", "cache_key"]).to_pylist()
    reason = {"ok": "drafted", "unreadable": "generation_unreadable", "missing": "generation_missing"}
    verdict = {"ok": "kept", "unreadable": "unreadable", "missing": "dropped"}
    decisions = [
        Decision(
            r["id"],
            verdict[r["status"]],
            reason[r["status"]],
            {"error": r["error"]} if r["error"] else None,
            [r["cache_key"]] if r["cache_key"] else [],
        )
        for r in rows
    ]
    write_ledger(store, partition, "question_drafts", decisions)
    status_counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "unreadable", "missing")}
    md = table_metadata([path], table.schema, preview_columns=["id", "question", "answer", "status"])
    md.update(
        {
            "seed": config.seed,
            "pairs_available": pairs_table.num_rows,
            "pairs_missing_documents": missing,
            "pairs_drawn": len(pairs),
            "pairs_limit": limit,
            "drafts_by_status": dg.MetadataValue.json(status_counts),
            "wall_s": round(time.monotonic() - started, 3),
            **streamed,
            **_llm_metadata(generator, stats, "generator", template),
            **recipe_metadata(store, partition, "question_drafts", recipe),
        }
    )
    return dg.MaterializeResult(metadata=md)


@multihop_asset(code_version="2", deps=["question_drafts", "abstracts"])
def question_checks(context: Context, config: MultihopConfig, store: ArtifactStore) -> Result:
    """Deterministic checks of each readable draft: kept, or dropped with a counted reason."""
    partition = context.partition_key
    recipe = config.resolved("question_checks")
    table = checks_logic.run_checks(
        store.read(partition, "question_drafts"),
        docs(store, partition),
        recipe.answer_max_words,
        recipe.answer_max_chars,
    )
    path = store.write(table, partition, "question_checks")
    decisions = [
        Decision(r["id"], r["verdict"], r["reason"], {"reasons": r["reasons"]} if r["reasons"] else None)
        for r in table.to_pylist()
    ]
    write_ledger(store, partition, "question_checks", decisions)
    kept = sum(1 for v in table["verdict"].to_pylist() if v == "kept")
    md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "reason"])
    md.update(
        {
            "checked": table.num_rows,
            "kept": kept,
            **funnel_metadata(checks_logic.reason_counts(table), "rejections"),
            **recipe_metadata(store, partition, "question_checks", recipe),
        }
    )
    return dg.MaterializeResult(metadata=md)


@multihop_asset(
    name="distractors", code_version="2", deps=["question_checks", "question_drafts", "abstracts"]
)
def distractors_asset(context: Context, config: MultihopConfig, store: ArtifactStore) -> Result:
    """The 8 best same-split documents per question (no gold, no answer-bearing document), then the
    near-duplicate removal and the caps (2 per bridge, 3 per source) before the judge: the questions
    this keeps are the ones the judge sees."""
    partition = context.partition_key
    started = time.monotonic()
    recipe = config.resolved("distractors")
    kept = {
        r["id"]
        for r in store.read(partition, "question_checks").select(["id", "verdict"]).to_pylist()
        if r["verdict"] == "kept"
    }
    drafts = [d for d in store.read(partition, "question_drafts").to_pylist() if d["id"] in kept]
    queries = [
        distractors.Query(d["id"], d["split"], d["question"], d["answer"], d["a_id"], d["b_id"])
        for d in drafts
    ]
    # while the stream runs, the search leaves a core to its client: on 2 cores, two search
    # processes starved it and the fleet emptied for the search's length. It also runs apart, in
    # a niced worker: in this process its Python code held the GIL the stream's client needs
    # (bench fleet, 5,000 pairs over: the fleet fell to 0.2-0.6 busy during the search)
    beside_stream = streaming.running(context.run_id, partition)
    cores = len(os.sched_getaffinity(0)) - (1 if beside_stream else 0)
    workers = config.distractors_workers or max(1, min(2, cores))
    search = (queries, docs(store, partition), recipe.retrieval, recipe.distractors_k)
    if beside_stream:
        found = run_apart(distractors.select_distractors, *search, workers=workers, nice=SEARCH_NICE)
    else:
        found = distractors.select_distractors(*search, workers=workers)
    ready = {r["id"] for r in found.select(["id", "verdict"]).to_pylist() if r["verdict"] == "kept"}
    capped = caps.apply_caps(
        [
            caps.CapCandidate(d["id"], d["question"], d["answer"], d["a_id"], d["b_id"])
            for d in drafts
            if d["id"] in ready
        ],
        config.seed,
        recipe.max_per_bridge,
        recipe.max_per_source,
        recipe.near_dup_jaccard,
    )
    table = distractors.mark_dropped(found, {q: r for q, r in capped.items() if r != "kept"})
    path = store.write(table, partition, "distractors")
    decisions = [
        Decision(r["id"], r["verdict"], r["reason"])
        for r in table.select(["id", "verdict", "reason"]).to_pylist()
    ]
    write_ledger(store, partition, "distractors", decisions)
    reasons = table["reason"].to_pylist()
    md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "distractor_ids"])
    md.update(
        {
            "method": recipe.retrieval,
            "k": recipe.distractors_k,
            "queries": len(queries),
            "workers": workers,
            "search_apart": beside_stream,
            distractors.TOO_FEW: reasons.count(distractors.TOO_FEW),
            **{reason: reasons.count(reason) for reason in caps.CAP_REASONS},
            "to_judge": sum(v == "kept" for v in table["verdict"].to_pylist()),
            "wall_s": round(time.monotonic() - started, 3),
            **recipe_metadata(store, partition, "distractors", recipe),
        }
    )
    return dg.MaterializeResult(metadata=md)


def _run_assets(context: Context) -> set[str]:
    """The assets this run materializes (its selection, else every asset of its job)."""
    op_ctx = context.op_execution_context
    graph = op_ctx.job_def.asset_layer.asset_graph
    keys = op_ctx.dagster_run.asset_selection or graph.get_all_asset_keys()
    return {k.path[-1] for k in keys if graph.has(k) and graph.get(k).is_materializable}


def _cascade(template: PromptTemplate, order: tuple[str, ...], lang: str, recipe: MultihopRecipe) -> Any:
    """The ablation cascade as ``ablation_verdicts`` runs it, for the stream: (items, model, log)."""

    def cascade(items: Any, model: Any, log: Any) -> ablations.CascadeResult:
        return ablations.run_cascade(
            items,
            model,
            template,
            order,
            lang,
            ablations.JUDGE_PARAMS,
            strict_impossible=recipe.strict_impossible,
            log=log,
        )

    return cascade


def _prefetch(
    context: Context,
    config: MultihopConfig,
    store: ArtifactStore,
    drafts: streaming.DraftStep | None,
    models: dict[str, ChatModel],
) -> streaming.Prefetch | str:
    """The stream of this run's ``ablation_verdicts`` cascade and judges (``drafts``: from the
    drafts on), not started; or why nothing streams."""
    partition = context.partition_key
    first = drafts.model if drafts is not None else models["judge"]
    why = streaming.usable(first, config.stream)
    if why is not None:
        return why
    selected = _run_assets(context)
    ab_config = MultihopConfig(**streaming.op_config(context.run_config, "ablation_verdicts"))
    cascade, judges, skipped, cap = None, [], {}, None
    between = {"question_checks", "distractors"} if drafts is not None else set()
    why_not = (
        "ablation_verdicts not in this run"
        if "ablation_verdicts" not in selected
        else f"{', '.join(sorted(between - selected))} not in this run"
        if between - selected
        else "max_judged set (a budget over all questions)"
        if ab_config.max_judged is not None
        else streaming.usable(models["judge"], config.stream)
    )
    if why_not is None:
        recipe = ab_config.resolved("ablation_verdicts")
        lang = language(partition, ab_config.language)
        template = load_prompt(ablations.PROMPT_TASK, lang)
        cascade = _cascade(template, ablations.validate_order(recipe.cascade_order), lang, recipe)
        if drafts is not None:  # the caps distractors applies: its seed and its recipe's limits
            d_config = MultihopConfig(**streaming.op_config(context.run_config, "distractors"))
            d_recipe = d_config.resolved("distractors")
            cap = streaming.CapsStep(
                d_config.seed, d_recipe.max_per_bridge, d_recipe.max_per_source, d_recipe.near_dup_jaccard
            )
        judges, skipped = streaming.stream_stages(
            selected,
            context.run_config,
            config.stream,
            lambda st, role: role_model(st.name, role, **models),
            lambda st: load_prompt(st.task, language(partition)),
        )
    else:
        skipped = {"ablation_verdicts": why_not}
    if drafts is None and cascade is None:
        return why_not or "nothing to stream"
    prefetch = streaming.Prefetch(
        drafts=drafts,
        cascade=cascade,
        cap=cap,
        judge=models["judge"] if cascade else None,
        stages=judges,
        abstracts=store.read(partition, "abstracts"),
        partition=partition,
        log=context.log,
        limit=config.stream_in_flight or streaming.in_flight(first),
        finished=shared_streams.run_finished(context),
    )
    prefetch.report.skipped.update(skipped)
    return prefetch


def _start_prefetch(
    context: Context,
    config: MultihopConfig,
    store: ArtifactStore,
    drafts: streaming.DraftStep,
    models: dict[str, ChatModel],
) -> streaming.Prefetch | None:
    """Start this run's stream from the drafts (``question_drafts``), or None when nothing streams;
    ``ablation_verdicts`` finds it (:func:`_join_prefetch`)."""
    prefetch = _prefetch(context, config, store, drafts, models)
    if isinstance(prefetch, str):
        context.log.info(f"stream: off ({prefetch})")
        return None
    prefetch.start()
    if prefetch.cascade is not None:
        streaming.register(context.run_id, context.partition_key, prefetch)
    context.log.info(
        f"stream: {len(drafts.pairs)} pairs drafted, checked and sent on through the cascade and"
        f" {len(prefetch.stages)} judge(s) in small batches of ready questions, {prefetch.budget.limit} requests"
        " in flight at most; ablation_verdicts waits for it"
    )
    return prefetch


def _join_prefetch(
    context: Context,
    config: MultihopConfig,
    store: ArtifactStore,
    items: list[ablations.JudgeItem],
    models: dict[str, ChatModel],
) -> dict[str, Any]:
    """Wait for the stream ``question_drafts`` started (judging only ``items`` from now on), or
    stream ``items`` now through the cascade and judges; its metadata."""
    partition = context.partition_key
    prefetch = streaming.take(context.run_id, partition)
    if prefetch is None:
        built = _prefetch(context, config, store, None, models) if items else "no question to judge"
        if isinstance(built, str):
            return {"stream/skipped": built}
        prefetch = built.start(items, store.read(partition, "question_drafts"))
    prefetch.restrict({it.id for it in items})
    report = prefetch.join(log=context.log)
    # why the questions the stream sent on were not judged after all (the distractor search's
    # drops; the caps' never, as the stream applies them)
    table = store.read(partition, "distractors").select(["id", "reason"]).to_pylist()
    why = Counter(r["reason"] for r in table if r["id"] in report.speculative_ids)
    context.log.info(
        f"stream: {report.pairs} pairs and {report.questions} questions through the cascade and"
        f" {len(report.stages)} judge(s) in {report.wall_s:.1f}s ({report.calls} calls,"
        f" {report.speculative_calls} for questions not judged after all); the stages now read"
        " their calls from the cache"
    )
    return {
        **report.metadata(),
        "stream/speculative_reasons": dg.MetadataValue.json(dict(sorted(why.items()))),
    }


@llm_asset(*ablations.PROMPT_TASKS, deps=["distractors", "question_drafts", "abstracts"])
def ablation_verdicts(
    context: Context, config: MultihopConfig, store: ArtifactStore, judge: Model, annotator: Model
) -> Result:
    """Judge verdicts of the four ablations (cascade, deduplicated prompts), raw judge text kept.
    First, the questions stream chunk by chunk through the cascade and the judges after it
    (``config.stream``; ``defs/multihop/stream.py``): the stages then find their calls cached."""
    partition = context.partition_key
    recipe = config.resolved("ablation_verdicts")
    order = ablations.validate_order(recipe.cascade_order)
    ready = sorted(
        r["id"]
        for r in store.read(partition, "distractors").select(["id", "verdict"]).to_pylist()
        if r["verdict"] == "kept"
    )
    over: list[str] = []
    if config.max_judged is not None and len(ready) > config.max_judged:
        ranked = sorted(ready, key=lambda i: (item_uniform(config.seed, "judge_limit", i), i))
        over = sorted(ranked[config.max_judged :])
        ready = sorted(ranked[: config.max_judged])
    by_id = docs(store, partition)
    drafts = {d["id"]: d for d in store.read(partition, "question_drafts").to_pylist()}
    items = []
    for qid in ready:
        d = drafts[qid]
        a, b = by_id[d["a_id"]], by_id[d["b_id"]]
        items.append(ablations.JudgeItem(qid, d["question"], d["answer"], a.title, a.text, b.title, b.text))
    lang = language(partition, config.language)
    template = load_prompt(ablations.PROMPT_TASK, lang)
    streamed = _join_prefetch(context, config, store, items, {"judge": judge, "annotator": annotator})
    result = ablations.run_cascade(
        items,
        judge,
        template,
        order,
        lang,
        ablations.JUDGE_PARAMS,
        strict_impossible=recipe.strict_impossible,
        log=context.log,
    )
    path = store.write(result.verdicts, partition, "ablation_verdicts")
    decisions = [Decision(q, o.verdict, o.reason, None, o.cache_keys) for q, o in result.outcome.items()]
    decisions += [Decision(q, "dropped", OVER_LIMIT) for q in over]
    write_ledger(store, partition, "ablation_verdicts", decisions)
    judged = len(items)
    md = table_metadata([path], result.verdicts.schema, preview_columns=["id", "ablation", "raw", "outcome"])
    md.update(
        {
            "cascade_order": ",".join(order),
            "judged": judged,
            OVER_LIMIT: len(over),
            "judge_calls": result.judge_calls,
            "plain_4_call_run_calls": 4 * judged,
            "judge_calls_per_judged_question": round(result.judge_calls / judged, 3) if judged else 0.0,
            "card_judge_calls_per_judged_question": recipe.card_judge_calls_per_judged,
            "rounds": dg.MetadataValue.json(result.rounds),
            **streamed,
            **_llm_metadata(judge, result.stats, "judge", template),
            **recipe_metadata(store, partition, "ablation_verdicts", recipe),
        }
    )
    return dg.MaterializeResult(metadata=md)


@multihop_asset(
    code_version="2",
    deps=["ablation_verdicts", "distractors", "question_checks", "question_drafts", "abstracts"],
    check_specs=invariant_check_specs,
)
def multihop_questions(
    context: Context, config: MultihopConfig, store: ArtifactStore, snapshots: SnapshotSource
) -> Result:
    """HotpotQA-format bridge questions (HF layout Parquet + original-layout JSON lines) per split:
    every question that passed the four ablations (the caps ran before the judge)."""
    partition = context.partition_key
    recipe = config.resolved("multihop_questions")
    drafts_t = store.read(partition, "question_drafts")
    checks_t = store.read(partition, "question_checks")
    dist_t = store.read(partition, "distractors")
    verdicts_t = store.read(partition, "ablation_verdicts")
    outcomes = ablations.outcomes_from_verdicts(verdicts_t)
    kept = pa.array(sorted(q for q, (verdict, _) in outcomes.items() if verdict == "kept"), pa.string())
    # the kept questions' rows only, as Python objects (all drafts took seconds at 20,000 pairs)
    drafts = {d["id"]: d for d in drafts_t.filter(pc.is_in(drafts_t["id"], value_set=kept)).to_pylist()}
    by_id = docs(store, partition)
    dist_kept = dist_t.select(["id", "distractor_ids"]).filter(pc.is_in(dist_t["id"], value_set=kept))
    dist = {r["id"]: r["distractor_ids"] for r in dist_kept.to_pylist()}
    records = []
    for qid, (verdict, _) in outcomes.items():
        if verdict != "kept":
            continue
        d = drafts[qid]
        a, b = by_id[d["a_id"]], by_id[d["b_id"]]
        rec = hotpot_format.build_record(
            qid,
            d["question"],
            d["answer"],
            (a.title, a.sentences),
            (b.title, b.sentences),
            d["support_a"],
            d["support_b"],
            [(by_id[i].title, by_id[i].sentences) for i in dist[qid]],
            config.seed,
        )
        rec["split"] = d["split"]
        records.append(rec)
    table = hotpot_format.records_table(records)
    paths = store.write_splits(table, partition, "multihop_questions")
    rows = table.to_pylist()  # once, not once per split
    for split, path in paths.items():
        hotpot_format.write_jsonl([r for r in rows if r["split"] == split], path.with_suffix(".jsonl"))
    write_ledger(
        store, partition, "multihop_questions", [Decision(r["id"], "kept", "released") for r in records]
    )
    funnel = build_funnel(
        drafts_t, checks_t, dist_t, verdicts_t, card_calls_per_judged=recipe.card_judge_calls_per_judged
    )
    files = [paths[s] for s in sorted(paths)]
    md = table_metadata(
        files, table.schema, preview_columns=["id", "question", "answer", "split"], split_column="split"
    )
    md.update(funnel_metadata(funnel))
    md["funnel_json"] = dg.MetadataValue.json(funnel)
    md["judge_calls_per_judged_question"] = funnel["judge calls per judged question"]
    md["seed"] = config.seed
    md["jsonl"] = dg.MetadataValue.json({s: str(p.with_suffix(".jsonl")) for s, p in sorted(paths.items())})
    md.update(recipe_metadata(store, partition, "multihop_questions", recipe))
    # the contexts are the distractors stage's: its recipe's distractors_k, whatever this one's says
    size = config_recipes.context_size(recipes.read_records(store.root / partition), recipe.context_size)
    allow_empty = recipe.allow_empty_output or bool(snapshots.config(partition).get("allow_empty_output"))
    checks = invariant_check_results(rows, size, inputs=drafts_t.num_rows, allow_empty=allow_empty)
    return dg.MaterializeResult(metadata=md, check_results=checks)


@multihop_asset(code_version="3", deps=["multihop_questions", "link_graph"])
def multihop_audit(context: Context, config: MultihopConfig, store: ArtifactStore) -> Result:
    """Invariants, surface-feature classifier AUC (vs 0.62) and longest-gold rate of the release."""
    partition = context.partition_key
    recipe = config.resolved("multihop_audit")
    rows = (
        store.read(partition, "multihop_questions").to_pylist()
        if store.files(partition, "multihop_questions")
        else []
    )
    graph = store.read(partition, "link_graph") if store.files(partition, "link_graph") else None
    size = config_recipes.context_size(recipes.read_records(store.root / partition), recipe.context_size)
    inv = audit.check_invariants(rows, size)
    x, y, groups = audit.paragraph_features(rows, audit.in_degree_map(graph))
    auc, aucs = audit.surface_auc(x, y, groups, repeats=5, seed=config.seed)
    longest, chance = audit.gold_longest_rate(rows)
    measures = [(f"invariant:{r.name}", float(r.failures), 0.0, r.passed) for r in inv]
    measures.append(
        (
            "surface_auc",
            auc if auc is not None else float("nan"),
            recipe.surface_auc_bar,
            auc is None or auc <= recipe.surface_auc_bar,
        )
    )
    measures.append(
        ("gold_longest_rate", longest if longest is not None else float("nan"), chance or 0.0, True)
    )
    table = pa.table(
        {
            "measure": [m[0] for m in measures],
            "value": [m[1] for m in measures],
            "reference": [m[2] for m in measures],
            "ok": [m[3] for m in measures],
        }
    )
    path = store.write(table, partition, "multihop_audit")
    md = table_metadata([path], table.schema)
    md.update(
        {
            "questions": len(rows),
            "invariants": dg.MetadataValue.json(
                {r.name: {"failures": r.failures, "examples": r.examples} for r in inv}
            ),
            "surface_auc_mean": auc,  # None (a null) when not computed: too few questions
            "surface_auc_repeats": dg.MetadataValue.json(aucs),
            "surface_auc_bar": recipe.surface_auc_bar,
            "gold_longest_rate": longest,
            "gold_longest_chance": chance,
            **recipe_metadata(store, partition, "multihop_audit", recipe),
        }
    )
    return dg.MaterializeResult(metadata=md)
