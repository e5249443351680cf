"""The filter assets' steps over stored tables (Dagster-free): what ``defs/multihop/filters.py`` calls
between reading its declared inputs and writing Parquet, ledger rows and metadata.

The judges' items (a question with its A and B), the mechanical rules' verdicts, how a filtered
config's filters decide its rows (:data:`DECIDERS`) and their provenance, a config's inputs and its
subset check's failures, and a corpus config's rows per split. ``store`` is any
:class:`~ragsft_assets.table_reader.TableReader` (the asset's declared inputs in production).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets import published_configs
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import filter_configs as fc
from ragsft_assets.multihop import first_hop as fh
from ragsft_assets.multihop import mechanical_rules as mr
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.multihop import train_checks as tc
from ragsft_assets.storage import SPLITS
from ragsft_assets.table_reader import TableReader

QUESTIONS = "multihop_questions"  # the production's questions: every filtered config's rows are some of them
MECHANICAL_SCHEMA = pa.schema([("id", pa.string()), ("verdict", pa.string())])

Provenance = dict[str, list[tuple[str, str, bool, str | None]]]
# What a filtered config's filters decided: the kept ids, every filter's verdicts, the funnel.
Decided = tuple[set[str], Provenance, dict[str, int]]


def made_by(stage: str) -> published_configs.PublishedConfig:
    """The filtered config whose filters list ``stage`` first (the config its verdicts make)."""
    return next(c for c in published_configs.filtered_configs() if stage in c.filters)


def kept_ids(store: TableReader, partition: str, asset: str, verdict: str) -> set[str]:
    """The ids ``asset`` gave ``verdict`` (the questions a filter keeps, for the next one)."""
    return {
        r["id"]
        for r in store.read(partition, asset).select(["id", "verdict"]).to_pylist()
        if r["verdict"] == verdict
    }


# -- the judges' items --------------------------------------------------------------------------


def _pair_fields(
    rows: Iterable[dict[str, Any]],
    docs: Mapping[str, Any],
    drafts: Mapping[str, dict[str, Any]],
    keep: Collection[str] | None = None,
) -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """Each question row (of ``keep`` when given) with its judge item's fields: the question, its
    answer and the full abstracts of A and B, what a person labelling the question sees."""
    out = []
    for q in rows:
        if keep is None or q["id"] in keep:
            d = drafts[q["id"]]
            a, b = docs[d["a_id"]], docs[d["b_id"]]
            out.append((q, (q["id"], q["question"], q["answer"], a.title, a.text, b.title, b.text)))
    return out


def criteria_items(
    rows: list[dict[str, Any]], docs: dict[str, Any], drafts: dict[str, dict[str, Any]]
) -> list[cr.CriteriaItem]:
    """Six-criteria items of question rows (``id``, ``question``, ``answer``): the question, its
    answer and the full abstracts of A and B, what a person labelling the question sees."""
    return [cr.CriteriaItem(*f) for _, f in _pair_fields(rows, docs, drafts)]


def targeted_items(
    rows: list[dict[str, Any]], docs: dict[str, Any], drafts: dict[str, dict[str, Any]], passed: set[str]
) -> list[tj.JudgeItem]:
    """A targeted judge's items: the questions of ``passed``, with A and B."""
    return [tj.JudgeItem(*f) for _, f in _pair_fields(rows, docs, drafts, passed)]


def first_hop_items(
    rows: list[dict[str, Any]], docs: dict[str, Any], drafts: dict[str, dict[str, Any]]
) -> list[fh.FirstHopItem]:
    """The first-hop judge's items: the question with A alone, B's title and alias (never B's text)."""
    items = []
    for q in rows:
        d = drafts[q["id"]]
        a = docs[d["a_id"]]
        items.append(fh.FirstHopItem(q["id"], q["question"], a.title, a.text, d["b_title"], d["alias"] or ""))
    return items


