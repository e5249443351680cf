"""The decision ledger as tables: every row, and the final decision per candidate (DuckDB).

A candidate's final decision is its row from the last stage, in pipeline order, that decided it
(a question dropped by ``question_checks`` never reaches the judges; one kept there and dropped by
``ablation_verdicts`` has both rows, and the judge's is final). Within one stage a ``dropped``
row wins over a ``kept`` one, then the reasons sort, so the choice never depends on file order.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from ragsft_assets.ledger import LEDGER_SCHEMA
from ragsft_assets.sql import sql_list
from ragsft_assets.storage import LEDGER_DIR

# The stages in pipeline order (DESIGN.md). Stages not listed sort after these, by name.
STAGE_ORDER: tuple[str, ...] = (
    "abstracts",
    "link_graph",
    "bridge_pairs",
    "question_drafts",
    "question_checks",
    "distractors",
    "ablation_verdicts",
    "multihop_questions",
    "multihop_audit",
    "rag_prompts",
    "rag_responses",
    "rag_verdicts",
    "rag_sft",
)

# A final decision is its ledger row plus how many stages decided the candidate.
DECISIONS_SCHEMA = LEDGER_SCHEMA.append(pa.field("stages_seen", pa.int32()))


def ledger_files(assets_root: Path, partition: str) -> list[Path]:
    """The ledger files of a partition (``assets/<partition>/_ledger/<stage>.parquet``), sorted."""
    folder = assets_root / partition / LEDGER_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def stage_rank_sql(column: str = "stage") -> str:
    """A SQL expression giving a stage's pipeline rank (unknown stages: after the known ones)."""
    whens = " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STAGE_ORDER))
    return f"(CASE {column} {whens} ELSE {len(STAGE_ORDER)} END)"


def all_rows_sql(files: list[Path]) -> str:
    """SQL selecting every ledger row of the given files (ledger schema)."""
    return f"SELECT * FROM read_parquet({sql_list(files)}, union_by_name=true)"


def final_decisions_sql(source: str) -> str:
    """SQL giving one final row per (partition, product, candidate) from a relation of ledger rows."""
    rank = stage_rank_sql()
    return f"""
        SELECT partition, product, candidate_id, stage, verdict, reason, detail, cache_keys,
               CAST(stages_seen AS INTEGER) AS stages_seen
        FROM (
            SELECT *,
                   count(*) OVER w_all AS stages_seen,
                   row_number() OVER (
                       PARTITION BY partition, product, candidate_id
                       ORDER BY {rank} DESC, stage DESC, (verdict = 'dropped') DESC, verdict, reason
                   ) AS rn
            FROM ({source})
            WINDOW w_all AS (PARTITION BY partition, product, candidate_id)
        )
        WHERE rn = 1
        ORDER BY partition, product, candidate_id
    """


def all_decisions(assets_root: Path, partition: str) -> pa.Table:
    """Every ledger row of a partition, sorted by (product, candidate, stage rank, reason)."""
    files = ledger_files(assets_root, partition)
    if not files:
        return LEDGER_SCHEMA.empty_table()
    con = duckdb.connect()
    try:
        sql = f"{all_rows_sql(files)} ORDER BY product, candidate_id, {stage_rank_sql()}, stage, verdict, reason"
        return con.sql(sql).to_arrow_table().select(LEDGER_SCHEMA.names).cast(LEDGER_SCHEMA)
    finally:
        con.close()


def final_decisions(assets_root: Path, partition: str) -> pa.Table:
    """One row per candidate: the stage that decided it, verdict, reason, detail, cache keys.

    ``stages_seen`` says how many ledger rows the candidate has in all. Deterministic: same ledger
    files, same table.
    """
    files = ledger_files(assets_root, partition)
    if not files:
        return DECISIONS_SCHEMA.empty_table()
    con = duckdb.connect()
    try:
        return con.sql(final_decisions_sql(all_rows_sql(files))).to_arrow_table().cast(DECISIONS_SCHEMA)
    finally:
        con.close()


def write_final_decisions(con: duckdb.DuckDBPyConnection, files: list[Path], path: Path) -> int:
    """Write the final decisions of these ledger files to ``path``, streamed (the table ``final_decisions`` gives).

    Returns the row count; no ledger files give an empty table of ``DECISIONS_SCHEMA``.
    """
    from ragsft_assets.release.stream import PROVENANCE_GROUP_ROWS, write_query

    if not files:
        sql = "SELECT * FROM decisions_empty"
        con.register("decisions_empty", DECISIONS_SCHEMA.empty_table())
    else:
        sql = final_decisions_sql(all_rows_sql(files))
    return write_query(con, sql, path, DECISIONS_SCHEMA, PROVENANCE_GROUP_ROWS)


def funnel(decisions: pa.Table) -> dict[str, list[tuple[str, str, str, int]]]:
    """Per product, the final decisions counted by (stage, verdict, reason), in pipeline order."""
    if decisions.num_rows == 0:
        return {}
    con = duckdb.connect()
    try:
        con.register("d", decisions)
        rows = con.execute(
            f"""SELECT product, stage, verdict, reason, count(*) AS n FROM d GROUP BY 1, 2, 3, 4
                ORDER BY product, min({stage_rank_sql()}), stage, verdict DESC, n DESC, reason"""
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[str, str, str, int]]] = {}
    for product, stage, verdict, reason, n in rows:
        out.setdefault(product, []).append((stage, verdict, reason or "", int(n)))
    return out
