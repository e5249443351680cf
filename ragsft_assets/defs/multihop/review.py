"""The ``review_labels`` asset (issue 13): an LLM role labels a blind review sample, six criteria.

No ``from __future__ import annotations``: Dagster resolves config and resource types at decoration
time. The sample is a ``sample.jsonl`` written by ``ragsft review sample``; the labels are JSON lines
``{"id", "valid"}`` beside it, the file a person would write by hand, so ``ragsft agreement`` compares
the two (or the labels of two roles or models) with the sample's key. Group ``review``: no job
selects it, since it needs a sample path in its run config.
"""

from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import orjson

from ragsft_assets.defs.metadata import file_sha256, model_metadata, table_metadata
from ragsft_assets.defs.multihop.filters import criteria_items, pair_documents, role_model
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import review
from ragsft_assets.prompts import load_prompt, templates_version
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import atomic_write_bytes

GROUP = "review"


class ReviewLabelsConfig(dg.Config):
    sample: str  # a sample.jsonl written by `ragsft review sample` for this partition
    role: str = "annotator"  # the LLM role that labels: "annotator" (default) or "judge"
    out: str = ""  # the label file; default: labels-<role>.jsonl beside the sample


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
    for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON ({exc})") from None
        if not isinstance(row, dict) or any(
            not isinstance(row.get(k), str) for k in ("id", "question", "answer")
        ):
            raise ValueError(f'{path}:{lineno}: expected a question row {{"id", "question", "answer", ...}}')
        if row["id"] in seen:
            raise ValueError(f"{path}:{lineno}: id {row['id']} appears twice")
        seen.add(row["id"])
        rows.append(row)
    return rows


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version=f"1-{templates_version((cr.TASK,))}",
    kinds={"parquet"},
    deps=["question_drafts", "abstracts"],
    pool="gpu",
)
def review_labels(
    context: dg.AssetExecutionContext,
    config: ReviewLabelsConfig,
    store: ArtifactStore,
    annotator: dg.ResourceParam[ChatModel],
    judge: dg.ResourceParam[ChatModel],
) -> dg.MaterializeResult:
    """Labels {id, valid} of a blind review sample by an LLM role, with the six-criteria protocol."""
    # The same role choice and the same items as criteria_annotation (one protocol, one setup).
    model = role_model("review_labels", config.role, annotator=annotator, judge=judge)
    partition = context.partition_key
    sample_path = Path(config.sample).expanduser()
    rows = read_sample(sample_path)
    docs, drafts = pair_documents(store, partition)
    stray = [r["id"] for r in rows if r["id"] not in drafts]
    if stray:
        raise ValueError(
            f"{len(stray)} questions of {sample_path} are not questions of partition {partition!r} "
            f"(e.g. {stray[0]}): was the sample drawn from another partition?"
        )
    # The annotator sees what a person labelling the file sees: the sample's question and answer,
    # and the full abstracts of A and B (the gold paragraphs of the row's context).
    items = criteria_items(rows, docs, drafts)
    template = load_prompt(cr.TASK, snapshot_language(partition))
    table = cr.run_criteria(items, model, template, log=context.log)
    labels = review.labels_from_criteria([r["id"] for r in rows], table)
    out = Path(config.out).expanduser() if config.out else sample_path.parent / f"labels-{config.role}.jsonl"
    atomic_write_bytes(out, b"".join(orjson.dumps(x) + b"\n" for x in labels))
    path = store.write(table, partition, "review_labels")
    counts = Counter(table.column("verdict").to_pylist())
    md = table_metadata([path], table.schema, preview_columns=["id", "verdict", "failed"])
    md.update(
        {
            "sample": str(sample_path),
            "sample_sha256": file_sha256(sample_path),
            "labels": str(out),
            "labels_sha256": file_sha256(out),
            "questions": len(rows),
            "valid": counts.get(cr.KEPT, 0),
            "invalid": counts.get(cr.FAILS_CRITERIA, 0),
            "not_annotated": counts.get(cr.NOT_ANNOTATED, 0),  # no label line: agreement names them
            **model_metadata(model, config.role),
            "annotator/role": config.role,
            "annotator/prompt": f"{template.name}@{template.version}",
        }
    )
    context.log.info(f"{len(labels)} labels of {len(rows)} sample questions -> {out}")
    return dg.MaterializeResult(metadata=md)


review_assets = [review_labels]