def train_items(
    store: TableReader,
    partition: str,
    after: str,
    rows: list[dict[str, Any]],
    docs: dict[str, Any],
    drafts: dict[str, dict[str, Any]],
    train_only_splits: Sequence[str],
) -> list[tc.TrainItem]:
    """The questions of the recipe's train-only splits that ``after`` keeps, with the descriptor the
    bridge judge copied."""
    passed = kept_ids(store, partition, after, tj.KEPT)
    split_rows = store.read(partition, QUESTIONS).select(["id", "split"]).to_pylist()
    splits = {r["id"]: r["split"] for r in split_rows}
    descriptors = {
        r["id"]: tc.descriptor_of(r["raw"])
        for r in store.read(partition, "bridge_judge").select(["id", "raw"]).to_pylist()
    }
    train = {i for i in passed if splits.get(i) in train_only_splits}
    return [
        tc.TrainItem(*f, descriptors.get(q["id"], "")) for q, f in _pair_fields(rows, docs, drafts, train)
    ]


def criteria_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of the annotator's verdicts and each criterion's failure share among the annotated;
    not_annotated is reported apart, never counted as rejected."""
    counts = Counter(r["verdict"] for r in rows)
    annotated = [r for r in rows if r["verdict"] != cr.NOT_ANNOTATED]
    return {
        "questions": len(rows),
        "annotated": len(annotated),
        "rejected": counts.get(cr.FAILS_CRITERIA, 0),
        "not_annotated": counts.get(cr.NOT_ANNOTATED, 0),
        **{
            f"failure_share/{c}": round(sum(not r[c] for r in annotated) / len(annotated), 4)
            if annotated
            else 0.0
            for c in cr.CRITERIA
        },
    }


def mechanical_verdicts(rows: list[dict[str, Any]], lang: str) -> pa.Table:
    """``id, verdict`` of the mechanical rules on question rows (``id``, ``question``, ``answer``)."""
    verdicts = [mr.rule_verdict(q["question"], q["answer"], lang) for q in rows]
    return pa.table({"id": [q["id"] for q in rows], "verdict": verdicts}, schema=MECHANICAL_SCHEMA)


# -- the configurations ---------------------------------------------------------------------------


def split_tables(store: TableReader, partition: str, asset: str) -> dict[str, pa.Table]:
    """``asset``'s split files by split name (its other files, such as provenance, left out)."""
    return {
        f.stem: store.read(partition, asset, f.stem)
        for f in store.files(partition, asset)
        if f.stem in SPLITS
    }


def _verdict_rows(rows: list[dict[str, Any]], kept: str, reason: str | None) -> list[tuple[Any, ...]]:
    """Provenance rows of one filter: id, verdict, whether it is ``kept``, the ``reason`` column."""
    return [(r["id"], r["verdict"], r["verdict"] == kept, r[reason] if reason else None) for r in rows]


def criteria_provenance(rows: list[dict[str, Any]]) -> Provenance:
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


def first_hop_and_rules(store: TableReader, partition: str, parent: str) -> Decided:
    fh_rows = store.read(partition, "first_hop").select(["id", "verdict", "entity"]).to_pylist()
    mech_rows = store.read(partition, "mechanical_rules").to_pylist()
    kept = {r["id"] for r in mech_rows if r["verdict"] == mr.KEPT}
    provenance: Provenance = {
        "first_hop": _verdict_rows(fh_rows, fh.LEADS_TO_B, "entity"),
        "mechanical_rules": _verdict_rows(mech_rows, mr.KEPT, None),
    }
    funnel = {
        parent: len(fh_rows),
        "first_hop kept": sum(r["verdict"] == fh.LEADS_TO_B for r in fh_rows),
        "mechanical_rules kept": len(kept),
    }
    return kept, provenance, funnel


def criteria_kept(store: TableReader, partition: str, parent: str) -> Decided:
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
    return kept, criteria_provenance(rows), funnel


def targeted_and_train_checks(store: TableReader, partition: str, parent: str) -> Decided:
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
        **criteria_provenance(crit),
        "bridge_judge": _verdict_rows(bridge, tj.KEPT, "analysis"),
        "language_judge": _verdict_rows(lang, tj.KEPT, "analysis"),
        tc.PUBLISHABILITY_STAGE: [
            (r["id"], r["verdict"], r["verdict"] == tc.KEPT, None if r["score"] is None else str(r["score"]))
            for r in score
        ],
        tc.DESCRIPTOR_STAGE: _verdict_rows(desc, tc.KEPT, "analysis"),
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


