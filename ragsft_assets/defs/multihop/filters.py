"""Filter assets on the released questions and the filtered configurations they make.

The filters: ``first_hop`` then ``mechanical_rules``; ``criteria_annotation``; ``bridge_judge`` then
``language_judge``, and on the train split ``publishability_score`` then ``descriptor_check``. The
four judges are built by one factory (``judged.judged_asset``). Each filtered config of
``published_configs`` is the rows its filters keep (one factory, :func:`config_asset`, and the
reading of its filters' verdicts, :data:`DECIDERS`); each corpus config drawn from a question config
is the abstracts of that config's contexts (:func:`corpus_asset`). Each piece below says only what
it selects and how it decides.

No ``from __future__ import annotations``: Dagster resolves config and resource types at decoration
time. Thin wiring: the logic is ``ragsft_assets.multihop.first_hop`` / ``mechanical_rules`` /
``criteria`` / ``targeted_judges`` / ``filter_configs``.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets import published_configs
from ragsft_assets.defs.check_results import FAILURES, check_result
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.multihop.common import (
    FILTER_PRODUCT,
    KEPT,
    RecipeConfig,
    multihop_asset,
    pair_documents,
    questions,
    recipe_metadata,
    write_ledger,
)
from ragsft_assets.defs.multihop.judged import (
    JudgeCall,
    Judged,
    JudgedStage,
    judged_asset,
    rejection_counts,
    verdict_decisions,
)
from ragsft_assets.defs.partitions import snapshot_language
from ragsft_assets.defs.wiring import TableReader, declared_inputs, reads
from ragsft_assets.ledger import Decision
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import filter_configs as fc
from ragsft_assets.multihop import first_hop as fh
from ragsft_assets.multihop import mechanical_rules as mr
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.multihop import topics as tp
from ragsft_assets.multihop import train_checks as tc
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS, write_parquet

PRODUCT = FILTER_PRODUCT
MECHANICAL_SCHEMA = pa.schema([("id", pa.string()), ("verdict", pa.string())])
# Beside the split files, in a subfolder so that readers of the asset's split files never see it;
# the release copies it to provenance/<config>/verdicts.parquet.
VERDICTS_FILE = "provenance/verdicts.parquet"
QUESTION_DEPS = ("multihop_questions", "question_drafts", "abstracts")


def _made_by(stage: str) -> published_configs.PublishedConfig:
    """The filtered config whose filters list ``stage`` first (the config its verdicts make)."""
    return next(c for c in published_configs.filtered_configs() if stage in c.filters)


def criteria_items(
    rows: list[dict[str, Any]], docs: dict[str, Any], drafts: dict[str, dict[str, Any]]
) -> list[cr.CriteriaItem]:
    """Six-criteria items of question rows (``id``, ``question``, ``answer``): the question, its
    answer and the full abstracts of A and B, what a person labelling the question sees."""
    items = []
    for q in rows:
        d = drafts[q["id"]]
        a, b = docs[d["a_id"]], docs[d["b_id"]]
        items.append(cr.CriteriaItem(q["id"], q["question"], q["answer"], a.title, a.text, b.title, b.text))
    return items


# -- the judges -------------------------------------------------------------------------------


class FirstHopConfig(RecipeConfig):
    """Recipe: the config its filter makes by default; its ``first_hop_role`` names the LLM role (judge)."""


def _first_hop(run: JudgeCall) -> Judged:
    docs, drafts = pair_documents(run.store, run.partition)
    items = []
    for q in questions(run.store, run.partition):
        d = drafts[q["id"]]
        a = docs[d["a_id"]]
        items.append(fh.FirstHopItem(q["id"], q["question"], a.title, a.text, d["b_title"], d["alias"] or ""))
    table = fh.run_first_hop(items, run.model, run.template, log=run.log)
    rows = table.select(["id", "verdict", "cache_key"]).to_pylist()
    rejections = rejection_counts([r["verdict"] for r in rows], fh.VERDICTS, fh.LEADS_TO_B)
    return Judged(
        table,
        verdict_decisions(rows, fh.LEADS_TO_B),
        funnel_metadata(rejections, "rejections"),
        ("id", "verdict", "entity", "raw"),
    )


class CriteriaConfig(RecipeConfig):
    """Recipe: the config its filter makes by default; its ``criteria_role`` names the LLM role (annotator)."""

    max_questions: int | None = None  # the annotation budget; questions past it are not_annotated (None: all)


def _criteria(run: JudgeCall) -> Judged:
    items = criteria_items(questions(run.store, run.partition), *pair_documents(run.store, run.partition))
    table = cr.run_criteria(items, run.model, run.template, run.config.max_questions, log=run.log)
    rows = table.to_pylist()
    counts = Counter(r["verdict"] for r in rows)
    annotated = [r for r in rows if r["verdict"] != cr.NOT_ANNOTATED]
    md = {
        "questions": len(rows),
        "annotated": len(annotated),
        "rejected": counts.get(cr.FAILS_CRITERIA, 0),
        "not_annotated": counts.get(cr.NOT_ANNOTATED, 0),  # reported apart, never counted as rejected
        **{
            f"failure_share/{c}": round(sum(not r[c] for r in annotated) / len(annotated), 4)
            if annotated
            else 0.0
            for c in cr.CRITERIA
        },
    }
    decisions = verdict_decisions(
        rows, cr.KEPT, lambda r: ",".join(r["failed"]) if r["verdict"] == cr.FAILS_CRITERIA else r["verdict"]
    )
    return Judged(table, decisions, md, ("id", "verdict", "failed"))


class TargetedJudgeConfig(RecipeConfig):
    """Recipe: the config its filters make by default; ``bridge_judge_role`` / ``language_judge_role``."""


def _targeted(spec: tj.Judge, after: str, kept_of: str) -> Callable[[JudgeCall], Judged]:
    """The judge function of one targeted judge, on the questions ``after`` keeps (verdict ``kept_of``)."""

    def run_judge(run: JudgeCall) -> Judged:
        passed = {
            r["id"] for r in run.store.read(run.partition, after).to_pylist() if r["verdict"] == kept_of
        }
        docs, drafts = pair_documents(run.store, run.partition)
        items = []
        for q in questions(run.store, run.partition):
            if q["id"] in passed:
                d = drafts[q["id"]]
                a, b = docs[d["a_id"]], docs[d["b_id"]]
                items.append(
                    tj.JudgeItem(q["id"], q["question"], q["answer"], a.title, a.text, b.title, b.text)
                )
        table = tj.run_judge(spec, items, run.model, run.template, log=run.log)
        rows = table.to_pylist()
        rejections = rejection_counts([r["verdict"] for r in rows], spec.verdicts, tj.KEPT)
        md = funnel_metadata(rejections, "rejections")
        return Judged(table, verdict_decisions(rows, tj.KEPT), md, ("id", "verdict", "analysis"))

    return run_judge


class TrainCheckConfig(RecipeConfig):
    """Recipe: the config its filters make by default: ``publishability_role`` / ``descriptor_check_role``,
    ``publishability_min_score`` and ``train_only_splits``."""


def _train_items(run: JudgeCall, after: str) -> list[tc.TrainItem]:
    """The questions of the recipe's train-only splits that ``after`` keeps, with the descriptor the
    bridge judge copied."""
    passed = {r["id"] for r in run.store.read(run.partition, after).to_pylist() if r["verdict"] == tj.KEPT}
    rows = run.store.read(run.partition, "multihop_questions").select(["id", "split"]).to_pylist()
    splits = {r["id"]: r["split"] for r in rows}
    descriptors = {
        r["id"]: tc.descriptor_of(r["raw"])
        for r in run.store.read(run.partition, "bridge_judge").select(["id", "raw"]).to_pylist()
    }
    docs, drafts = pair_documents(run.store, run.partition)
    items = []
    for q in questions(run.store, run.partition):
        if q["id"] in passed and splits.get(q["id"]) in run.recipe.train_only_splits:
            d = drafts[q["id"]]
            a, b = docs[d["a_id"]], docs[d["b_id"]]
            items.append(
                tc.TrainItem(
                    q["id"], q["question"], q["answer"], a.title, a.text, b.title, b.text,
                    descriptors.get(q["id"], ""),
                )
            )  # fmt: skip
    return items


def _train_judged(table: pa.Table, verdicts: tuple[str, ...], splits: tuple[str, ...]) -> Judged:
    rows = table.to_pylist()
    rejections = rejection_counts([r["verdict"] for r in rows], verdicts, tc.KEPT)
    md = {**funnel_metadata(rejections, "rejections"), "splits": ", ".join(splits)}
    return Judged(table, verdict_decisions(rows, tc.KEPT), md, ("id", "verdict", "score", "analysis"))


def _publishability(run: JudgeCall) -> Judged:
    items = _train_items(run, "language_judge")
    table = tc.run_publishability(
        items, run.model, run.template, run.recipe.publishability_min_score, log=run.log
    )
    return _train_judged(table, tc.PUBLISHABILITY_VERDICTS, run.recipe.train_only_splits)


def _descriptor(run: JudgeCall) -> Judged:
    items = _train_items(run, "publishability_score")
    table = tc.run_descriptor_check(items, run.model, run.template, log=run.log)
    return _train_judged(table, tc.DESCRIPTOR.verdicts, run.recipe.train_only_splits)


first_hop = judged_asset(
    JudgedStage(
        name="first_hop",
        description=(
            "The fifth ablation: the judge reads A alone with the question (never B) and names the entity "
            "the question's descriptor points to; kept when it is B (leads_to_b)."
        ),
        task=fh.TASK,
        role=lambda r: r.first_hop_role,
        config=FirstHopConfig,
        reads=QUESTION_DEPS,
        judge=_first_hop,
    )
)
criteria_annotation = judged_asset(
    JudgedStage(
        name="criteria_annotation",
        description=(
            "Six binary criteria per question of `default` (correct answer, bridge in A, fact in B, both "
            "documents needed, clear question, minimal answer); all six must hold for "
            f"`{_made_by('criteria_annotation').name}`."
        ),
        task=cr.TASK,
        role=lambda r: r.criteria_role,
        config=CriteriaConfig,
        reads=QUESTION_DEPS,
        judge=_criteria,
    )
)
bridge_judge = judged_asset(
    JudgedStage(
        name=tj.BRIDGE.stage,
        description=(
            f"Targeted bridge judge on `{_made_by(tj.BRIDGE.stage).parent}`: an analysis, then kept only "
            "if B is the only entity of A the question's descriptor can designate, A states the relation, and the question does "
            "not name B by itself."
        ),
        task=tj.BRIDGE.task,
        role=lambda r: r.bridge_judge_role,
        config=TargetedJudgeConfig,
        reads=("criteria_annotation", *QUESTION_DEPS),
        judge=_targeted(tj.BRIDGE, "criteria_annotation", cr.KEPT),
    )
)
language_judge = judged_asset(
    JudgedStage(
        name=tj.LANGUAGE.stage,
        description=(
            "Targeted language judge on what bridge_judge keeps: an analysis, then kept only if the "
            "question is fluent, its referents unique, it has no meta wording, and the answer has the "
            f"right type and scope. Its keeps make `{_made_by(tj.LANGUAGE.stage).name}`."
        ),
        task=tj.LANGUAGE.task,
        role=lambda r: r.language_judge_role,
        config=TargetedJudgeConfig,
        reads=("bridge_judge", *QUESTION_DEPS),
        judge=_targeted(tj.LANGUAGE, "bridge_judge", tj.KEPT),
    )
)


publishability_score = judged_asset(
    JudgedStage(
        name=tc.PUBLISHABILITY_STAGE,
        description=(
            f"{_made_by(tc.PUBLISHABILITY_STAGE).name}'s train-only publishability score (the card's "
            '"score de publiabilité (train)"): on the train questions language_judge keeps, an analysis then a score of 1 to 5; '
            "kept at the recipe's publishability_min_score (ours: 4) or more."
        ),
        task=tc.PUBLISHABILITY_TASK,
        role=lambda r: r.publishability_role,
        config=TrainCheckConfig,
        reads=("language_judge", "bridge_judge", *QUESTION_DEPS),
        judge=_publishability,
    )
)
descriptor_check = judged_asset(
    JudgedStage(
        name=tc.DESCRIPTOR_STAGE,
        description=(
            f"{_made_by(tc.DESCRIPTOR_STAGE).name}'s train-only descriptor check (the card's "
            '"contrôle des descripteurs (train)"): on what publishability_score keeps, the bridge judge\'s '
            "descriptor is a part of "
            "the question, does not give B away, and says nothing A does not state."
        ),
        task=tc.DESCRIPTOR_TASK,
        role=lambda r: r.descriptor_check_role,
        config=TrainCheckConfig,
        reads=("publishability_score", "bridge_judge", *QUESTION_DEPS),
        judge=_descriptor,
    )
)


@multihop_asset(code_version="1", deps=["first_hop", "multihop_questions"])
def mechanical_rules(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """Year answers with exactly one year; no question naming the document (patterns per language)."""
    partition = context.partition_key
    lang = snapshot_language(partition)
    passed = {
        r["id"]
        for r in store.read(partition, "first_hop").select(["id", "verdict"]).to_pylist()
        if r["verdict"] == fh.LEADS_TO_B
    }
    rows = [q for q in questions(store, partition) if q["id"] in passed]
    verdicts = [mr.rule_verdict(q["question"], q["answer"], lang) for q in rows]
    table = pa.table({"id": [q["id"] for q in rows], "verdict": verdicts}, schema=MECHANICAL_SCHEMA)
    path = store.write(table, partition, "mechanical_rules")
    decisions = [
        Decision(q["id"], KEPT if v == mr.KEPT else "dropped", v) for q, v in zip(rows, verdicts, strict=True)
    ]
    write_ledger(store, partition, "mechanical_rules", decisions, PRODUCT)
    counts = Counter(verdicts)
    md = table_metadata([path], table.schema)
    md.update(
        {
            "checked": len(rows),
            "kept": counts.get(mr.KEPT, 0),
            **funnel_metadata({r: counts.get(r, 0) for r in mr.REASONS}, "rejections"),
        }
    )
    return dg.MaterializeResult(metadata=md)


# -- the configurations -------------------------------------------------------------------------


def _topics(store: ArtifactStore, snapshots: SnapshotSource, partition: str) -> dict[str, str]:
    """Question id -> topic (its bridge's category) from the snapshot's topic file; {} without one."""
    path = tp.find_topic_file(snapshots.folder(partition), snapshots.config(partition).get("topics_file", ""))
    if path is None:
        return {}
    drafts = store.read(partition, "question_drafts").select(["id", "b_title"]).to_pylist()
    return tp.question_topics({d["id"]: d["b_title"] for d in drafts}, tp.read_topics(path))


def _split_tables(store: TableReader, partition: str, asset: str) -> dict[str, pa.Table]:
    return {
        f.stem: store.read(partition, asset, f.stem)
        for f in store.files(partition, asset)
        if f.stem in SPLITS
    }


Provenance = dict[str, list[tuple[str, str, bool, str | None]]]
# What a filtered config's filters decided: the kept ids, every filter's verdicts, the funnel.
Decided = tuple[set[str], Provenance, dict[str, int]]


def _criteria_provenance(rows: list[dict[str, Any]]) -> Provenance:
    """Provenance of criteria_annotation: the overall verdict, then one row per criterion per annotated question."""
    provenance: Provenance = {
        "criteria_annotation": [
            (r["id"], r["verdict"], r["verdict"] == cr.KEPT, ",".join(r["failed"] or []) or None)
            for r in rows
        ]
    }
    for c in cr.CRITERIA:
        provenance[f"criteria_annotation/{c}"] = [
            (r["id"], "holds" if r[c] else "fails", bool(r[c]), None) for r in rows if r[c] is not None
        ]
    return provenance


def _first_hop_and_rules(store: TableReader, partition: str, parent: str) -> Decided:
    fh_rows = store.read(partition, "first_hop").select(["id", "verdict", "entity"]).to_pylist()
    mech_rows = store.read(partition, "mechanical_rules").to_pylist()
    kept = {r["id"] for r in mech_rows if r["verdict"] == mr.KEPT}
    provenance: Provenance = {
        "first_hop": [(r["id"], r["verdict"], r["verdict"] == fh.LEADS_TO_B, r["entity"]) for r in fh_rows],
        "mechanical_rules": [(r["id"], r["verdict"], r["verdict"] == mr.KEPT, None) for r in mech_rows],
    }
    funnel = {
        parent: len(fh_rows),
        "first_hop kept": sum(r["verdict"] == fh.LEADS_TO_B for r in fh_rows),
        "mechanical_rules kept": len(kept),
    }
    return kept, provenance, funnel


def _criteria_kept(store: TableReader, partition: str, parent: str) -> Decided:
    rows = store.read(partition, "criteria_annotation").to_pylist()
    kept = {r["id"] for r in rows if r["verdict"] == cr.KEPT}
    counts = Counter(r["verdict"] for r in rows)
    funnel = {
        parent: len(rows),
        "not_annotated (excluded, not rejected)": counts.get(cr.NOT_ANNOTATED, 0),
        "annotated": len(rows) - counts.get(cr.NOT_ANNOTATED, 0),
        "fails_criteria": counts.get(cr.FAILS_CRITERIA, 0),
        "kept": len(kept),
    }
    return kept, _criteria_provenance(rows), funnel


def _targeted_and_train_checks(store: TableReader, partition: str, parent: str) -> Decided:
    crit = store.read(partition, "criteria_annotation").to_pylist()
    bridge = store.read(partition, "bridge_judge").to_pylist()
    lang = store.read(partition, "language_judge").to_pylist()
    score = store.read(partition, tc.PUBLISHABILITY_STAGE).to_pylist()
    desc = store.read(partition, tc.DESCRIPTOR_STAGE).to_pylist()
    judged = {r["id"] for r in lang if r["verdict"] == tj.KEPT}
    # a question the train-only steps scored (a train one) must pass both; the others keep the
    # judges' verdict
    kept = tc.train_only_kept(
        judged, {r["id"] for r in score}, {r["id"] for r in desc if r["verdict"] == tc.KEPT}
    )
    provenance = {
        **_criteria_provenance(crit),
        "bridge_judge": [(r["id"], r["verdict"], r["verdict"] == tj.KEPT, r["analysis"]) for r in bridge],
        "language_judge": [(r["id"], r["verdict"], r["verdict"] == tj.KEPT, r["analysis"]) for r in lang],
        tc.PUBLISHABILITY_STAGE: [
            (r["id"], r["verdict"], r["verdict"] == tc.KEPT, None if r["score"] is None else str(r["score"]))
            for r in score
        ],
        tc.DESCRIPTOR_STAGE: [(r["id"], r["verdict"], r["verdict"] == tc.KEPT, r["analysis"]) for r in desc],
    }
    funnel = {
        parent: sum(r["verdict"] == cr.KEPT for r in crit),
        "bridge_judge kept": sum(r["verdict"] == tj.KEPT for r in bridge),
        "language_judge kept": len(judged),
        "publishability_score judged (train)": len(score),
        "publishability_score dropped (train)": sum(r["verdict"] == tc.BELOW_THRESHOLD for r in score),
        "publishability_score unreadable (train)": sum(r["verdict"] == tc.UNREADABLE for r in score),
        "descriptor_check dropped (train)": sum(r["verdict"] not in (tc.KEPT, tc.UNREADABLE) for r in desc),
        "descriptor_check no verdict (train)": sum(r["verdict"] == tc.UNREADABLE for r in desc),
        "kept": len(kept),
    }
    return kept, provenance, funnel


def subset_check_result(
    store: TableReader,
    key: str,
    asset: str,
    parent_asset: str = "multihop_questions",
    own_rows_allowed: bool = False,
) -> dg.AssetCheckResult:
    """Whether ``asset``'s rows are rows of ``parent_asset``, same split, unchanged, no duplicates;
    ``own_rows_allowed``: only the rows whose id ``parent_asset`` has must be its rows."""
    parents = _split_tables(store, key, parent_asset)
    failures: list[tuple[str, str]] = []
    checked = 0
    for split, child in _split_tables(store, key, asset).items():
        checked += child.num_rows
        parent = parents.get(split)
        if parent is None:
            failures.append(("split_not_in_parent", split))
            continue
        check = fc.shared_id_violations if own_rows_allowed else fc.subset_violations
        failures += check(child, parent)
    return check_result(
        passed=not failures,
        failures=len(failures),
        partition=key,
        metadata={
            "examples": dg.MetadataValue.json([list(f) for f in failures[:5]]),
            "checked": f"{checked} rows",
            "parent": parent_asset,
        },
    )


@dataclass(frozen=True, slots=True)
class SubsetCheck:
    """A config's blocking check against its parent: a ``check_specs`` entry of the config's asset,
    its result returned by the materialization (no separate partitioned check: a Dagster preview)."""

    name: str  # short: Dagster shows it under the asset's name
    parent: str
    description: str
    own_rows_allowed: bool = False

    def spec(self, asset: str) -> dg.AssetCheckSpec:
        return dg.AssetCheckSpec(self.name, asset=asset, description=self.description, blocking=True)

    def result(self, store: TableReader, partition: str, asset: str) -> dg.AssetCheckResult:
        r = subset_check_result(store, partition, asset, self.parent, self.own_rows_allowed)
        return check_result(
            asset_key=asset,
            check_name=self.name,
            passed=r.passed,
            failures=r.metadata[FAILURES].value,
            partition=partition,
            metadata=r.metadata,
        )


# How the verdicts of a filtered config's filters (its entry's ``filters``) decide its rows; a config
# whose filters have none here fails at import with the list.
DECIDERS: dict[tuple[str, ...], Callable[[TableReader, str, str], Decided]] = {
    ("first_hop", "mechanical_rules"): _first_hop_and_rules,
    ("criteria_annotation",): _criteria_kept,
    (
        tj.BRIDGE.stage,
        tj.LANGUAGE.stage,
        tc.PUBLISHABILITY_STAGE,
        tc.DESCRIPTOR_STAGE,
    ): _targeted_and_train_checks,
}
QUESTIONS = "multihop_questions"  # the production's questions: every filtered config's rows are some of them


def _filter_chain(config: published_configs.PublishedConfig) -> tuple[str, ...]:
    """The filters of ``config``'s ancestors, then its own, in the order they ran."""
    parent = published_configs.by_name(config.parent) if config.parent else None
    return (*(_filter_chain(parent) if parent else ()), *config.filters)


def subset_check(config: published_configs.PublishedConfig) -> SubsetCheck:
    """A filtered config's blocking check against its parent, named after the parent."""
    parent = published_configs.by_name(config.parent or "")
    name = (
        f"matches_{parent.name}_on_shared_ids" if config.own_rows_allowed else f"is_subset_of_{parent.name}"
    )
    return SubsetCheck(name, parent.asset, config.check_description, config.own_rows_allowed)


def config_asset(config: published_configs.PublishedConfig) -> dg.AssetsDefinition:
    """A filtered configuration: the rows of ``default`` whose id its filters keep (:data:`DECIDERS`),
    unchanged (byte for byte, split by split), and ``provenance/verdicts.parquet`` with every filter's
    verdict; a blocking check of its rows against its parent, computed as it is written. Its deps
    (every filter's verdicts, the questions, the parent's rows) are also the only tables the
    decision and the check may read (``defs.wiring``).

    Raises:
        KeyError: no decider for the config's filters.
    """
    if config.filters not in DECIDERS:
        raise KeyError(
            f"published config {config.name!r}: no decider for filters {config.filters}; "
            f"filters.DECIDERS has {sorted(DECIDERS)}"
        )
    name, decide, check = config.asset, DECIDERS[config.filters], subset_check(config)
    parent = published_configs.by_name(config.parent or "")
    deps = [
        *reversed(_filter_chain(config)),
        QUESTIONS,
        *([check.parent] if check.parent != QUESTIONS else []),
    ]

    @multihop_asset(
        name=name,
        description=config.asset_description,
        code_version=config.code_version,
        deps=reads(*deps),
        check_specs=[check.spec(name)],
    )
    def _asset(
        context: dg.AssetExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
    ) -> dg.MaterializeResult:
        partition = context.partition_key
        inputs = declared_inputs(context, store)
        kept, provenance, funnel = decide(inputs, partition, parent.name)
        topics = _topics(store, snapshots, partition)
        parents = _split_tables(inputs, partition, QUESTIONS)
        paths, rows = {}, {}
        for split, parent_rows in parents.items():
            child = fc.subset_rows(parent_rows, kept)
            paths[split] = store.write(child, partition, name, split)
            rows[split] = child.num_rows
        write_parquet(fc.verdicts_table(provenance, topics), store.root / partition / name / VERDICTS_FILE)
        seen = {i for items in provenance.values() for i, *_ in items}
        md = table_metadata([paths[s] for s in SPLITS if s in paths], next(iter(parents.values())).schema)
        md.update(
            {
                "parent": QUESTIONS,
                "parent_rows": len(seen),
                "questions_with_topic": sum(i in topics for i in seen),
                "topics": len(set(topics.values())),
                "rows": sum(rows.values()),
                **{f"rows/{s}": n for s, n in sorted(rows.items())},
                **funnel_metadata(funnel, "funnel"),
            }
        )
        return dg.MaterializeResult(metadata=md, check_results=[check.result(inputs, partition, name)])

    return _asset


class CorpusConfig(RecipeConfig):
    """Recipe: the corpus config the asset makes, by default; its ``corpus_columns`` are the shipped columns."""


def corpus_asset(published: published_configs.PublishedConfig) -> dg.AssetsDefinition:
    """A corpus config drawn from a question config (its parent): the abstracts in that config's
    contexts (golds and distractors), per split, with the recipe's ``corpus_columns``; counts of
    gold and distractor-only abstracts per split."""
    name = published.asset
    questions = published_configs.by_name(published.parent or "").asset

    @multihop_asset(
        name=name,
        description=published.asset_description,
        code_version=published.code_version,
        deps=[questions, "abstracts"],
    )
    def _asset(
        context: dg.AssetExecutionContext, config: CorpusConfig, store: ArtifactStore
    ) -> dg.MaterializeResult:
        partition = context.partition_key
        recipe = config.resolved(name)
        paths, rows, roles = {}, {}, {}
        abstracts = _split_tables(store, partition, "abstracts")
        missing = sorted(set(recipe.corpus_columns) - set(next(iter(abstracts.values())).column_names))
        if missing:
            raise ValueError(f"corpus_columns {missing} are not columns of abstracts")
        for split, qs in _split_tables(store, partition, questions).items():
            titles = {t for ctx in qs["context"].to_pylist() for t in ctx["title"]}
            golds = {t for sf in qs["supporting_facts"].to_pylist() for t in sf["title"]}
            corpus = abstracts[split]
            sub = corpus.filter(pc.is_in(corpus["title"], value_set=pa.array(sorted(titles), pa.string())))
            sub = sub.select(list(recipe.corpus_columns))
            paths[split] = store.write(sub, partition, name, split)
            rows[split] = sub.num_rows
            gold = sum(t in golds for t in sub["title"].to_pylist())
            roles[split] = {"gold": gold, "distractor_only": sub.num_rows - gold}
        schema = next(iter(abstracts.values())).schema
        md = table_metadata(
            [paths[s] for s in SPLITS if s in paths],
            pa.schema([schema.field(c) for c in recipe.corpus_columns]),
        )
        md.update(
            {
                "rows": sum(rows.values()),
                **{f"rows/{s}": n for s, n in sorted(rows.items())},
                "gold_vs_distractor_only": dg.MetadataValue.json(roles),
                **recipe_metadata(store, partition, name, recipe),
            }
        )
        return dg.MaterializeResult(metadata=md)

    return _asset


# One asset per filtered config and per corpus config drawn from a question config, by config name.
CONFIG_ASSETS: dict[str, dg.AssetsDefinition] = {
    **{c.name: config_asset(c) for c in published_configs.filtered_configs()},
    **{c.name: corpus_asset(c) for c in published_configs.of_family("corpus") if c.parent},
}
filter_assets = [
    first_hop, mechanical_rules, criteria_annotation, bridge_judge, language_judge, publishability_score,
    descriptor_check, *CONFIG_ASSETS.values(),
]  # fmt: skip
