"""What each stage did in a run, read back from its decision ledger and the LLM cache.

Dagster-free. A stage's items are the candidates its ledger rows decide, its kept items those
with verdict ``kept``, its requests the distinct cache keys behind its decisions, and their
tokens the cache entries' token counts. The same reading serves the sample run of a plan and,
afterwards, the real run it is compared with.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

import duckdb

from ragsft_assets.ledger import KEPT
from ragsft_assets.llm.cache import DB_NAME
from ragsft_assets.plan.forecast import StageSample
from ragsft_assets.release.decisions import STAGE_ORDER, ledger_files


def _ledger_query(partition_folder: Path, sql: str, params: list[object]) -> list[tuple]:
    """Rows of ``sql`` over the partition's ledger files (bound as each ``$files``); [] without any."""
    folder = Path(partition_folder)
    files = [str(p) for p in ledger_files(folder.parent, folder.name)]
    if not files:
        return []
    con = duckdb.connect()
    try:
        return con.execute(
            sql.replace("$files", "read_parquet($files, union_by_name = true)"),
            {"files": files, **{f"p{i}": v for i, v in enumerate(params)}},
        ).fetchall()
    finally:
        con.close()


def ledger_counts(partition_folder: Path) -> dict[str, dict[str, object]]:
    """Per ledger stage: ``items`` (distinct candidates), ``kept`` and its distinct cache ``keys``."""
    rows = _ledger_query(
        partition_folder,
        """
        SELECT stage,
               count(DISTINCT candidate_id) AS items,
               count(DISTINCT candidate_id) FILTER (WHERE verdict = $p0) AS kept,
               list_distinct(flatten(list(cache_keys))) AS keys
        FROM $files
        GROUP BY stage ORDER BY stage
        """,
        [KEPT],
    )
    return {
        r[0]: {"items": int(r[1]), "kept": int(r[2]), "keys": sorted(k for k in (r[3] or []) if k)}
        for r in rows
    }


def ledger_rows(partition_folder: Path) -> list[tuple[str, str, bool, list[str]]]:
    """One row per stage and candidate: ``(stage, candidate id, kept, its cache keys)``, sorted."""
    rows = _ledger_query(
        partition_folder,
        """
        SELECT stage, candidate_id, bool_or(verdict = $p0),
               list_sort(list_distinct(flatten(list(cache_keys))))
        FROM $files
        GROUP BY stage, candidate_id ORDER BY stage, candidate_id
        """,
        [KEPT],
    )
    return [(r[0], r[1], bool(r[2]), [k for k in (r[3] or []) if k]) for r in rows]


def stages_with_reasons(partition_folder: Path, reasons: Iterable[str]) -> dict[str, set[str]]:
    """``{stage: candidate ids it decided}`` for the stages with a row of one of ``reasons``."""
    rows = _ledger_query(
        partition_folder,
        """SELECT stage, list(DISTINCT candidate_id) FROM $files
           WHERE stage IN (SELECT stage FROM $files WHERE reason IN $p0)
           GROUP BY stage""",
        [list(reasons)],
    )
    return {r[0]: set(r[1]) for r in rows}


def _cache_query(cache_dir: Path, keys: Iterable[str], sql: str, params: list[object]) -> list[tuple]:
    """Rows of ``sql`` over the cache entries of ``keys`` (``calls JOIN wanted USING (key)``), read
    only; [] without keys or cache."""
    keys = sorted(set(keys))
    db = Path(cache_dir) / DB_NAME
    if not keys or not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        con.execute("CREATE TEMP TABLE wanted (key TEXT PRIMARY KEY)")
        con.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((k,) for k in keys))
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def key_tokens(cache_dir: Path, keys: Iterable[str]) -> dict[str, int]:
    """Prompt plus completion tokens of each cache entry of ``keys`` (entries not found: absent)."""
    rows = _cache_query(
        cache_dir,
        keys,
        "SELECT key, coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0) FROM calls JOIN wanted USING (key)",
        [],
    )
    return {k: int(t) for k, t in rows}


