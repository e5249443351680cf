"""Filter assets on the released questions and the filtered configurations they make.

The filters: ``first_hop`` then ``mechanical_rules``; ``criteria_annotation``; ``bridge_judge`` then
``language_judge``, and on the train split ``publishability_score`` then ``descriptor_check``. The
judges are one table (:data:`JUDGES`) built by one factory (``judged.judged_asset``). Each filtered
config of ``published_configs`` is the rows its filters keep (one factory, :func:`config_asset`, and
the reading of its filters' verdicts, ``filter_steps.DECIDERS``); each corpus config drawn from a
question config is the abstracts of that config's contexts (:func:`corpus_asset`). Each piece below
says only what it reads, calls, writes and reports.

No ``from __future__ import annotations``: Dagster resolves config and resource types at decoration
time. Thin wiring: the logic is ``ragsft_assets.multihop.filter_steps`` (Dagster-free) over
``first_hop`` / ``mechanical_rules`` / ``criteria`` / ``targeted_judges`` / ``train_checks`` /
``filter_configs``.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg
import pyarrow as pa

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
from ragsft_assets.multihop import filter_steps as fs
from ragsft_assets.multihop import first_hop as fh
from ragsft_assets.multihop import mechanical_rules as mr
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.multihop import topics as tp
from ragsft_assets.multihop import train_checks as tc

# review.py and the tests import criteria_items and DECIDERS from here
from ragsft_assets.multihop.filter_steps import DECIDERS, QUESTIONS, criteria_items, made_by  # noqa: F401
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS, write_parquet

PRODUCT = FILTER_PRODUCT
# Beside the split files, in a subfolder so that readers of the asset's split files never see it;
# the release copies it to provenance/<config>/verdicts.parquet.
VERDICTS_FILE = "provenance/verdicts.parquet"
QUESTION_DEPS = ("multihop_questions", "question_drafts", "abstracts")


# -- the judges -------------------------------------------------------------------------------


class FirstHopConfig(RecipeConfig):
    """Recipe: the config its filter makes by default; its ``first_hop_role`` names the LLM role (judge)."""


class CriteriaConfig(RecipeConfig):
    """Recipe: the config its filter makes by default; its ``criteria_role`` names the LLM role (annotator)."""

    max_questions: int | None = None  # the annotation budget; questions past it are not_annotated (None: all)


class TargetedJudgeConfig(RecipeConfig):
    """Recipe: the config its filters make by default; ``bridge_judge_role`` / ``language_judge_role``."""


class TrainCheckConfig(RecipeConfig):
    """Recipe: the config its filters make by default: ``publishability_role`` / ``descriptor_check_role``,
    ``publishability_min_score`` and ``train_only_splits``."""


def _first_hop(run: JudgeCall) -> Judged:
    items = fs.first_hop_items(questions(run.store, run.partition), *pair_documents(run.store, run.partition))
    table = fh.run_first_hop(items, run.model, run.template, log=run.log)
    rows = table.select(["id", "verdict", "cache_key"]).to_pylist()
    rejections = rejection_counts([r["verdict"] for r in rows], fh.VERDICTS, fh.LEADS_TO_B)
    md = funnel_metadata(rejections, "rejections")
    return Judged(table, verdict_decisions(rows, fh.LEADS_TO_B), md, ("id", "verdict", "entity", "raw"))


def _criteria(run: JudgeCall) -> Judged:
    items = criteria_items(questions(run.store, run.partition), *pair_documents(run.store, run.partition))
    table = cr.run_criteria(items, run.model, run.template, run.config.max_questions, log=run.log)
    rows = table.to_pylist()
    decisions = verdict_decisions(
        rows, cr.KEPT, lambda r: ",".join(r["failed"]) if r["verdict"] == cr.FAILS_CRITERIA else r["verdict"]
    )
    return Judged(table, decisions, fs.criteria_summary(rows), ("id", "verdict", "failed"))


def _targeted(spec: tj.Judge, after: str, kept_of: str) -> Callable[[JudgeCall], Judged]:
    """The judge function of one targeted judge, on the questions ``after`` keeps (verdict ``kept_of``)."""

    def run_judge(run: JudgeCall) -> Judged:
        passed = fs.kept_ids(run.store, run.partition, after, kept_of)
        qs = questions(run.store, run.partition)
        items = fs.targeted_items(qs, *pair_documents(run.store, run.partition), passed)
        table = tj.run_judge(spec, items, run.model, run.template, log=run.log)
        rows = table.to_pylist()
        rejections = rejection_counts([r["verdict"] for r in rows], spec.verdicts, tj.KEPT)
        md = funnel_metadata(rejections, "rejections")
        return Judged(table, verdict_decisions(rows, tj.KEPT), md, ("id", "verdict", "analysis"))

    return run_judge


def _train_check(
    check: Callable[[list[tc.TrainItem], JudgeCall], pa.Table], after: str, verdicts: tuple[str, ...]
) -> Callable[[JudgeCall], Judged]:
    """The judge function of one train-only check (``check(items, run)``), on the questions of the
    recipe's train-only splits that ``after`` keeps."""

    def run_judge(run: JudgeCall) -> Judged:
        qs = questions(run.store, run.partition)
        docs, drafts = pair_documents(run.store, run.partition)
        splits = run.recipe.train_only_splits
        table = check(fs.train_items(run.store, run.partition, after, qs, docs, drafts, splits), run)
        rows = table.to_pylist()
        rejections = rejection_counts([r["verdict"] for r in rows], verdicts, tc.KEPT)
        md = {**funnel_metadata(rejections, "rejections"), "splits": ", ".join(splits)}
        return Judged(table, verdict_decisions(rows, tc.KEPT), md, ("id", "verdict", "score", "analysis"))

    return run_judge


