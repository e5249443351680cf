"""``ragsft explain ID``: the chain behind one row, from the product row down to the article revisions.

SFT row -> question -> bridge pair (a, b) -> documents -> article identifier, URL and revision,
then every ledger verdict on any id of the chain and the cached LLM calls behind their cache keys.

The lineage comes from the release (``provenance/<config>/lineage.parquet``) when one is built,
else it is computed from the materialized assets. Cached calls are fetched through a ``lookup``
callable (``key -> entry or None``): by default ``LLMCache($RAGSFT_HOME/llm_cache).show`` from
``ragsft_assets.llm.cache``; a caller may pass its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.home import assets_dir, llm_cache_dir, ragsft_home, releases_dir
from ragsft_assets.release import layout
from ragsft_assets.release.decisions import all_decisions, ledger_files, stage_rank_sql
from ragsft_assets.release.lineage import LineageSources, lineage_sql
from ragsft_assets.release.stream import connect, plan_configs
from ragsft_assets.sql import sql_list

CacheLookup = Callable[[str], Any]


def default_cache_lookup(home: Path | None = None) -> CacheLookup | None:
    """The LLM cache's lookup: ``LLMCache($RAGSFT_HOME/llm_cache).show`` (request and response by key).

    Returns None when there is no cache database yet (or no cache module): explain then lists the
    keys without their requests and responses.
    """
    try:
        mod = importlib.import_module("ragsft_assets.llm.cache")
    except ImportError:
        return None
    folder = llm_cache_dir(home or ragsft_home())
    cls = getattr(mod, "LLMCache", None)
    if cls is not None:
        if not (folder / getattr(mod, "DB_NAME", "calls.sqlite")).is_file():
            return None
        return cls(folder).show
    for name in ("lookup", "get", "show"):
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn
    return None


@dataclass(slots=True)
class Trace:
    id: str
    partition: str
    lineage: dict[str, Any]
    row: dict[str, Any] | None = None
    question: dict[str, Any] | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, Any] = field(default_factory=dict)


def _partitions(home: Path) -> list[str]:
    seen = set()
    for root in (releases_dir(home), assets_dir(home)):
        if root.is_dir():
            seen |= {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return sorted(seen)


def _lineage_row(home: Path, partition: str, row_id: str) -> dict[str, Any] | None:
    files = sorted((releases_dir(home) / partition / layout.PROVENANCE).glob("*/lineage.parquet"))
    if files:
        con = duckdb.connect()
        try:
            lst = sql_list(files)
            rel = con.sql(
                f"SELECT * FROM read_parquet({lst}, union_by_name=true) WHERE id = $id", params={"id": row_id}
            )
            rows = rel.to_arrow_table().to_pylist()
        finally:
            con.close()
        # A question id is both a `default` row and a twin's origin: prefer the product it names.
        order = {c.name: i for i, c in enumerate(layout.RELEASE_CONFIGS)}
        rows.sort(key=lambda r: order.get(r["config"], 99))
        if rows:
            return rows[0]
    # No release (or not in it): compute the lineage of the row from the partition's assets.
    root = assets_dir(home)
    plan = plan_configs(root, partition)
    if not plan.configs:
        return None
    with connect() as con:
        LineageSources(root, partition, ledger_files(root, partition)).register(con)
        for config, splits in plan.configs.items():
            sql = lineage_sql(config, layout.CONFIGS_BY_NAME[config].family, list(splits.values()))
            hit = con.sql(f"SELECT * FROM ({sql}) WHERE id = $id", params={"id": row_id}).to_arrow_table()
            if hit.num_rows:
                return hit.to_pylist()[0]
    return None


def _find_row(home: Path, partition: str, asset: str, row_id: str) -> dict[str, Any] | None:
    folder = assets_dir(home) / partition / asset
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    for f in files:
        t = pq.read_table(f, filters=[("id", "=", row_id)])
        if t.num_rows:
            return t.to_pylist()[0]
    return None


def explain(
    row_id: str, home: Path | None = None, partition: str | None = None, lookup: CacheLookup | None = None
) -> Trace:
    """Trace one product row (an SFT row, a question or a document id) back to its origins.

    Raises ``KeyError`` when no partition knows the id.
    """
    home = home or ragsft_home()
    lookup = lookup if lookup is not None else default_cache_lookup(home)
    for part in [partition] if partition else _partitions(home):
        lin = _lineage_row(home, part, row_id)
        if lin is None:
            continue
        # the names the partition's release shipped (a renamed config too), else the defaults
        cfg = layout.read_configs(releases_dir(home) / part).get(lin["config"])
        trace = Trace(row_id, part, lin)
        trace.row = _find_row(home, part, cfg.asset, row_id) if cfg else None
        if lin.get("question_id"):
            trace.question = _find_row(home, part, "multihop_questions", lin["question_id"])
        ids_ = [
            x
            for x in (row_id, lin.get("question_id"), lin.get("twin_pair_id"), lin.get("bridge_pair_id"))
            if x
        ]
        ledger = all_decisions(assets_dir(home), part)
        if ledger.num_rows:
            con = duckdb.connect()
            try:
                con.register("l", ledger)
                trace.decisions = (
                    con.sql(
                        f"SELECT stage, candidate_id, verdict, reason, detail, cache_keys FROM l "
                        f"WHERE list_contains($ids, candidate_id) ORDER BY {stage_rank_sql()}, stage, candidate_id",
                        params={"ids": ids_},
                    )
                    .to_arrow_table()
                    .to_pylist()
                )
            finally:
                con.close()
        for key in lin.get("cache_keys") or []:
            trace.calls[key] = lookup(key) if lookup is not None else None
        return trace
    # Not a shipped row: any candidate a stage decided (a dropped draft too) is in the ledger.
    for part in [partition] if partition else _partitions(home):
        trace = _ledger_trace(home, part, row_id, lookup)
        if trace is not None:
            return trace
    raise KeyError(
        f"id {row_id!r} is in no partition under {home} (neither a release lineage, an asset row nor a"
        " ledger candidate); the ids of a run's dropped candidates: ragsft catalog --sql"
        " \"SELECT candidate_id, stage, reason FROM decisions WHERE verdict <> 'kept' LIMIT 20\""
    )


LEDGER_ONLY = "(ledger)"  # the lineage's config of a candidate that no config ships


def _ledger_trace(home: Path, partition: str, row_id: str, lookup: CacheLookup | None) -> Trace | None:
    """The trace of a candidate known only to the ledger: every stage that decided it, its row in
    the first stage's asset that holds it (a draft's question and answer), and its LLM calls."""
    ledger = all_decisions(assets_dir(home), partition)
    if not ledger.num_rows:
        return None
    con = duckdb.connect()
    try:
        con.register("l", ledger)
        decisions = (
            con.sql(
                "SELECT stage, candidate_id, verdict, reason, detail, cache_keys FROM l "
                f"WHERE candidate_id = $id ORDER BY {stage_rank_sql()}, stage, verdict, reason",
                params={"id": row_id},
            )
            .to_arrow_table()
            .to_pylist()
        )
    finally:
        con.close()
    if not decisions:
        return None
    trace = Trace(row_id, partition, {"config": LEDGER_ONLY}, decisions=decisions)
    for stage in dict.fromkeys(d["stage"] for d in decisions):
        try:
            trace.row = _find_row(home, partition, stage, row_id)
        except (pa.ArrowInvalid, KeyError, OSError):  # an asset without an ``id`` column (link_graph)
            trace.row = None
        if trace.row is not None:
            break
    for d in decisions:
        for key in d.get("cache_keys") or []:
            trace.calls[key] = lookup(key) if lookup is not None else None
    return trace


def _format_ledger_trace(trace: Trace) -> str:
    """A candidate the release does not ship: its stages, the one that dropped it, its LLM calls."""
    dropped = [d for d in trace.decisions if d["verdict"] != "kept"]
    if dropped:
        last = dropped[-1]
        status = f"dropped at {last['stage']} ({last['reason'] or last['verdict']})"
    else:
        status = f"kept by {trace.decisions[-1]['stage']}, in no shipped config"
    out = [f"candidate {trace.id}  (partition {trace.partition}): {status}"]
    row = trace.row or {}
    for key in ("question", "answer", "title", "a_title", "b_title", "alias", "pair_id"):
        if row.get(key) not in (None, ""):
            out.append(f"  {key}: {_show(row[key], 200)}")
    out.append("  stages:")
    for d in trace.decisions:
        reason = f" ({d['reason']})" if d.get("reason") else ""
        detail = f"  {_show(d['detail'], 200)}" if d.get("detail") else ""
        out.append(f"     {d['stage']:<20} {d['verdict']}{reason}{detail}")
    return "\n".join(out + _format_calls(trace))


def _show(value: Any, width: int = 400) -> str:
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        value = asdict(value)
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def format_trace(trace: Trace) -> str:
    """The chain as indented text, one link per line."""
    lin = trace.lineage
    if lin.get("config") == LEDGER_ONLY:
        return _format_ledger_trace(trace)
    out = [f"{lin['config']} row {trace.id}  (partition {trace.partition})"]
    if trace.row and "messages" in trace.row:
        for m in trace.row["messages"]:
            if m.get("role") != "system":
                out.append(f"  {m.get('role')}: {_show(m.get('content'), 200)}")
    if lin.get("twin_pair_id"):
        out.append(f"  twin pair {lin['twin_pair_id']}")
    if lin.get("question_id"):
        q = trace.question or {}
        out.append(
            f"  -> question {lin['question_id']}: {q.get('question', '?')}  [answer: {q.get('answer', '?')}]"
        )
    if lin.get("bridge_pair_id"):
        out.append(
            f"  -> bridge pair {lin['bridge_pair_id']}: a={lin['a_id']} b={lin['b_id']}  "
            f"(via {lin['resolution']})"
        )
    out.append("  -> documents:")
    for d in lin.get("documents") or []:
        out.append(
            f"     {d['role']:<8} {d['doc_id']}  {d['title']}  identifier={d['identifier']} "
            f"revision={d['revision']}  {d['url']}"
        )
    out.append("  ledger:")
    for r in trace.decisions:
        reason = f" ({r['reason']})" if r.get("reason") else ""
        out.append(
            f"     {r['stage']:<20} {r['candidate_id']}  {r['verdict']}{reason}  keys={r['cache_keys']}"
        )
    return "\n".join(out + _format_calls(trace))


def _format_calls(trace: Trace) -> list[str]:
    out = ["  cached LLM calls:"]
    for key, entry in trace.calls.items():
        if not isinstance(entry, dict) or "request" not in entry:
            shown = _show(entry) if entry is not None else "(not in the cache / no cache lookup)"
            out.append(f"     {key}: {shown}")
            continue
        req, resp = entry.get("request") or {}, entry.get("response") or {}
        model = (req.get("model") or {}).get("model", "?")
        params = req.get("params") or {}
        out.append(
            f"     {key}: model={model} template={req.get('template_version', '')} "
            f"temperature={params.get('temperature')} seed={params.get('seed')}"
        )
        for m in req.get("messages") or []:
            out.append(f"        {m.get('role')}: {_show(m.get('content'), 200)}")
        out.append(f"        => {_show(resp.get('text', resp), 300)}")
    return out