def cache_tokens(cache_dir: Path, keys: Iterable[str], before: float | None = None) -> dict[str, int]:
    """``prompt_tokens``, ``completion_tokens``, ``found`` and ``cached_before`` of the cache entries
    ``keys`` (``cached_before``: those created before the time ``before``, when given)."""
    rows = _cache_query(
        cache_dir,
        keys,
        """SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), count(*),
                  coalesce(sum(CASE WHEN created < ? THEN 1 ELSE 0 END), 0)
           FROM calls JOIN wanted USING (key)""",
        [before if before is not None else float("-inf")],
    )
    row = rows[0] if rows else (0, 0, 0, 0)
    return {
        "prompt_tokens": int(row[0]),
        "completion_tokens": int(row[1]),
        "found": int(row[2]),
        "cached_before": int(row[3]),
    }


def stage_rank(stage: str) -> int:
    """A stage's place in pipeline order (stages not listed come last)."""
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def stage_samples(
    partition_folder: Path,
    cache_dir: Path,
    upstream: Mapping[str, str | None],
    *,
    before: float | None = None,
    wall_s: Mapping[str, float] | None = None,
    llm_time: Mapping[str, tuple[float, ...]] | None = None,
    skip: Iterable[str] = (),
) -> list[StageSample]:
    """The :class:`StageSample` of every ledger stage of ``partition_folder`` named in ``upstream``.

    ``upstream`` maps a stage to the stage whose kept items it decides (None: the run's input
    items); stages of the ledger it does not name, and those in ``skip``, are left out (the corpus
    stages of a snapshot, which the plan does not sample). ``before`` is when the sample run
    started: cache entries older than that count as already cached. ``wall_s`` are the steps'
    seconds, ``llm_time`` per stage ``(LLM wall seconds, request-seconds in flight[, requests its
    batches sent to a model, requests of other stages it waited on])``.
    """
    counts = ledger_counts(partition_folder)
    skip = set(skip)
    out = []
    for stage in sorted(counts, key=lambda s: (stage_rank(s), s)):
        if stage in skip or stage not in upstream:
            continue
        c = counts[stage]
        keys = c["keys"]
        tokens = cache_tokens(cache_dir, keys, before)  # type: ignore[arg-type]
        llm = (*(llm_time or {}).get(stage, ()), 0.0, 0.0, -1.0, 0.0)[:4]
        out.append(
            StageSample(
                name=stage,
                upstream=upstream[stage],
                items=int(c["items"]),  # type: ignore[arg-type]
                kept=int(c["kept"]),  # type: ignore[arg-type]
                requests=len(keys),  # type: ignore[arg-type]
                prompt_tokens=tokens["prompt_tokens"],
                completion_tokens=tokens["completion_tokens"],
                cached_before=tokens["cached_before"],
                wall_s=float((wall_s or {}).get(stage, 0.0)),
                llm_wall_s=float(llm[0]),
                request_s=float(llm[1]),
                batch_calls=float(llm[2]),
                stream_calls=float(llm[3]),
            )
        )
    return out


def actual_by_stage(
    partition_folder: Path, cache_dir: Path, stages: Iterable[str]
) -> dict[str, dict[str, float]]:
    """Per stage of a finished run: ``items``, ``kept``, ``calls`` (requests) and tokens."""
    counts = ledger_counts(partition_folder)
    out = {}
    for stage in stages:
        c = counts.get(stage)
        if c is None:
            out[stage] = {
                "items": 0.0,
                "kept": 0.0,
                "calls": 0.0,
                "prompt_tokens": 0.0,
                "completion_tokens": 0.0,
            }
            continue
        tokens = cache_tokens(cache_dir, c["keys"])  # type: ignore[arg-type]
        out[stage] = {
            "items": float(c["items"]),  # type: ignore[arg-type]
            "kept": float(c["kept"]),  # type: ignore[arg-type]
            "calls": float(len(c["keys"])),  # type: ignore[arg-type]
            "prompt_tokens": float(tokens["prompt_tokens"]),
            "completion_tokens": float(tokens["completion_tokens"]),
        }
    return out
