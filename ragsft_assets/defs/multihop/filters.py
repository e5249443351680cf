"""Filter assets on the released questions (issue 13): ``first_hop`` then ``mechanical_rules``.

No ``from __future__ import annotations``: Dagster resolves config and resource types at decoration
time. Thin wiring: read the questions of ``default`` (``multihop_questions``) and their drafts, call
the logic of ``ragsft_assets.multihop.first_hop`` / ``mechanical_rules``, write Parquet and ledger
rows (one per question seen, kept or with its reason), return metadata whose funnel adds up.
"""

from collections import Counter
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.defs.metadata import funnel_metadata, model_metadata, table_metadata
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.ledger import Decision, ledger_table
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import filter_configs as fc
from ragsft_assets.multihop import first_hop as fh
from ragsft_assets.multihop import generation
from ragsft_assets.multihop import mechanical_rules as mr
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.multihop import topics as tp
from ragsft_assets.prompts import load_prompt, templates_version
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS, write_parquet

GROUP = "multihop"
# The filters decide membership of the filtered configurations, not of ``default``: their ledger rows
# carry the configuration's product so a question of ``default`` keeps its final verdict there.
PRODUCT = f"{generation.PRODUCT}_filtered"
KEPT = "kept"
MECHANICAL_SCHEMA = pa.schema([("id", pa.string()), ("verdict", pa.string())])


def _ledger(store: ArtifactStore, partition: str, stage: str, decisions: list[Decision]) -> None:
    store.write_ledger(ledger_table(partition, PRODUCT, stage, decisions), partition, stage)


def _questions(store: ArtifactStore, partition: str) -> list[dict[str, Any]]:
    if not store.files(partition, "multihop_questions"):
        return []
    return store.read(partition, "multihop_questions").select(["id", "question", "answer"]).to_pylist()


def role_model(stage: str, role: str, **models: ChatModel) -> ChatModel:
    """The model bound to the LLM ``role`` a stage's run config names, among the ones it accepts.

    Raises:
        ValueError: a role the stage does not take (the message lists those it does).
    """
    if role not in models:
        raise ValueError(f"{stage} role {role!r} is not one of {sorted(models)}")
    return models[role]


