"""Asset metadata computed with DuckDB over the Parquet files (Dagster-free).

Returns plain values (ints, dicts, markdown strings); ``defs/metadata.py`` wraps
them into Dagster metadata.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import duckdb

from ragsft_assets.sql import sql_list


def _files_sql(files: Sequence[Path]) -> str:
    return f"read_parquet({sql_list(files)}, union_by_name=true)"


_LOCAL = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    """This thread's in-memory DuckDB connection, made on first use.

    Opening one costs about 20 ms, and an asset asks several small questions of its files (rows,
    rows per split, preview, funnels): on the corpus assets, new connections were most of the time
    their metadata took. A connection is not shared between threads, nor kept across a fork.
    """
    con, pid = getattr(_LOCAL, "con", None), getattr(_LOCAL, "pid", None)
    if con is None or pid != os.getpid():
        con = _LOCAL.con = duckdb.connect()
        _LOCAL.pid = os.getpid()
    return con


def query(files: Sequence[Path], sql: str) -> list[tuple]:
    """Run ``sql`` where ``t`` is the union of the given Parquet files."""
    con = _connection()
    con.execute(f"CREATE OR REPLACE TEMP VIEW t AS SELECT * FROM {_files_sql(files)}")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.execute("DROP VIEW t")  # nothing of this query's files outlives it


def row_count(files: Sequence[Path]) -> int:
    if not files:
        return 0
    return int(query(files, "SELECT count(*) FROM t")[0][0])


def counts_by(files: Sequence[Path], column: str) -> dict[str, int]:
    """Row counts per value of ``column`` (e.g. split), sorted by value."""
    if not files:
        return {}
    rows = query(files, f'SELECT "{column}", count(*) FROM t GROUP BY 1 ORDER BY 1')
    return {str(k): int(v) for k, v in rows}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table (pipes in cells escaped)."""

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def funnel_markdown(funnel: Mapping[str, int], total_label: str = "total") -> str:
    """A two-column markdown table from an ordered {step or reason: count} mapping."""
    return markdown_table(["step", "count"], list(funnel.items()))


def preview_markdown(files: Sequence[Path], columns: Sequence[str], limit: int = 5, width: int = 80) -> str:
    """The first ``limit`` rows (in file order) of some columns, cells cut to ``width`` chars."""
    if not files:
        return "(empty)"
    cols = ", ".join(f'"{c}"' for c in columns)
    rows = query(files, f"SELECT {cols} FROM t LIMIT {int(limit)}")

    def cut(v: object) -> str:
        s = str(v)
        return s if len(s) <= width else s[: width - 1] + "…"

    return markdown_table(columns, [[cut(v) for v in r] for r in rows])
