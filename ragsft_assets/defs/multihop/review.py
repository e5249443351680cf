"""The ``review_labels`` asset: an LLM role labels a blind review sample, six criteria.

No ``from __future__ import annotations``: Dagster resolves config and resource types at decoration
time. The sample is a ``sample.jsonl`` written by ``ragsft review sample``; the labels are JSON lines
``{"id", "valid"}`` beside it, the file a person would write by hand, so ``ragsft agreement`` compares
the two (or the labels of two roles or models) with the sample's key. Group ``review``: no job
selects it, since it needs a sample path in its run config.
"""

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.defs.metadata import file_sha256
from ragsft_assets.defs.multihop.common import RecipeConfig, pair_documents
from ragsft_assets.defs.multihop.filters import criteria_items
from ragsft_assets.defs.multihop.judged import JudgeCall, Judged, JudgedStage, judged_asset
from ragsft_assets.json_lines import parse_json_lines
from ragsft_assets.ledger import Decision
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import review
from ragsft_assets.storage import atomic_write_bytes

GROUP = "review"


class ReviewLabelsConfig(RecipeConfig):
    """The recipe of the annotator's config by default (the config the ``criteria_annotation``
    filter makes: published_configs.py): the six-criteria protocol and its ``criteria_role``
    (annotator; override ``{"criteria_role": "judge"}`` for a second regime)."""

    sample: str  # a sample.jsonl written by `ragsft review sample` for this partition
    out: str | None = None  # the label file; None: labels-<role>.jsonl beside the sample


def read_sample(path: Path) -> list[dict[str, Any]]:
    """The rows of a review sample, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not a JSON object with a string ``id``, ``question`` and ``answer``
            (the message names the file and line), or an id given twice.
    """
    if not path.is_file():
        raise FileNotFoundError(f"review sample {path} not found: write one with `ragsft review sample`")
    rows, seen = [], set()
    for lineno, row in parse_json_lines(path.read_bytes().splitlines(), path):
        if not isinstance(row, dict) or any(
            not isinstance(row.get(k), str) for k in ("id", "question", "answer")
        ):
            raise ValueError(f'{path}:{lineno}: expected a question row {{"id", "question", "answer", ...}}')
        if row["id"] in seen:
            raise ValueError(f"{path}:{lineno}: id {row['id']} appears twice")
        seen.add(row["id"])
        rows.append(row)
    return rows


def _label(run: JudgeCall) -> Judged:
    """Label the sample's questions {id, valid} with the six-criteria protocol, beside the sample."""
    sample_path = Path(run.config.sample).expanduser()
    rows = read_sample(sample_path)
    docs, drafts = pair_documents(run.store, run.partition)
    stray = [r["id"] for r in rows if r["id"] not in drafts]
    if stray:
        raise ValueError(
            f"{len(stray)} questions of {sample_path} are not questions of partition {run.partition!r} "
            f"(e.g. {stray[0]}): was the sample drawn from another partition?"
        )
    # The annotator sees what a person labelling the file sees: the sample's question and answer,
    # and the full abstracts of A and B (the gold paragraphs of the row's context).
    table = cr.run_criteria(criteria_items(rows, docs, drafts), run.model, run.template, log=run.log)
    labels = review.labels_from_criteria([r["id"] for r in rows], table)
    role = run.recipe.criteria_role
    out = Path(run.config.out).expanduser() if run.config.out else sample_path.parent / f"labels-{role}.jsonl"
    atomic_write_bytes(out, b"".join(orjson.dumps(x) + b"\n" for x in labels))
    run.log.info(f"{len(labels)} labels of {len(rows)} sample questions -> {out}")
    counts = Counter(table.column("verdict").to_pylist())
    md = {
        "sample": str(sample_path),
        "sample_sha256": file_sha256(sample_path),
        "labels": str(out),
        "labels_sha256": file_sha256(out),
        "questions": len(rows),
        "valid": counts.get(cr.KEPT, 0),
        "invalid": counts.get(cr.FAILS_CRITERIA, 0),
        "not_annotated": counts.get(cr.NOT_ANNOTATED, 0),  # no label line: agreement names them
    }
    decisions = [
        Decision(x["id"], "kept" if x["valid"] else "dropped", "valid" if x["valid"] else "invalid")
        for x in labels
    ]
    return Judged(table, decisions, md, ("id", "verdict", "failed"))


# Group `review`, no ledger (a sample is no production stage); no job selects it: it needs a sample.
review_labels = judged_asset(
    JudgedStage(
        name="review_labels",
        description=(
            "Labels {id, valid} of a blind review sample (`ragsft review sample`) by an LLM role, with the "
            "six-criteria protocol of criteria_annotation; the file a person labelling it by hand writes."
        ),
        task=cr.TASK,
        role=lambda r: r.criteria_role,
        config=ReviewLabelsConfig,
        reads=("question_drafts", "abstracts"),
        judge=_label,
        group=GROUP,
        product=None,
    )
)

review_assets = [review_labels]