def _publishability(items: list[tc.TrainItem], run: JudgeCall) -> pa.Table:
    min_score = run.recipe.publishability_min_score
    return tc.run_publishability(items, run.model, run.template, min_score, log=run.log)


def _descriptor(items: list[tc.TrainItem], run: JudgeCall) -> pa.Table:
    return tc.run_descriptor_check(items, run.model, run.template, log=run.log)


DESCRIPTIONS = {
    "first_hop": (
        "The fifth ablation: the judge reads A alone with the question (never B) and names the entity "
        "the question's descriptor points to; kept when it is B (leads_to_b)."
    ),
    "criteria_annotation": (
        "Six binary criteria per question of `default` (correct answer, bridge in A, fact in B, both "
        "documents needed, clear question, minimal answer); all six must hold for "
        f"`{made_by('criteria_annotation').name}`."
    ),
    tj.BRIDGE.stage: (
        f"Targeted bridge judge on `{made_by(tj.BRIDGE.stage).parent}`: an analysis, then kept only "
        "if B is the only entity of A the question's descriptor can designate, A states the relation, and the question does "
        "not name B by itself."
    ),
    tj.LANGUAGE.stage: (
        "Targeted language judge on what bridge_judge keeps: an analysis, then kept only if the "
        "question is fluent, its referents unique, it has no meta wording, and the answer has the "
        f"right type and scope. Its keeps make `{made_by(tj.LANGUAGE.stage).name}`."
    ),
    tc.PUBLISHABILITY_STAGE: (
        f"{made_by(tc.PUBLISHABILITY_STAGE).name}'s train-only publishability score (the card's "
        '"score de publiabilité (train)"): on the train questions language_judge keeps, an analysis then a score of 1 to 5; '
        "kept at the recipe's publishability_min_score (ours: 4) or more."
    ),
    tc.DESCRIPTOR_STAGE: (
        f"{made_by(tc.DESCRIPTOR_STAGE).name}'s train-only descriptor check (the card's "
        '"contrôle des descripteurs (train)"): on what publishability_score keeps, the bridge judge\'s '
        "descriptor is a part of "
        "the question, does not give B away, and says nothing A does not state."
    ),
}
# One row per judged stage: its name, task, LLM role, run config, declared inputs, judge function.
TRAIN_DEPS = ("bridge_judge", *QUESTION_DEPS)
JUDGES = (
    ("first_hop", fh.TASK, lambda r: r.first_hop_role, FirstHopConfig, QUESTION_DEPS, _first_hop),
    ("criteria_annotation", cr.TASK, lambda r: r.criteria_role, CriteriaConfig, QUESTION_DEPS, _criteria),
    (
        tj.BRIDGE.stage, tj.BRIDGE.task, lambda r: r.bridge_judge_role, TargetedJudgeConfig,
        ("criteria_annotation", *QUESTION_DEPS), _targeted(tj.BRIDGE, "criteria_annotation", cr.KEPT),
    ),
    (
        tj.LANGUAGE.stage, tj.LANGUAGE.task, lambda r: r.language_judge_role, TargetedJudgeConfig,
        ("bridge_judge", *QUESTION_DEPS), _targeted(tj.LANGUAGE, "bridge_judge", tj.KEPT),
    ),
    (
        tc.PUBLISHABILITY_STAGE, tc.PUBLISHABILITY_TASK, lambda r: r.publishability_role, TrainCheckConfig,
        ("language_judge", *TRAIN_DEPS),
        _train_check(_publishability, "language_judge", tc.PUBLISHABILITY_VERDICTS),
    ),
    (
        tc.DESCRIPTOR_STAGE, tc.DESCRIPTOR_TASK, lambda r: r.descriptor_check_role, TrainCheckConfig,
        ("publishability_score", *TRAIN_DEPS),
        _train_check(_descriptor, "publishability_score", tc.DESCRIPTOR.verdicts),
    ),
)  # fmt: skip
first_hop, criteria_annotation, bridge_judge, language_judge, publishability_score, descriptor_check = (
    judged_asset(
        JudgedStage(
            name=name,
            description=DESCRIPTIONS[name],
            task=task,
            role=role,
            config=config,
            reads=deps,
            judge=judge,
        )
    )
    for name, task, role, config, deps, judge in JUDGES
)