# How the verdicts of a filtered config's filters (its entry's ``filters``) decide its rows; a config
# whose filters have none here fails at import with the list.
DECIDERS: dict[tuple[str, ...], Callable[[TableReader, str, str], Decided]] = {
    ("first_hop", "mechanical_rules"): first_hop_and_rules,
    ("criteria_annotation",): criteria_kept,
    (
        tj.BRIDGE.stage,
        tj.LANGUAGE.stage,
        tc.PUBLISHABILITY_STAGE,
        tc.DESCRIPTOR_STAGE,
    ): targeted_and_train_checks,
}


def decider(config: published_configs.PublishedConfig) -> Callable[[TableReader, str, str], Decided]:
    """How ``config``'s filters decide its rows.

    Raises:
        KeyError: no decider for the config's filters.
    """
    if config.filters not in DECIDERS:
        raise KeyError(
            f"published config {config.name!r}: no decider for filters {config.filters}; "
            f"filters.DECIDERS has {sorted(DECIDERS)}"
        )
    return DECIDERS[config.filters]


def filter_chain(config: published_configs.PublishedConfig) -> tuple[str, ...]:
    """The filters of ``config``'s ancestors, then its own, in the order they ran."""
    parent = published_configs.by_name(config.parent) if config.parent else None
    return (*(filter_chain(parent) if parent else ()), *config.filters)


def subset_check_name(config: published_configs.PublishedConfig) -> str:
    """A filtered config's blocking check's name, after its parent."""
    parent = published_configs.by_name(config.parent or "")
    return (
        f"matches_{parent.name}_on_shared_ids" if config.own_rows_allowed else f"is_subset_of_{parent.name}"
    )


def config_inputs(config: published_configs.PublishedConfig, check_parent: str) -> list[str]:
    """What a filtered config reads: every filter's verdicts (last first), the questions, and the
    parent its check compares with."""
    return [
        *reversed(filter_chain(config)),
        QUESTIONS,
        *([check_parent] if check_parent != QUESTIONS else []),
    ]


def subset_failures(
    store: TableReader, partition: str, asset: str, parent_asset: str, own_rows_allowed: bool
) -> tuple[list[tuple[str, str]], int]:
    """Why ``asset``'s rows are not rows of ``parent_asset`` (same split, unchanged, no duplicates;
    ``own_rows_allowed``: only the rows whose id ``parent_asset`` has), and how many rows were checked."""
    parents = split_tables(store, partition, parent_asset)
    failures: list[tuple[str, str]] = []
    checked = 0
    for split, child in split_tables(store, partition, asset).items():
        checked += child.num_rows
        parent = parents.get(split)
        if parent is None:
            failures.append(("split_not_in_parent", split))
            continue
        check = fc.shared_id_violations if own_rows_allowed else fc.subset_violations
        failures += check(child, parent)
    return failures, checked


def check_corpus_columns(columns: Sequence[str], available: Sequence[str]) -> None:
    """Raises ValueError when a recipe's ``corpus_columns`` are not columns of abstracts."""
    missing = sorted(set(columns) - set(available))
    if missing:
        raise ValueError(f"corpus_columns {missing} are not columns of abstracts")


def corpus_split(
    questions: pa.Table, abstracts: pa.Table, columns: Sequence[str]
) -> tuple[pa.Table, dict[str, int]]:
    """One split of a corpus config: the abstracts in the questions' contexts (golds and
    distractors) with ``columns``, and how many are gold or distractor-only."""
    titles = {t for ctx in questions["context"].to_pylist() for t in ctx["title"]}
    golds = {t for sf in questions["supporting_facts"].to_pylist() for t in sf["title"]}
    sub = abstracts.filter(pc.is_in(abstracts["title"], value_set=pa.array(sorted(titles), pa.string())))
    sub = sub.select(list(columns))
    gold = sum(t in golds for t in sub["title"].to_pylist())
    return sub, {"gold": gold, "distractor_only": sub.num_rows - gold}
