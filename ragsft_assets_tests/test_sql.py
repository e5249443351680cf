"""The one SQL literal quoting: a path holding a quote reads back through DuckDB."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.sql import sql_list, sql_literal


def test_quote_in_path_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "l'été.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    assert sql_literal("a'b") == "'a''b'"
    con = duckdb.connect()
    try:
        assert con.execute(f"SELECT sum(x) FROM read_parquet({sql_list([path, path])})").fetchone() == (6,)
        assert con.execute(f"SELECT {sql_literal(path)}").fetchone() == (str(path),)
    finally:
        con.close()