@multihop_asset(code_version="1", deps=["first_hop", "multihop_questions"])
def mechanical_rules(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """Year answers with exactly one year; no question naming the document (patterns per language)."""
    partition = context.partition_key
    passed = fs.kept_ids(store, partition, "first_hop", fh.LEADS_TO_B)
    rows = [q for q in questions(store, partition) if q["id"] in passed]
    table = fs.mechanical_verdicts(rows, snapshot_language(partition))
    path = store.write(table, partition, "mechanical_rules")
    verdicts = table["verdict"].to_pylist()
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


def subset_check_result(
    store: TableReader,
    key: str,
    asset: str,
    parent_asset: str = "multihop_questions",
    own_rows_allowed: bool = False,
) -> dg.AssetCheckResult:
    """Whether ``asset``'s rows are rows of ``parent_asset``, same split, unchanged, no duplicates;
    ``own_rows_allowed``: only the rows whose id ``parent_asset`` has must be its rows."""
    failures, checked = fs.subset_failures(store, key, asset, parent_asset, own_rows_allowed)
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
        failures = r.metadata[FAILURES].value
        return check_result(
            asset_key=asset, check_name=self.name, passed=r.passed, failures=failures, partition=partition,
            metadata=r.metadata,
        )  # fmt: skip


def subset_check(config: published_configs.PublishedConfig) -> SubsetCheck:
    """A filtered config's blocking check against its parent, named after the parent."""
    parent = published_configs.by_name(config.parent or "")
    return SubsetCheck(
        fs.subset_check_name(config), parent.asset, config.check_description, config.own_rows_allowed
    )


def config_asset(config: published_configs.PublishedConfig) -> dg.AssetsDefinition:
    """A filtered configuration: the rows of ``default`` whose id its filters keep (``DECIDERS``),
    unchanged (byte for byte, split by split), and ``provenance/verdicts.parquet`` with every filter's
    verdict; a blocking check of its rows against its parent, computed as it is written. Its deps
    (every filter's verdicts, the questions, the parent's rows) are also the only tables the
    decision and the check may read (``defs.wiring``).

    Raises:
        KeyError: no decider for the config's filters.
    """
    name, decide, check = config.asset, fs.decider(config), subset_check(config)
    parent = published_configs.by_name(config.parent or "")

    @multihop_asset(
        name=name,
        description=config.asset_description,
        code_version=config.code_version,
        deps=reads(*fs.config_inputs(config, check.parent)),
        check_specs=[check.spec(name)],
    )
    def _asset(
        context: dg.AssetExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
    ) -> dg.MaterializeResult:
        partition = context.partition_key
        inputs = declared_inputs(context, store)
        kept, provenance, funnel = decide(inputs, partition, parent.name)
        topics = _topics(store, snapshots, partition)
        parents = fs.split_tables(inputs, partition, QUESTIONS)
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
        abstracts = fs.split_tables(store, partition, "abstracts")
        schema = next(iter(abstracts.values())).schema
        fs.check_corpus_columns(recipe.corpus_columns, schema.names)
        for split, qs in fs.split_tables(store, partition, questions).items():
            sub, roles[split] = fs.corpus_split(qs, abstracts[split], recipe.corpus_columns)
            paths[split] = store.write(sub, partition, name, split)
            rows[split] = sub.num_rows
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
