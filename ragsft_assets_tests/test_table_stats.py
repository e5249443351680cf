"""table_stats: DuckDB over Parquet files, on one reused connection per thread."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets import table_stats


def _files(tmp_path: Path) -> list[Path]:
    paths = []
    for name, rows in (("a", ["x", "y", "y"]), ("b", ["z"])):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"split": rows, "n": list(range(len(rows)))}), path)
        paths.append(path)
    return paths


def test_queries_see_only_their_own_files_and_leave_nothing_behind(tmp_path: Path) -> None:
    a, b = _files(tmp_path)
    assert table_stats.row_count([a, b]) == 4
    assert table_stats.counts_by([a], "split") == {"x": 1, "y": 2}
    assert table_stats.row_count([b]) == 1  # the view of the previous query is gone, not reused
    con = table_stats._connection()
    assert con is table_stats._connection()  # one connection for the thread
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone() == (0,)
    with pytest.raises(duckdb.Error):
        table_stats.query([a], "SELECT no_such_column FROM t")
    assert table_stats.query([a], "SELECT max(n) FROM t") == [(2,)]  # usable after a failed query
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone() == (0,)


def test_each_thread_has_its_own_connection(tmp_path: Path) -> None:
    a, b = _files(tmp_path)
    seen: dict[str, object] = {}

    def work() -> None:
        seen["con"] = table_stats._connection()
        seen["rows"] = table_stats.row_count([a, b])

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["rows"] == 4 and seen["con"] is not table_stats._connection()
