"""card.filter_sections counts in DuckDB; this checks it against the former Python-rows code,
kept here as the reference, on a generated verdict table (criteria, topics, ties, non-ASCII)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets.release import card
from ragsft_assets.table_stats import markdown_table

CONFIG = "my_filtered"  # no shipped config of that name: no card note on either side


def _reference(verdicts: Path, kept_files: Sequence[Path]) -> list[str]:
    """The Python-rows implementation filter_sections had before (one config, no note)."""
    table = pq.read_table(verdicts)
    data = table.select([c for c in ("id", "filter", "verdict", "kept", "topic") if c in table.schema.names])
    data = data.to_pylist()
    counts: dict[tuple[str, str, bool], int] = {}
    order: dict[str, int] = {}
    for r in data:
        order.setdefault(r["filter"], len(order))
        counts[(r["filter"], r["verdict"], r["kept"])] = (
            counts.get((r["filter"], r["verdict"], r["kept"]), 0) + 1
        )
    parts = ["## Filters", "", f"### `{CONFIG}`: verdicts of each filter, in the order they ran", ""]
    rows = [
        (f, v, "kept" if kept else "dropped", n)
        for (f, v, kept), n in sorted(
            counts.items(), key=lambda kv: (order[kv[0][0]], not kv[0][2], kv[0][1])
        )
    ]
    parts += [markdown_table(["filter", "verdict", "outcome", "questions"], rows), ""]
    parts += _criteria(data)
    kept_ids = {i for f in kept_files for i in pq.read_table(f, columns=["id"])["id"].to_pylist()}
    parts += _topics(data, kept_ids)
    return parts


def _criteria(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    per: dict[str, list[int]] = {}
    for r in rows:
        if r["filter"].startswith(card.CRITERIA_FILTER + "/"):
            ft = per.setdefault(r["filter"].split("/", 1)[1], [0, 0])
            ft[0] += r["verdict"] == "fails"
            ft[1] += 1
    overall = [r for r in rows if r["filter"] == card.CRITERIA_FILTER]
    if not overall:
        return []
    skipped = sum(r["verdict"] == card.NOT_ANNOTATED for r in overall)
    table = [(f"`{c}`", f, n, round(f / n, 4) if n else "-") for c, (f, n) in per.items()]
    shares = [
        "Share of failures per criterion (of the annotated questions; a question can fail several):",
        "",
        markdown_table(["criterion", "fails", "annotated", "failure share"], table),
        "",
    ]
    return [
        *(shares if table else []),
        f"{skipped} of {len(overall)} questions were never annotated (`not_annotated`: interrupted run, "
        "budget, failed call or unreadable reply): excluded from the config and not counted as rejected.",
        "",
    ]


def _topics(rows: Sequence[Mapping[str, Any]], kept_ids: set[str]) -> list[str]:
    topic_of = {r["id"]: r.get("topic") for r in rows}
    seen: dict[str, list[int]] = {}
    for qid, topic in topic_of.items():
        if topic is None:
            continue
        kt = seen.setdefault(topic, [0, 0])
        kt[0] += qid in kept_ids
        kt[1] += 1
    if not seen:
        return ["Keep rate by topic: no topic categories are known for this snapshot.", ""]
    unknown = sum(t is None for t in topic_of.values())
    table = [(t, k, n, round(k / n, 4)) for t, (k, n) in sorted(seen.items())]
    return [
        "Keep rate by topic (the bridge document's category):",
        "",
        markdown_table(["topic", "kept", "questions", "keep rate"], table),
        "",
        *([f"{unknown} questions have no known topic.", ""] if unknown else []),
    ]


def _world(folder: Path, seed: int, with_topic: bool, with_criteria: bool) -> tuple[Path, list[Path]]:
    rng = random.Random(seed)
    filters = ["first_hop", "mechanical_rules", "bridge_judge", "language_judge"]
    criteria = ["correct_answer", "bridge_in_a", "terminal_in_b", "both_needed", "clear", "minimal"]
    verdicts = ["leads_to_b", "other_entity", "Été_incertain", "several_entities", "unreadable", "année"]
    topics = ["Géographie", "histoire", "Sport", "Zoologie", None]
    rows: list[dict[str, Any]] = []
    kept: list[str] = []
    for q in range(300):
        qid = f"q{q:04d}-é" if q % 7 == 0 else f"q{q:04d}"
        topic = rng.choice(topics)
        seen = filters[: rng.randint(1, len(filters))]
        if with_criteria:
            seen = [*seen, card.CRITERIA_FILTER, *(f"{card.CRITERIA_FILTER}/{c}" for c in criteria)]
        for f in rng.sample(seen, len(seen)):  # first appearances in a shuffled order
            if f == card.CRITERIA_FILTER:
                v = rng.choice(["kept", card.NOT_ANNOTATED, "fails"])
            elif f.startswith(card.CRITERIA_FILTER + "/"):
                v = rng.choice(["holds", "fails"])
            else:
                v = rng.choice(verdicts)
            row = {"id": qid, "filter": f, "verdict": v, "kept": v in ("leads_to_b", "holds", "kept")}
            if with_topic:  # a few questions change topic between rows: the last row's counts
                row["topic"] = rng.choice(topics) if q % 5 == 0 else topic
            rows.append(row)
        if rng.random() < 0.4:
            kept.append(qid)
    path = folder / "provenance" / CONFIG / "verdicts.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=97)  # several row groups
    split_files = []
    for k, part in enumerate((kept[::2], kept[1::2])):
        f = folder / "data" / CONFIG / f"part-{k}.parquet"
        f.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array(part, pa.string())}), f)
        split_files.append(f)
    return path, split_files


@pytest.mark.parametrize(
    ("seed", "with_topic", "with_criteria"),
    [(1, True, True), (2, False, True), (3, True, False), (4, False, False)],
)
def test_filter_sections_counts_as_the_python_rows_did(
    tmp_path: Path, seed: int, with_topic: bool, with_criteria: bool
) -> None:
    verdicts, split_files = _world(tmp_path, seed, with_topic, with_criteria)
    files = {CONFIG: {f"split{k}": str(f.relative_to(tmp_path)) for k, f in enumerate(split_files)}}
    got = card.filter_sections(tmp_path, files)
    assert got == _reference(verdicts, split_files)
    assert ("Keep rate by topic (the bridge" in "\n".join(got)) is with_topic
    assert ("questions were never annotated" in "\n".join(got)) is with_criteria
