"""SQL literal quoting for DuckDB queries built over file paths (the one definition; Dagster-free)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def sql_literal(value: Path | str) -> str:
    """``value`` as a single-quoted SQL string literal (an embedded ``'`` doubled, as SQL escapes it)."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(values: Iterable[Path | str]) -> str:
    """A DuckDB list literal of quoted strings, e.g. the files of ``read_parquet([...])``."""
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"
