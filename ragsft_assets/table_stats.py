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


# What a reviewer reads first in a preview, in this order, where the table has it (issue 40: the
# previews showed id, verdict and reason, not the question and answer).
READ_FIRST = ("question", "answer", "title", "a_title", "b_title", "text")
# The asset that holds every multihop candidate's question and answer, under the candidate's id.
QUESTIONS_ASSET = "question_drafts"


def reader_columns(columns: Sequence[str], available: Sequence[str], most: int = 6) -> list[str]:
    """``columns`` led by the ``READ_FIRST`` columns of ``available``, without repeats, at most ``most``."""
    have = set(available)
    first = [c for c in READ_FIRST if c in have]
    return list(dict.fromkeys([*first, *[c for c in columns if c in have]]))[:most]


def counts_per_split(files: Sequence[Path], column: str, splits: Sequence[str]) -> dict[str, int]:
    """Rows per split, every split named (0 where it has none, an empty asset too), then any other value."""
    counts = counts_by(files, column)
    return {**{s: counts.pop(s, 0) for s in splits}, **counts}


def reviewer_preview(files: Sequence[Path], columns: Sequence[str], limit: int = 5, width: int = 80) -> str:
    """:func:`preview_markdown` with the columns a reviewer reads first.

    A stage keyed by question id (checks, judges) holds verdicts without the question: its preview
    gets the question and answer from ``question_drafts`` beside it, when that asset is there.
    """
    if not files:
        return "(empty)"
    con = _connection()
    con.execute(f"CREATE OR REPLACE TEMP VIEW t AS SELECT * FROM {_files_sql(files)}")
    try:
        names = [d[0] for d in con.execute("SELECT * FROM t LIMIT 0").description]
    finally:
        con.execute("DROP VIEW t")
    drafts = sorted((files[0].parent.parent / QUESTIONS_ASSET).glob("*.parquet"))
    joins = (
        "id" in names and "question" not in names and files[0].parent.name != QUESTIONS_ASSET and bool(drafts)
    )
    if not joins:
        return preview_markdown(files, reader_columns(columns, names), limit, width)
    own = [c for c in columns if c in names and c not in ("question", "answer")]
    shown = ["question", "answer", *own][:6]
    cols = ", ".join(f'd."{c}"' if c in ("question", "answer") else f't."{c}"' for c in shown)
    rows = query(
        files,
        f"SELECT {cols} FROM t LEFT JOIN {_files_sql(drafts)} AS d ON d.id = t.id LIMIT {int(limit)}",
    )

    def cut(v: object) -> str:
        s = str(v)
        return s if len(s) <= width else s[: width - 1] + "…"

    return markdown_table(shown, [[cut(v) for v in r] for r in rows])