def pair_documents(store: ArtifactStore, partition: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The partition's abstracts by id and its question drafts by question id (A and B of each question)."""
    docs = generation.docs_by_id(store.read(partition, "abstracts"))
    drafts = {d["id"]: d for d in store.read(partition, "question_drafts").to_pylist()}
    return docs, drafts


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


class FirstHopConfig(dg.Config):
    role: str = "judge"  # the LLM role of the first-hop judge: "judge" (default) or "annotator"


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version=f"1-{templates_version((fh.TASK,))}",
    kinds={"parquet"},
    deps=["multihop_questions", "question_drafts", "abstracts"],
    pool="gpu",
)
def first_hop(
    context: dg.AssetExecutionContext,
    config: FirstHopConfig,
    store: ArtifactStore,
    judge: dg.ResourceParam[ChatModel],
    annotator: dg.ResourceParam[ChatModel],
) -> dg.MaterializeResult:
    """The fifth ablation: the judge reads A alone and names the entity the question points to."""
    model = role_model("first_hop", config.role, judge=judge, annotator=annotator)
    partition = context.partition_key
    lang = snapshot_language(partition)
    docs, drafts = pair_documents(store, partition)
    items = []
    for q in _questions(store, partition):
        d = drafts[q["id"]]
        a = docs[d["a_id"]]
        items.append(fh.FirstHopItem(q["id"], q["question"], a.title, a.text, d["b_title"], d["alias"] or ""))
    template = load_prompt(fh.TASK, lang)
    table = fh.run_first_hop(items, model, template, log=context.log)
    path = store.write(table, partition, "first_hop")
    verdicts = table.column("verdict").to_pylist()
    _ledger(
        store,
        partition,
        "first_hop",
        [
            Decision(i, KEPT if v == fh.LEADS_TO_B else "dropped", v, None, [k])
            for i, v, k in zip(
                table.column("id").to_pylist(), verdicts, table.column("cache_key").to_pylist(), strict=True
            )
        ],
    )
    counts = Counter(verdicts)
    md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "entity", "raw"])
    md.update(
        {
            "judged": len(items),
            "kept": counts.get(fh.LEADS_TO_B, 0),
            **funnel_metadata({v: counts.get(v, 0) for v in fh.VERDICTS if v != fh.LEADS_TO_B}, "rejections"),
            **model_metadata(model, config.role),
            "first_hop/role": config.role,
            "judge/prompt": f"{template.name}@{template.version}",
        }
    )
    return dg.MaterializeResult(metadata=md)


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="1",
    kinds={"parquet"},
    deps=["first_hop", "multihop_questions"],
)
def mechanical_rules(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """Year answers with exactly one year; no question naming the document (patterns per language)."""
    partition = context.partition_key
    lang = snapshot_language(partition)
    passed = {
        r["id"]
        for r in store.read(partition, "first_hop").select(["id", "verdict"]).to_pylist()
        if r["verdict"] == fh.LEADS_TO_B
    }
    rows = [q for q in _questions(store, partition) if q["id"] in passed]
    verdicts = [mr.rule_verdict(q["question"], q["answer"], lang) for q in rows]
    table = pa.table({"id": [q["id"] for q in rows], "verdict": verdicts}, schema=MECHANICAL_SCHEMA)
    path = store.write(table, partition, "mechanical_rules")
    _ledger(
        store,
        partition,
        "mechanical_rules",
        [
            Decision(q["id"], KEPT if v == mr.KEPT else "dropped", v)
            for q, v in zip(rows, verdicts, strict=True)
        ],
    )
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


def _topics(store: ArtifactStore, snapshots: SnapshotSource, partition: str) -> dict[str, str]:
    """Question id -> topic (its bridge's category) from the snapshot's topic file; {} without one."""
    path = tp.find_topic_file(snapshots.folder(partition), snapshots.config(partition).get("topics_file", ""))
    if path is None:
        return {}
    drafts = store.read(partition, "question_drafts").select(["id", "b_title"]).to_pylist()
    return tp.question_topics({d["id"]: d["b_title"] for d in drafts}, tp.read_topics(path))


def _topic_metadata(topics: dict[str, str], ids: list[str]) -> dict[str, object]:
    return {"questions_with_topic": sum(i in topics for i in ids), "topics": len(set(topics.values()))}


FILTERED_ASSET = "multihop_filtered"
# Beside the split files, in a subfolder so that readers of the asset's split files never see it;
# the release copies it to provenance/<config>/verdicts.parquet.
VERDICTS_FILE = "provenance/verdicts.parquet"


def _split_tables(store: ArtifactStore, partition: str, asset: str) -> dict[str, pa.Table]:
    return {
        f.stem: store.read(partition, asset, f.stem)
        for f in store.files(partition, asset)
        if f.stem in SPLITS
    }


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="2",
    kinds={"parquet"},
    deps=["mechanical_rules", "first_hop", "multihop_questions"],
)
def multihop_filtered(
    context: dg.AssetExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.MaterializeResult:
    """The ``filtered`` configuration: the rows of ``default`` that first_hop and mechanical_rules keep.

    Rows are the parent's, unchanged (byte-identical row for row); ``provenance/verdicts.parquet``
    holds each question's verdict from every filter that saw it.
    """
    partition = context.partition_key
    fh_rows = store.read(partition, "first_hop").select(["id", "verdict", "entity"]).to_pylist()
    mech_rows = store.read(partition, "mechanical_rules").to_pylist()
    kept = {r["id"] for r in mech_rows if r["verdict"] == mr.KEPT}
    paths, rows = {}, {}
    parents = _split_tables(store, partition, "multihop_questions")
    for split, parent in parents.items():
        child = fc.subset_rows(parent, kept)
        paths[split] = store.write(child, partition, FILTERED_ASSET, split)
        rows[split] = child.num_rows
    topics = _topics(store, snapshots, partition)
    verdicts = fc.verdicts_table(
        {
            "first_hop": [
                (r["id"], r["verdict"], r["verdict"] == fh.LEADS_TO_B, r["entity"]) for r in fh_rows
            ],
            "mechanical_rules": [(r["id"], r["verdict"], r["verdict"] == mr.KEPT, None) for r in mech_rows],
        },
        topics,
    )
    write_parquet(verdicts, store.root / partition / FILTERED_ASSET / VERDICTS_FILE)
    md = table_metadata([paths[s] for s in SPLITS if s in paths], next(iter(parents.values())).schema)
    md.update(
        {
            "parent": "multihop_questions",
            "parent_rows": len(fh_rows),
            **_topic_metadata(topics, [r["id"] for r in fh_rows]),
            "rows": sum(rows.values()),
            **{f"rows/{s}": n for s, n in sorted(rows.items())},
            **funnel_metadata(
                {
                    "default": len(fh_rows),
                    "first_hop kept": sum(r["verdict"] == fh.LEADS_TO_B for r in fh_rows),
                    "mechanical_rules kept": len(kept),
                },
                "funnel",
            ),
        }
    )
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=multihop_filtered, blocking=True, partitions_def=snapshot_partitions)
def multihop_filtered_is_subset_of_default(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Every row of ``filtered`` is a row of ``default``, same split, byte-identical; no duplicates."""
    return _subset_check(store, context.partition_key, FILTERED_ASSET)


class CriteriaConfig(dg.Config):
    role: str = "annotator"  # the LLM role that annotates: "annotator" (default) or "judge"
    max_questions: int = -1  # the annotation budget; questions past it are not_annotated (-1: all)


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version=f"1-{templates_version((cr.TASK,))}",
    kinds={"parquet"},
    deps=["multihop_questions", "question_drafts", "abstracts"],
    pool="gpu",
)
def criteria_annotation(
    context: dg.AssetExecutionContext,
    config: CriteriaConfig,
    store: ArtifactStore,
    annotator: dg.ResourceParam[ChatModel],
    judge: dg.ResourceParam[ChatModel],
) -> dg.MaterializeResult:
    """Six binary criteria per question of ``default``; all six must hold for ``filtered_qwen``."""
    model = role_model("criteria_annotation", config.role, annotator=annotator, judge=judge)
    partition = context.partition_key
    lang = snapshot_language(partition)
    items = criteria_items(_questions(store, partition), *pair_documents(store, partition))
    template = load_prompt(cr.TASK, lang)
    budget = None if config.max_questions < 0 else config.max_questions
    table = cr.run_criteria(items, model, template, budget, log=context.log)
    path = store.write(table, partition, "criteria_annotation")
    rows = table.to_pylist()
    _ledger(
        store,
        partition,
        "criteria_annotation",
        [
            Decision(
                r["id"],
                KEPT if r["verdict"] == cr.KEPT else "dropped",
                r["verdict"] if r["verdict"] != cr.FAILS_CRITERIA else ",".join(r["failed"]),
                None,
                [r["cache_key"]] if r["cache_key"] else [],
            )
            for r in rows
        ],
    )
    counts = Counter(r["verdict"] for r in rows)
    annotated = [r for r in rows if r["verdict"] != cr.NOT_ANNOTATED]
    md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "failed"])
    md.update(
        {
            "questions": len(rows),
            "annotated": len(annotated),
            "kept": counts.get(cr.KEPT, 0),
            "rejected": counts.get(cr.FAILS_CRITERIA, 0),
            "not_annotated": counts.get(cr.NOT_ANNOTATED, 0),  # reported apart, never counted as rejected
            **{
                f"failure_share/{c}": round(sum(not r[c] for r in annotated) / len(annotated), 4)
                if annotated
                else 0.0
                for c in cr.CRITERIA
            },
            **model_metadata(model, config.role),
            "annotator/role": config.role,
            "annotator/prompt": f"{template.name}@{template.version}",
        }
    )
    return dg.MaterializeResult(metadata=md)


FILTERED_QWEN_ASSET = "multihop_filtered_qwen"


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="2",
    kinds={"parquet"},
    deps=["criteria_annotation", "multihop_questions"],
)
def multihop_filtered_qwen(
    context: dg.AssetExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.MaterializeResult:
    """The ``filtered_qwen`` configuration: the rows of ``default`` whose six criteria all hold.

    Same production as ``default`` (the card's comes from a larger, later one). Provenance: the
    overall verdict and one row per criterion for every annotated question.
    """
    partition = context.partition_key
    rows = store.read(partition, "criteria_annotation").to_pylist()
    kept = {r["id"] for r in rows if r["verdict"] == cr.KEPT}
    provenance = _criteria_provenance(rows)
    topics = _topics(store, snapshots, partition)
    md = _write_config(store, partition, FILTERED_QWEN_ASSET, kept, fc.verdicts_table(provenance, topics))
    md.update(_topic_metadata(topics, [r["id"] for r in rows]))
    counts = Counter(r["verdict"] for r in rows)
    md.update(
        funnel_metadata(
            {
                "default": len(rows),
                "not_annotated (excluded, not rejected)": counts.get(cr.NOT_ANNOTATED, 0),
                "annotated": len(rows) - counts.get(cr.NOT_ANNOTATED, 0),
                "fails_criteria": counts.get(cr.FAILS_CRITERIA, 0),
                "kept": len(kept),
            },
            "funnel",
        )
    )
    return dg.MaterializeResult(metadata=md)


def _criteria_provenance(rows: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, bool, str | None]]]:
    """Provenance of criteria_annotation: the overall verdict, then one row per criterion per annotated question."""
    provenance: dict[str, list[tuple[str, str, bool, str | None]]] = {
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


def _write_config(
    store: ArtifactStore, partition: str, asset: str, kept: set[str], verdicts: pa.Table
) -> dict[str, object]:
    """Write the parent's kept rows split by split and the verdicts; returns the table metadata."""
    parents = _split_tables(store, partition, "multihop_questions")
    paths, rows = {}, {}
    for split, parent in parents.items():
        child = fc.subset_rows(parent, kept)
        paths[split] = store.write(child, partition, asset, split)
        rows[split] = child.num_rows
    write_parquet(verdicts, store.root / partition / asset / VERDICTS_FILE)
    md = table_metadata([paths[s] for s in SPLITS if s in paths], next(iter(parents.values())).schema)
    md.update({"parent": "multihop_questions", "rows": sum(rows.values())})
    md.update({f"rows/{s}": n for s, n in sorted(rows.items())})
    return md


def _subset_check(
    store: ArtifactStore, key: str, asset: str, parent_asset: str = "multihop_questions"
) -> dg.AssetCheckResult:
    parents = _split_tables(store, key, parent_asset)
    failures: list[tuple[str, str]] = []
    checked = 0
    for split, child in _split_tables(store, key, asset).items():
        checked += child.num_rows
        parent = parents.get(split)
        if parent is None:
            failures.append(("split_not_in_parent", split))
            continue
        failures += fc.subset_violations(child, parent)
    return dg.AssetCheckResult(
        passed=not failures,
        metadata={
            "failures": len(failures),
            "examples": dg.MetadataValue.json([list(f) for f in failures[:5]]),
            "checked": f"{checked} rows",
            "parent": parent_asset,
        },
    )


@dg.asset_check(asset=multihop_filtered_qwen, blocking=True, partitions_def=snapshot_partitions)
def multihop_filtered_qwen_is_subset_of_default(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Every row of ``filtered_qwen`` is a row of ``default``, same split, byte-identical; no duplicates."""
    return _subset_check(store, context.partition_key, FILTERED_QWEN_ASSET)


class TargetedJudgeConfig(dg.Config):
    role: str = "judge"  # the LLM role of this judge: "judge" (default) or "annotator"


def _judge_asset(spec: tj.Judge, after: str, kept_of: str):
    """The asset of one targeted judge, run on the questions ``after`` keeps (verdict ``kept_of``)."""

    @dg.asset(
        name=spec.stage,
        partitions_def=snapshot_partitions,
        group_name=GROUP,
        code_version=f"1-{templates_version((spec.task,))}",
        kinds={"parquet"},
        deps=[after, "multihop_questions", "question_drafts", "abstracts"],
        pool="gpu",
    )
    def _asset(
        context: dg.AssetExecutionContext,
        config: TargetedJudgeConfig,
        store: ArtifactStore,
        judge: dg.ResourceParam[ChatModel],
        annotator: dg.ResourceParam[ChatModel],
    ) -> dg.MaterializeResult:
        model = role_model(spec.stage, config.role, judge=judge, annotator=annotator)
        partition = context.partition_key
        lang = snapshot_language(partition)
        passed = {r["id"] for r in store.read(partition, after).to_pylist() if r["verdict"] == kept_of}
        docs, drafts = pair_documents(store, partition)
        items = []
        for q in _questions(store, partition):
            if q["id"] not in passed:
                continue
            d = drafts[q["id"]]
            a, b = docs[d["a_id"]], docs[d["b_id"]]
            items.append(tj.JudgeItem(q["id"], q["question"], q["answer"], a.title, a.text, b.title, b.text))
        template = load_prompt(spec.task, lang)
        table = tj.run_judge(spec, items, model, template, log=context.log)
        path = store.write(table, partition, spec.stage)
        rows = table.to_pylist()
        _ledger(
            store,
            partition,
            spec.stage,
            [
                Decision(
                    r["id"],
                    KEPT if r["verdict"] == tj.KEPT else "dropped",
                    r["verdict"],
                    None,
                    [r["cache_key"]],
                )
                for r in rows
            ],
        )
        counts = Counter(r["verdict"] for r in rows)
        md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "analysis"])
        md.update(
            {
                "judged": len(rows),
                "kept": counts.get(tj.KEPT, 0),
                **funnel_metadata({v: counts.get(v, 0) for v in spec.verdicts if v != tj.KEPT}, "rejections"),
                **model_metadata(model, config.role),
                f"{spec.stage}/role": config.role,
                f"{spec.stage}/prompt": f"{template.name}@{template.version}",
            }
        )
        return dg.MaterializeResult(metadata=md)

    return _asset


bridge_judge = _judge_asset(tj.BRIDGE, "criteria_annotation", cr.KEPT)
language_judge = _judge_asset(tj.LANGUAGE, "bridge_judge", tj.KEPT)
FILTERED_QWEN_V2_ASSET = "multihop_filtered_qwen_v2"
CORPUS_V2_ASSET = "corpus_filtered_qwen_v2"


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="3",
    kinds={"parquet"},
    deps=["language_judge", "bridge_judge", "criteria_annotation", "multihop_questions", FILTERED_QWEN_ASSET],
)
def multihop_filtered_qwen_v2(
    context: dg.AssetExecutionContext, store: ArtifactStore, snapshots: SnapshotSource
) -> dg.MaterializeResult:
    """``filtered_qwen_v2``: the rows of ``filtered_qwen`` that bridge_judge then language_judge keep.

    The card's two train-only steps (a publishability score, a descriptor check) are not described
    there and are left out.
    """
    partition = context.partition_key
    crit = store.read(partition, "criteria_annotation").to_pylist()
    bridge = store.read(partition, "bridge_judge").to_pylist()
    lang = store.read(partition, "language_judge").to_pylist()
    kept = {r["id"] for r in lang if r["verdict"] == tj.KEPT}
    provenance = {
        **_criteria_provenance(crit),
        "bridge_judge": [(r["id"], r["verdict"], r["verdict"] == tj.KEPT, r["analysis"]) for r in bridge],
        "language_judge": [(r["id"], r["verdict"], r["verdict"] == tj.KEPT, r["analysis"]) for r in lang],
    }
    topics = _topics(store, snapshots, partition)
    md = _write_config(store, partition, FILTERED_QWEN_V2_ASSET, kept, fc.verdicts_table(provenance, topics))
    md.update(_topic_metadata(topics, [r["id"] for r in crit]))
    md.update(
        funnel_metadata(
            {
                "filtered_qwen": sum(r["verdict"] == cr.KEPT for r in crit),
                "bridge_judge kept": sum(r["verdict"] == tj.KEPT for r in bridge),
                "language_judge kept": len(kept),
            },
            "funnel",
        )
    )
    return dg.MaterializeResult(metadata=md)


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="1",
    kinds={"parquet"},
    deps=[FILTERED_QWEN_V2_ASSET, "abstracts"],
)
def corpus_filtered_qwen_v2(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """The abstracts in the contexts (golds and distractors) of ``filtered_qwen_v2``, per split, corpus schema."""
    partition = context.partition_key
    paths, rows = {}, {}
    abstracts = _split_tables(store, partition, "abstracts")
    for split, questions in _split_tables(store, partition, FILTERED_QWEN_V2_ASSET).items():
        titles = {t for ctx in questions["context"].to_pylist() for t in ctx["title"]}
        corpus = abstracts[split]
        sub = corpus.filter(pc.is_in(corpus["title"], value_set=pa.array(sorted(titles), pa.string())))
        paths[split] = store.write(sub, partition, CORPUS_V2_ASSET, split)
        rows[split] = sub.num_rows
    md = table_metadata([paths[s] for s in SPLITS if s in paths], next(iter(abstracts.values())).schema)
    md.update({"rows": sum(rows.values()), **{f"rows/{s}": n for s, n in sorted(rows.items())}})
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=multihop_filtered_qwen_v2, blocking=True, partitions_def=snapshot_partitions)
def multihop_filtered_qwen_v2_is_subset_of_filtered_qwen(
    context: dg.AssetCheckExecutionContext, store: ArtifactStore
) -> dg.AssetCheckResult:
    """Every row of ``filtered_qwen_v2`` is a row of ``filtered_qwen`` (the config it filters), unchanged."""
    return _subset_check(store, context.partition_key, FILTERED_QWEN_V2_ASSET, FILTERED_QWEN_ASSET)


filter_assets = [
    first_hop, mechanical_rules, multihop_filtered, criteria_annotation, multihop_filtered_qwen,
    bridge_judge, language_judge, multihop_filtered_qwen_v2, corpus_filtered_qwen_v2,
]  # fmt: skip
filter_checks = [
    multihop_filtered_is_subset_of_default,
    multihop_filtered_qwen_is_subset_of_default,
    multihop_filtered_qwen_v2_is_subset_of_filtered_qwen,
]
