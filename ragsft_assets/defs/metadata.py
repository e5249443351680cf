"""Helpers that turn plain stats into Dagster metadata for ``MaterializeResult``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg
import pyarrow as pa

from ragsft_assets import table_stats
from ragsft_assets.ids import sha256_hex
from ragsft_assets.release import columns
from ragsft_assets.storage import SPLITS


def file_sha256(path: Path) -> str:
    return sha256_hex(path.read_bytes())


def column_schema(schema: pa.Schema, asset: str | None = None) -> dg.TableSchema:
    """The UI's Columns table: each column's name, Arrow type and, where known, what it holds
    (``release.columns``: the seed cards' schema tables for the product assets)."""
    described = columns.describe(asset, schema.names)
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name=f.name, type=str(f.type), description=described.get(f.name)) for f in schema
        ]
    )


def current_asset(files: Sequence[Path] = ()) -> str | None:
    """The asset the running step materializes, as the UI writes its key (``qa/rag_sft``).

    A multi-asset step picks the key whose store folder holds ``files``; None outside a step or
    when that cannot be told.
    """
    try:
        ctx = dg.OpExecutionContext.get()
        keys = [k.to_user_string() for k in ctx.selected_asset_keys]
    except dg.DagsterInvariantViolationError:  # outside a step (a bench, a script), or an op's step
        return None
    if len(keys) == 1:
        return keys[0]
    folder = files[0].parent.name if files else ""
    hits = [k for k in keys if k.rsplit("/", 1)[-1] == folder]
    return hits[0] if len(hits) == 1 else None


def table_metadata(
    files: Sequence[Path],
    schema: pa.Schema,
    *,
    preview_columns: Sequence[str] | None = None,
    split_column: str | None = None,
    asset: str | None = None,
) -> dict[str, object]:
    """Standard metadata for an asset written as Parquet files: rows, schema (with column
    descriptions of ``asset``, by default the running step's), paths, sha256, preview."""
    md: dict[str, object] = {
        "dagster/row_count": table_stats.row_count(files),
        "dagster/column_schema": column_schema(schema, asset or current_asset(files)),
        "path": dg.MetadataValue.path(str(files[0].parent) if files else ""),
        "files_sha256": dg.MetadataValue.json({f.name: file_sha256(f) for f in files}),
    }
    if split_column:  # every split named, 0 where it has no row (an empty asset shows 0s, not {})
        md["rows_per_split"] = dg.MetadataValue.json(
            table_stats.counts_per_split(files, split_column, SPLITS)
        )
    if preview_columns:  # led by what a reviewer reads first: the question and answer where known
        md["preview"] = dg.MetadataValue.md(table_stats.reviewer_preview(files, preview_columns))
    return md


FUNNEL_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn(
            "step", "string", description="a stage's input, a reason it dropped rows, or what it kept"
        ),
        dg.TableColumn("count", "int"),
    ]
)


def funnel_metadata(funnel: Mapping[str, int], key: str = "funnel") -> dict[str, object]:
    """The funnel as markdown under ``key`` and as a table under ``<key>_table``.

    The UI shows a table value in place, where markdown hides behind "[Show Markdown]".
    """
    records = [dg.TableRecord({"step": str(k), "count": int(v)}) for k, v in funnel.items()]
    return {
        key: dg.MetadataValue.md(table_stats.funnel_markdown(funnel)),
        f"{key}_table": dg.MetadataValue.table(records, schema=FUNNEL_SCHEMA),
    }


def model_metadata(model: object, prefix: str) -> dict[str, object]:
    """``<prefix>/model``: the identity (backend, model id, weights hash) of an LLM role's model."""
    return {f"{prefix}/model": dg.MetadataValue.json(dict(model.model_identity()))}  # type: ignore[attr-defined]
