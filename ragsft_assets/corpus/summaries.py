"""What the corpus assets report about their outputs (Dagster-free): counts and small markdown
tables queried from the written files, and the bridge pairs' ledger decisions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets import table_stats
from ragsft_assets.corpus.bridge_pairs import NOT_DRAWN
from ragsft_assets.ledger import DROPPED, KEPT, Decision

NONE = "(none)"


def funnel_rows(funnel: Mapping[str, Any]) -> dict[str, int]:
    """A build's funnel as plain integers (numpy counts in, JSON-ready out)."""
    return {k: int(v) for k, v in funnel.items()}


def reason_table(files: list[Path], column: str = "reason") -> str:
    """The 20 most frequent values of ``column`` in ledger files, with their counts (markdown)."""
    if not files:
        return NONE
    rows = table_stats.query(
        files, f'SELECT "{column}", count(*) FROM t GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20'
    )
    return table_stats.markdown_table([column, "count"], rows)


def files_table(described: Iterable[Mapping[str, Any]]) -> str:
    """The snapshot's dump files: name, size and SHA-256 (markdown)."""
    return table_stats.markdown_table(
        ["file", "bytes", "sha256"],
        [(d["name"], d["bytes"], d["sha256"] or "(too large)") for d in described],
    )


def bad_lines_table(examples: Sequence[Sequence[Any]]) -> str:
    """The first 20 unreadable dump lines: file, line, reason, detail (markdown)."""
    if not examples:
        return NONE
    return table_stats.markdown_table(["file", "line", "reason", "detail"], list(examples[:20]))


def bridge_edges(path: Path) -> int:
    """Edges of the link graph file that point at a bridge."""
    return int(table_stats.query([path], "SELECT count(*) FROM t WHERE is_bridge")[0][0])


def top_targets(path: Path) -> list[tuple[Any, ...]]:
    """The 10 most linked targets of the link graph file: title, in-degree, bridge or not."""
    return table_stats.query(
        [path],
        "SELECT target_title, max(target_in_degree) d, bool_or(is_bridge) FROM t "
        "GROUP BY target_title ORDER BY d DESC, target_title LIMIT 10",
    )


def top_targets_table(path: Path, edges: int) -> str:
    """:func:`top_targets` as markdown (``(empty)`` for a graph with no edge)."""
    if not edges:
        return "(empty)"
    return table_stats.markdown_table(["target_title", "in_degree", "is_bridge"], top_targets(path))


def pairs_decisions(table: pa.Table, not_drawn: Iterable[str]) -> list[Decision]:
    """The bridge pairs' ledger rows: every drawn pair kept, every pair not drawn dropped."""
    decisions = [Decision(i, KEPT) for i in table.column("id").to_pylist()]
    return decisions + [Decision(i, DROPPED, NOT_DRAWN) for i in not_drawn]
