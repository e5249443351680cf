"""Recall Rewrite's stages over stored tables (Dagster-free): where they are stored, how a stage's
records are kept, its input pairs, the recipe fields each stage reads and its extra metadata.

``oasst_pairs``, ``claims``, ``claim_audit`` and ``probes`` do not depend on the base model: they
are stored under one folder (:data:`SHARED_PARTITION`); the later stages under one per base model
(:func:`model_partition`). A stage's records are stored as one sorted-key JSON document per example
(the nesting of claims, probes and answers changes from stage to stage); ``rewrites`` is stored in
the ``-full`` schema itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.llm.types import BatchStats
from ragsft_assets.recall import oasst, stages
from ragsft_assets.recall import recipes as recall_recipes
from ragsft_assets.recall.schema import FULL_SCHEMA
from ragsft_assets.stage_versions import recipe_fields
from ragsft_assets.table_reader import TableReader

PRODUCT = "recall"
SHARED_PARTITION = "recall"  # store/ledger folder of the model-independent stages
TREES_ENV = "RAGSFT_OASST_TREES"

# The recipe fields each stage reads: its code version follows their values (``stage_versions``)
STAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "claims": ("claims_max_tokens",),
    "probes": ("num_probes",),
    "probe_answers": ("answers_per_probe", "answer_temperature", "answer_max_tokens"),
    "known_claims": ("j_e", "k_e", "j_c", "k_c"),
    "rewrites": ("refusal",),
}


def step_fields(stage: str) -> dict[str, Any] | None:
    """The product recipe's values of the fields ``stage`` reads (None: it reads none)."""
    names = STAGE_FIELDS.get(stage)
    return recipe_fields(recall_recipes.resolve(None), names) if names else None


def model_partition(key: str) -> str:
    """Store and ledger folder of a base model's stages."""
    return f"{SHARED_PARTITION}-{key}"


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    """A stage's records by id, each a sorted-key JSON document."""
    rows = sorted(records, key=lambda r: r["id"])
    return pa.table(
        {
            "id": [r["id"] for r in rows],
            "record": [orjson.dumps(r, option=orjson.OPT_SORT_KEYS).decode() for r in rows],
        }
    )


def stage_table(stage: str, records: list[dict[str, Any]]) -> pa.Table:
    """What a stage stores: ``rewrites`` in the ``-full`` schema itself, the others as documents."""
    if stage == "rewrites":
        return pa.Table.from_pylist(sorted(records, key=lambda r: r["id"]), schema=FULL_SCHEMA)
    return records_table(records)


def read_records(reader: TableReader, partition: str, asset: str) -> list[dict[str, Any]]:
    return [orjson.loads(s) for s in reader.read(partition, asset).column("record").to_pylist()]


def input_records(reader: TableReader, prev: str, partition: str) -> list[Any]:
    """The records of the stage ``prev`` (``oasst_pairs`` as pairs) stored under ``partition``."""
    records = read_records(reader, partition, prev)
    return [oasst.OasstPair(**r) for r in records] if prev == "oasst_pairs" else records


class Tally:
    """Forwards to a model and adds up the stats of every batch (for the asset's metadata)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.stats = BatchStats()

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def _count(self, batch: Any) -> Any:
        self.stats = self.stats.add(batch.stats)
        return batch

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.chat(*args, **kwargs))

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.complete(*args, **kwargs))

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.model.run(*args, **kwargs))


def read_pairs(trees_path: str = "", hub: bool = False, hub_revision: str = "") -> oasst.ReadResult:
    """The configured input: a local tree export (``trees_path``, else ``$RAGSFT_OASST_TREES``), or
    the hub.

    Raises:
        ValueError: when no input is configured, naming the config field and the variable.
    """
    path = trees_path or os.environ.get(TREES_ENV, "")
    if path:
        if not Path(path).is_file():
            raise ValueError(f"oasst_pairs: trees_path {path!r} is not a file")
        return oasst.read_tree_export(Path(path))
    if hub:
        return oasst.read_hub(revision=hub_revision or None)
    raise ValueError(
        "oasst_pairs: no input. Set the run config `ops: {oasst_pairs: {config: {trees_path: FILE}}}`"
        f" (a JSON-lines export of OASST1 message trees), or {TREES_ENV}=FILE, or `hub: true` to read"
        f" {oasst.HUB_DATASET} through `datasets`."
    )


def pairs_stage(read: oasst.ReadResult, max_examples: int = 0) -> stages.StageOut:
    """The ``oasst_pairs`` stage: the pairs kept (the first ``max_examples`` when over 0), a ledger
    row per skipped tree under its tree id, the pairs not selected counted."""
    pairs = read.pairs[:max_examples] if max_examples > 0 else read.pairs
    out = stages.StageOut(records=[asdict(p) for p in pairs])
    for p in pairs:
        out.keep(p.id, "first_turn_best_reply", source_id=p.source_id)
    for skipped in read.skipped_trees:
        out.drop(skipped.tree_id, f"skipped/{skipped.reason}", source_id=skipped.tree_id)
    if len(pairs) < len(read.pairs):
        out.reasons["not_selected (max_examples)"] = len(read.pairs) - len(pairs)
    return out


# Stage name -> its extra metadata from (records, recipe, seed, base model id); the others have none
StageExtra = Callable[[Sequence[dict[str, Any]], recall_recipes.RecallRecipe, int, str], dict[str, Any]]
STAGE_EXTRA: dict[str, StageExtra] = {
    "probe_answers": lambda records, recipe, seed, hf_id: {"seed": seed},
    "known_claims": lambda records, recipe, seed, hf_id: {"thresholds": str(recipe.thresholds)},
    "rewrites": lambda records, recipe, seed, hf_id: {
        "base_model": hf_id,
        "statistics": stages.statistics(records),
    },
}
