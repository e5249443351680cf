"""``ragsft diff OLD NEW``: what changed between two releases, row by row and why (Dagster-free).

A row's identity is its config's key: ``id`` for corpus and SFT rows, ``_id`` (else ``id``) for
questions. Per config and split, every row of the two releases is added, removed, changed (same
key, other content) or unchanged. A changed row gets its reasons from the releases' provenance:

- ``revision``: a document of the row has another article revision (``lineage.parquet``);
- ``text``: same revisions, other text (the abstract's text, a question's context, a prompt);
- ``documents``: another set of documents (other distractors, another gold);
- ``split``: the row moved between splits;
- ``verdict``: a final decision or filter verdict on the row's chain changed (``decisions.parquet``,
  ``verdicts.parquet``);
- ``recipe``: the recipes recorded in the config's manifests differ;
- ``model``: other model identities answered the row's LLM calls (cache keys -> LLM cache);
- ``prompt``: other prompt template versions;
- ``content``: none of the above explains it (ours: a change the provenance does not name).

An added or removed row gets the stage that let it in (the new release's final decision on its
chain) or dropped it (the earliest stage of the new release that dropped a candidate of its chain;
none: its inputs no longer hold it, e.g. an article gone from the snapshot).

Everything runs in DuckDB over the Parquet files (key, split and two 64-bit hashes per row), joined
on the key under a memory limit with a spill folder: neither release becomes Python rows. Only the
counts and up to ``limit`` example rows per kind come back.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.release import layout
from ragsft_assets.release.decisions import stage_rank_sql
from ragsft_assets.release.manifest import DECISIONS, LINEAGE, MANIFEST
from ragsft_assets.release.stream import DUCKDB_MEMORY_LIMIT, connect, quote
from ragsft_assets.sql import sql_literal

IDS_FILE = "ids.parquet"  # lineage.IDS_FILE: provenance/<config>/ids.parquet, (split, row) -> id
REASONS = ("revision", "text", "documents", "split", "verdict", "recipe", "model", "prompt", "content")
KINDS = ("added", "removed", "changed")
COUNTS = ("added", "removed", "changed", "unchanged")
# Where the diff summary of a release waits for its card: beside the release folder, never inside
# it (every file inside is listed by the manifests and checked by `ragsft verify`).
CHANGES_DIR = ".changes"
CARD_REASONS = 3  # ours: the card names the three most frequent reasons per config
LABEL_CHARS = 80  # ours: an example row's label (title, question) is cut to this many characters


@dataclass(frozen=True, slots=True)
class Release:
    """One side of a diff: a built release folder and how the user named it."""

    folder: Path
    label: str
    files: dict[str, dict[str, str]]  # {config: {split: rel path}} (README header)
    configs: dict[str, layout.ReleaseConfig]  # provenance/configs.json (families)

    @classmethod
    def open(cls, folder: Path, label: str | None = None) -> Release:
        """Read a built release folder (its README header and configs).

        Raises:
            FileNotFoundError: ``folder`` holds no release README.
        """
        folder = Path(folder)
        if not (folder / layout.README).is_file():
            raise FileNotFoundError(
                f"{folder} is not a release folder (no {layout.README}): build one with "
                f"`ragsft materialize 'release*' --partition KEY`"
            )
        return cls(folder, label or str(folder), layout.release_files(folder), layout.read_configs(folder))

    def family(self, config: str) -> str:
        cfg = self.configs.get(config)
        return cfg.family if cfg else "corpus"


def resolve_release(name: str, home: Path | None = None) -> Release:
    """A release by partition key (its current release, ``$RAGSFT_HOME/releases/KEY``) or by folder.

    Raises:
        FileNotFoundError: ``name`` is neither a release folder nor a key with a built release.
    """
    from ragsft_assets.home import releases_dir

    path = Path(name).expanduser()
    if (path / layout.README).is_file():
        return Release.open(path, name)
    by_key = releases_dir(home) / name
    if (by_key / layout.README).is_file():
        return Release.open(by_key, name)
    raise FileNotFoundError(
        f"no release {name!r}: neither a release folder nor a partition key with a release under "
        f"{releases_dir(home)} (build it with `ragsft materialize 'release*' --partition {name}`)"
    )


def key_column(names: Iterable[str], family: str) -> str | None:
    """The key of a config's rows: ``_id`` (else ``id``) for questions, ``id`` (else ``_id``) otherwise."""
    names = set(names)
    order = ("_id", "id") if family == "multihop" else ("id", "_id")
    return next((k for k in order if k in names), None)


def _schema(folder: Path, splits: Mapping[str, str]) -> pa.Schema:
    return pa.unify_schemas([pq.read_schema(folder / rel) for rel in splits.values()])


def _text_sql(family: str, names: set[str]) -> str:
    """The SQL of the text a ``text`` change compares: the documents' words the row carries."""
    if family == "corpus":
        cols = [quote(c) for c in ("title", "text", "sentences") if c in names]
    elif family == "multihop":
        cols = [quote(c) for c in ("context",) if c in names]
    elif "messages" in names:  # an SFT row: the prompt (documents and question), not the answer
        cols = ["list_filter(messages, lambda m: m.role IS DISTINCT FROM 'assistant')"]
    else:
        cols = []
    return f"hash({', '.join(cols)})" if cols else "0::UBIGINT"


def _label_sql(family: str, names: set[str]) -> str:
    if family == "corpus" and "title" in names:
        expr = quote("title")
    elif family == "multihop" and "question" in names:
        expr = quote("question")
    elif "messages" in names:
        expr = "list_filter(messages, lambda m: m.role = 'user')[1].content"
    else:
        return "NULL::VARCHAR"
    return f"left(CAST({expr} AS VARCHAR), {LABEL_CHARS})"


def _rows_sql(side: Release | None, config: str, common: Sequence[str], labels: bool = False) -> str:
    """``(key, split, h, t)`` of every row of a config's splits: ``h`` hashes the columns both
    releases ship (the key aside), ``t`` the text; nothing when the release lacks the config.
    ``labels``: ``(key, split, label)`` instead (a title or question, for the examples)."""
    empty = (
        "SELECT NULL::VARCHAR AS key, NULL::VARCHAR AS split, NULL::VARCHAR AS label WHERE false"
        if labels
        else "SELECT NULL::VARCHAR AS key, NULL::VARCHAR AS split, NULL::UBIGINT AS h, NULL::UBIGINT AS t WHERE false"
    )
    if side is None or config not in side.files:
        return empty
    family = side.family(config)
    parts = []
    for split, rel in side.files[config].items():
        names = set(pq.read_schema(side.folder / rel).names)
        key = key_column(names, family)
        data = f"read_parquet({sql_literal(side.folder / rel)})"
        ids = side.folder / layout.PROVENANCE / config / IDS_FILE
        if key is None and ids.is_file():
            # Rows shipped without their id (the Luciole RAG card's three fields): the provenance
            # ties each row's position in its data file to its id.
            data = (
                f"(SELECT * FROM read_parquet({sql_literal(side.folder / rel)}, file_row_number=true)) d "
                f"JOIN (SELECT row AS _row, id AS _key FROM read_parquet({sql_literal(ids)}) "
                f"WHERE split = {sql_literal(split)}) i ON i._row = d.file_row_number"
            )
            key = "_key"
        elif key is None:
            raise ValueError(
                f"{side.folder / rel}: config {config!r} has no `id` or `_id` column and no "
                f"{layout.PROVENANCE}/{config}/{IDS_FILE}; `ragsft diff` matches rows by their key "
                "and cannot compare this config (rebuild the release)"
            )
        cols = ", ".join(quote(c) if c in names else "NULL" for c in common)
        h = f"hash({cols})" if common else "0::UBIGINT"
        values = (
            f"{_label_sql(family, names)} AS label"
            if labels
            else f"{h} AS h, {_text_sql(family, names)} AS t"
        )
        parts.append(
            f"SELECT CAST({quote(key)} AS VARCHAR) AS key, {sql_literal(split)} AS split, {values} FROM {data}"
        )
    return " UNION ALL ".join(parts) or empty


def _lineage_sql(side: Release | None, config: str) -> str:
    """Per key of a config: its documents, revisions, cache keys and chain candidates (lineage.parquet)."""
    path = side.folder / layout.PROVENANCE / config / LINEAGE if side is not None else None
    if path is None or not path.is_file():
        return (
            "SELECT NULL::VARCHAR AS key, NULL::VARCHAR[] AS dids, NULL::VARCHAR[] AS revs, "
            "NULL::VARCHAR[] AS keys, NULL::VARCHAR[] AS cands WHERE false"
        )
    return f"""
        SELECT id AS key,
               list_sort(list_transform(documents, lambda d: d.doc_id)) AS dids,
               list_sort(list_transform(documents,
                   lambda d: d.doc_id || '@' || coalesce(CAST(d.revision AS VARCHAR), ''))) AS revs,
               list_sort(coalesce(cache_keys, [])) AS keys,
               list_filter([id, question_id, twin_pair_id, bridge_pair_id],
                           lambda c: c IS NOT NULL AND c <> '') AS cands
        FROM read_parquet({sql_literal(path)})"""


def _decisions_sql(side: Release | None) -> str:
    path = side.folder / layout.PROVENANCE / DECISIONS if side is not None else None
    if path is None or not path.is_file():
        return (
            "SELECT NULL::VARCHAR AS cid, NULL::VARCHAR AS product, NULL::VARCHAR AS stage, "
            "NULL::VARCHAR AS verdict, NULL::VARCHAR AS reason, NULL::VARCHAR AS detail WHERE false"
        )
    return (
        "SELECT candidate_id AS cid, product, stage, verdict, coalesce(reason, '') AS reason, "
        f"coalesce(detail, '') AS detail FROM read_parquet({sql_literal(path)})"
    )


def _verdicts_sql(side: Release | None, config: str) -> str:
    """A filtered config's verdicts per question (``provenance/<config>/verdicts.parquet``) as strings."""
    path = side.folder / layout.PROVENANCE / config / "verdicts.parquet" if side is not None else None
    if path is None or not path.is_file():
        return "SELECT NULL::VARCHAR AS cid, NULL::VARCHAR AS s WHERE false"
    names = pq.read_schema(path).names
    parts = ", ".join(f"coalesce(CAST({quote(c)} AS VARCHAR), '')" for c in names if c != "id")
    return f"SELECT id AS cid, concat_ws('|', {parts}) AS s FROM read_parquet({sql_literal(path)})"


def _manifest(side: Release | None, config: str) -> dict[str, Any]:
    path = side.folder / layout.PROVENANCE / config / MANIFEST if side is not None else None
    return orjson.loads(path.read_bytes()) if path is not None and path.is_file() else {}


def _manifest_llm(manifest: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The model identities and template versions of a manifest's ``llm_calls`` (every stage)."""
    models, templates = set(), set()
    for calls in (manifest.get("llm_calls") or {}).values():
        for call in calls or []:
            models.add(orjson.dumps(call.get("model"), option=orjson.OPT_SORT_KEYS).decode())
            templates.add(str(call.get("template_version") or ""))
    return models, templates


def cache_databases(*folders: Path, home: Path | None = None) -> list[Path]:
    """The LLM cache databases that may hold a release's calls: the home above each release folder
    (``<home>/releases/<key>``), then ``$RAGSFT_HOME``'s; only those that exist."""
    from ragsft_assets.home import llm_cache_dir, ragsft_home
    from ragsft_assets.llm.cache import DB_NAME

    homes = [f.resolve().parent.parent for f in folders if f.resolve().parent.name == "releases"]
    homes.append(home or ragsft_home())
    out: list[Path] = []
    for h in homes:
        db = llm_cache_dir(h) / DB_NAME
        if db.is_file() and db not in out:
            out.append(db)
    return out


def call_signatures(keys: Iterable[str], databases: Sequence[Path], chunk: int = 500) -> pa.Table:
    """``(key, model, template)`` of the cached calls behind ``keys``, read from the LLM cache databases
    (read-only); a key found in none is absent. ``model`` is ``backend/model/weights``."""
    keys = sorted(set(keys))
    out: dict[str, tuple[str, str]] = {}
    for db in databases:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            wanted = [k for k in keys if k not in out]
            for i in range(0, len(wanted), chunk):
                part = wanted[i : i + chunk]
                rows = con.execute(
                    "SELECT key, backend || '/' || model || '/' || weights_sha256, template_version "
                    f"FROM calls WHERE key IN ({','.join('?' * len(part))})",
                    part,
                ).fetchall()
                out.update({k: (m, t) for k, m, t in rows})
        finally:
            con.close()
    ks = sorted(out)
    return pa.table(
        {
            "key": pa.array(ks, pa.string()),
            "model": pa.array([out[k][0] for k in ks], pa.string()),
            "template": pa.array([out[k][1] for k in ks], pa.string()),
        }
    )


def _fetch(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _iter_column(con: duckdb.DuckDBPyConnection, sql: str, batch: int = 65_536) -> Iterator[str]:
    cur = con.execute(sql)
    while rows := cur.fetchmany(batch):
        for (value,) in rows:
            yield value


def diff_config(
    con: duckdb.DuckDBPyConnection,
    old: Release,
    new: Release,
    config: str,
    *,
    limit: int = 5,
    databases: Sequence[Path] = (),
) -> dict[str, Any]:
    """The diff of one config: counts, per split, the reasons of the changed rows and examples."""
    o = old if config in old.files else None
    n = new if config in new.files else None
    family = (n or o).family(config)  # type: ignore[union-attr]
    schemas = [_schema(s.folder, s.files[config]) for s in (o, n) if s is not None]
    keys = {key_column(s.names, family) for s in schemas}
    if len(schemas) == 2:
        common = [f.name for f in schemas[0] if f.name in schemas[1].names and f.name not in keys]
        columns = {
            "added": sorted(set(schemas[1].names) - set(schemas[0].names) - keys),
            "removed": sorted(set(schemas[0].names) - set(schemas[1].names) - keys),
        }
    else:
        common, columns = [f.name for f in schemas[0] if f.name not in keys], {"added": [], "removed": []}
    for side, rel in (("o", o), ("n", n)):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {side}_rows AS {_rows_sql(rel, config, common)}")
        dup = con.execute(
            f"SELECT key, count(*) FROM {side}_rows GROUP BY key HAVING count(*) > 1 ORDER BY key LIMIT 3"
        ).fetchall()
        if dup:
            raise ValueError(
                f"{(rel or new).folder}: config {config!r} holds key(s) {[d[0] for d in dup]} more than "
                "once; rows are matched by key, so the diff would be wrong (rebuild the release)"
            )
        # Lineage and decisions stay views over their files: only the rows a query joins are read.
        con.execute(f"CREATE OR REPLACE TEMP VIEW {side}_lin AS {_lineage_sql(rel, config)}")
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {side}_dec AS {_decisions_sql(old if side == 'o' else new)}"
        )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE j AS
           SELECT coalesce(n.key, o.key) AS key, o.split AS o_split, n.split AS n_split,
                  coalesce(n.split, o.split) AS split,
                  CASE WHEN o.key IS NULL THEN 'added' WHEN n.key IS NULL THEN 'removed'
                       WHEN o.h = n.h AND o.split = n.split THEN 'unchanged' ELSE 'changed' END AS kind,
                  o.t IS DISTINCT FROM n.t AS text_changed
           FROM o_rows o FULL OUTER JOIN n_rows n ON o.key = n.key"""
    )
    reasons_sql = _changed_reasons(con, old if o else None, new if n else None, config, databases)
    con.execute(f"CREATE OR REPLACE TEMP TABLE chg AS {reasons_sql}")
    _decided(con, "added")
    _decided(con, "removed")

    counts = {k: 0 for k in COUNTS}
    splits: dict[str, dict[str, int]] = {}
    for split, kind, cnt in con.execute(
        "SELECT split, kind, count(*) FROM j GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall():
        counts[kind] += cnt
        splits.setdefault(split, {k: 0 for k in COUNTS})[kind] = cnt
    reasons = dict(
        con.execute(
            "SELECT r, count(*) AS c FROM (SELECT unnest(reasons) AS r FROM chg) GROUP BY r "
            "ORDER BY c DESC, r"
        ).fetchall()
    )
    by_stage = {
        kind: {
            s: c
            for s, c in con.execute(
                f"SELECT coalesce(stage || ': ' || verdict || coalesce(' (' || nullif(reason, '') || ')', ''), "
                f"'absent from the inputs') AS s, count(*) AS c FROM {kind}_by GROUP BY s ORDER BY c DESC, s"
            ).fetchall()
        }
        for kind in ("added", "removed")
    }
    rows = []
    if limit > 0:
        for kind in ("added", "removed"):
            for r in _fetch(
                con,
                f"SELECT '{kind}' AS kind, key AS id, split, stage, verdict, reason, "
                f"was_stage, was_verdict, was_reason FROM {kind}_by ORDER BY key LIMIT {int(limit)}",
            ):
                # stage None: no stage of the new release decided the row (its inputs no longer hold it)
                rows.append({k: v for k, v in r.items() if v is not None or k == "stage"})
        for r in _fetch(
            con,
            "SELECT 'changed' AS kind, key AS id, split, o_split AS old_split, reasons FROM chg "
            f"ORDER BY key LIMIT {int(limit)}",
        ):
            rows.append(
                {k: v for k, v in r.items() if v is not None and (k != "old_split" or v != r["split"])}
            )
    _add_labels(con, rows, o, n, config)
    out: dict[str, Any] = {**counts, "changed_reasons": reasons, "rows": rows}
    out["splits"] = splits
    out["added_by"], out["removed_by"] = by_stage["added"], by_stage["removed"]
    if columns["added"] or columns["removed"]:
        out["columns"] = columns
    return out


def _add_labels(
    con: duckdb.DuckDBPyConnection,
    rows: list[dict[str, Any]],
    old: Release | None,
    new: Release | None,
    config: str,
) -> None:
    """Give each example row its label (title, question), read for those keys only (new side first)."""
    keys = sorted({r["id"] for r in rows})
    if not keys:
        return
    found: dict[str, str] = {}
    for side in (new, old):
        sql = _rows_sql(side, config, (), labels=True)
        found = (
            dict(
                con.execute(
                    f"SELECT key, label FROM ({sql}) WHERE key IN (SELECT unnest($keys))", {"keys": keys}
                ).fetchall()
            )
            | found
        )
    for r in rows:
        label = found.get(r["id"])
        if label is not None:
            r["label"] = label


def _decided(con: duckdb.DuckDBPyConnection, kind: str) -> None:
    """``<kind>_by``: per added (removed) row, the stage of the new release that let it in (dropped
    it), and for an added row what the old release had decided on its chain (``was_*``).

    The chain's candidates come from the lineage of the release holding the row. Let in: the final
    decision of the latest stage. Dropped: the earliest stage that dropped a candidate, else the
    latest decision; none at all: the new inputs no longer hold the row."""
    here = "n" if kind == "added" else "o"
    rank = stage_rank_sql("d.stage")
    dropped_first = f"(d.verdict = 'kept'), CASE WHEN d.verdict = 'kept' THEN -{rank} ELSE {rank} END"
    kept_first = f"(d.verdict = 'kept') DESC, {rank} DESC"

    def chosen(dec: str, order: str) -> str:
        return f"""
            SELECT c.key, d.stage, d.verdict, d.reason FROM (
                SELECT l.key, unnest(l.cands) AS cid FROM {here}_lin l
                WHERE l.key IN (SELECT key FROM j WHERE kind = '{kind}')) c
            JOIN {dec} d ON d.cid = c.cid
            QUALIFY row_number() OVER (PARTITION BY c.key ORDER BY {order}, d.product, d.stage, d.reason) = 1"""

    if kind == "added":
        now, was = chosen("n_dec", kept_first), chosen("o_dec", dropped_first)
    else:
        now = chosen("n_dec", dropped_first)
        was = "SELECT NULL::VARCHAR AS key, NULL::VARCHAR AS stage, NULL::VARCHAR AS verdict, NULL::VARCHAR AS reason WHERE false"
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {kind}_by AS
            SELECT j.key, j.split, a.stage, a.verdict, a.reason,
                   w.stage AS was_stage, w.verdict AS was_verdict, w.reason AS was_reason
            FROM j LEFT JOIN ({now}) a USING (key) LEFT JOIN ({was}) w USING (key)
            WHERE j.kind = '{kind}'"""
    )


def _changed_reasons(
    con: duckdb.DuckDBPyConnection,
    old: Release | None,
    new: Release | None,
    config: str,
    databases: Sequence[Path],
) -> str:
    """The SQL of ``(key, split, o_split, reasons)`` for every changed row (temp tables ``j``,
    ``o_lin``, ``n_lin``, ``o_dec``, ``n_dec`` defined)."""
    con.execute("CREATE OR REPLACE TEMP TABLE ck AS SELECT key FROM j WHERE kind = 'changed'")
    for side, rel in (("o", old), ("n", new)):
        # The verdicts on a row's chain: every product's final decision on each candidate, and a
        # filtered config's filter verdicts on the question.
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE {side}_vsig AS
                SELECT key, list(s ORDER BY s) AS sig FROM (
                    SELECT DISTINCT c.key, s FROM (
                        SELECT l.key, unnest(l.cands) AS cid FROM {side}_lin l SEMI JOIN ck USING (key)) c
                    JOIN (SELECT cid, concat_ws('|', product, stage, verdict, reason, detail) AS s
                          FROM {side}_dec
                          UNION ALL SELECT cid, 'filter|' || s FROM ({_verdicts_sql(rel, config)})) d
                    USING (cid))
                GROUP BY key"""
        )
    # Model identities and template versions behind the cache keys of the rows whose keys changed.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE kd AS
           SELECT ck.key, o.keys AS okeys, n.keys AS nkeys FROM ck
           JOIN o_lin o USING (key) JOIN n_lin n USING (key) WHERE o.keys IS DISTINCT FROM n.keys"""
    )
    wanted = _iter_column(con, "SELECT DISTINCT k FROM (SELECT unnest(okeys || nkeys) AS k FROM kd)")
    calls = call_signatures(wanted, databases) if databases else call_signatures([], [])
    con.register("calls_arrow", calls)
    con.execute("CREATE OR REPLACE TEMP TABLE calls AS SELECT * FROM calls_arrow")
    con.unregister("calls_arrow")
    for side in ("o", "n"):
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE {side}_msig AS
                SELECT u.key, list(DISTINCT c.model ORDER BY c.model) AS models,
                       list(DISTINCT c.template ORDER BY c.template) AS templates
                FROM (SELECT key, unnest({side}keys) AS k FROM kd) u JOIN calls c ON c.key = u.k
                GROUP BY u.key"""
        )
    om, nm = _manifest(old, config), _manifest(new, config)
    recipe = bool(om and nm and om.get("recipes") != nm.get("recipes"))
    (o_models, o_tmpl), (n_models, n_tmpl) = _manifest_llm(om), _manifest_llm(nm)
    # Keys changed but no cached call to read (another machine's release): the manifests' models.
    fallback_model = "true" if om and nm and o_models != n_models else "false"
    fallback_prompt = "true" if om and nm and o_tmpl != n_tmpl else "false"
    revision = (
        "len(list_filter(nl.revs, lambda x: list_contains(ol.dids, split_part(x, '@', 1)) "
        "AND NOT list_contains(ol.revs, x))) > 0"
    )
    looked_up = "(om.key IS NOT NULL OR nm.key IS NOT NULL)"
    flags = {
        "revision": f"coalesce({revision}, false)",
        "text": f"j.text_changed AND NOT coalesce({revision}, false)",
        "documents": "ol.key IS NOT NULL AND nl.key IS NOT NULL AND ol.dids IS DISTINCT FROM nl.dids",
        "split": "j.o_split IS DISTINCT FROM j.n_split",
        "verdict": "ov.sig IS DISTINCT FROM nv.sig",
        "recipe": "true" if recipe else "false",
        "model": f"kd.key IS NOT NULL AND (CASE WHEN {looked_up} THEN om.models IS DISTINCT FROM nm.models "
        f"ELSE {fallback_model} END)",
        "prompt": f"kd.key IS NOT NULL AND (CASE WHEN {looked_up} THEN om.templates IS DISTINCT FROM "
        f"nm.templates ELSE {fallback_prompt} END)",
    }
    listed = ", ".join(f"CASE WHEN {cond} THEN '{name}' END" for name, cond in flags.items())
    return f"""
        SELECT j.key, j.split, j.o_split,
               coalesce(nullif(list_filter([{listed}], lambda x: x IS NOT NULL), []), ['content']) AS reasons
        FROM j LEFT JOIN o_lin ol USING (key) LEFT JOIN n_lin nl USING (key)
        LEFT JOIN o_vsig ov USING (key) LEFT JOIN n_vsig nv USING (key)
        LEFT JOIN kd USING (key) LEFT JOIN o_msig om USING (key) LEFT JOIN n_msig nm USING (key)
        WHERE j.kind = 'changed'"""


def diff_releases(
    old: Release,
    new: Release,
    *,
    configs: Sequence[str] | None = None,
    limit: int = 5,
    databases: Sequence[Path] | None = None,
    memory_limit: str = DUCKDB_MEMORY_LIMIT,
) -> dict[str, Any]:
    """Compare two releases config by config (``--json`` of ``ragsft diff``).

    Returns ``{"old": label, "new": label, "configs": {NAME: {"added", "removed", "changed",
    "unchanged", "changed_reasons", "rows", "splits", "added_by", "removed_by"}}}``: the counts cover
    every row; ``rows`` holds up to ``limit`` examples per kind (in key order); ``splits`` the counts
    per split (a moved row counts in its new split); ``added_by``/``removed_by`` count the rows per
    stage that let them in or dropped them.

    Args:
        old, new: the releases (``resolve_release``).
        configs: the configs to compare (default: every config of either release, in release order).
        limit: example rows per kind and config.
        databases: LLM cache databases for the ``model``/``prompt`` reasons (default
            ``cache_databases`` of both folders).
        memory_limit: DuckDB's memory limit (it spills beyond).

    Raises:
        KeyError: a config of ``configs`` that neither release ships.
    """
    names = list(old.files) + [c for c in new.files if c not in old.files]
    order = {c.name: i for i, c in enumerate(layout.RELEASE_CONFIGS)}
    names.sort(key=lambda c: (order.get(c, len(order)), c))
    if configs:
        unknown = [c for c in configs if c not in names]
        if unknown:
            raise KeyError(f"no config {unknown} in either release: they ship {names}")
        names = [c for c in names if c in set(configs)]
    dbs = list(databases) if databases is not None else cache_databases(old.folder, new.folder)
    out: dict[str, Any] = {"old": old.label, "new": new.label, "configs": {}}
    with connect(memory_limit) as con:
        for name in names:
            out["configs"][name] = diff_config(con, old, new, name, limit=limit, databases=dbs)
    return out


def format_diff(result: Mapping[str, Any]) -> str:
    """The text output of ``ragsft diff``: a short table per config, then examples."""
    from ragsft_assets.table_stats import markdown_table

    lines = [f"diff {result['old']} -> {result['new']}", ""]
    for name, c in result["configs"].items():
        lines += [f"## {name}", ""]
        rows = [(s, *(v[k] for k in COUNTS)) for s, v in c.get("splits", {}).items()]
        rows.append(("all", *(c[k] for k in COUNTS)))
        lines += [markdown_table(["split", *COUNTS], rows), ""]
        if c["changed_reasons"]:
            lines.append("changed because: " + ", ".join(f"{r} {n}" for r, n in c["changed_reasons"].items()))
        for kind in ("added", "removed"):
            if c.get(f"{kind}_by"):
                lines.append(f"{kind} by: " + ", ".join(f"{s} {n}" for s, n in c[f"{kind}_by"].items()))
        if c.get("columns"):
            lines.append(f"columns: {c['columns']}")
        if c["rows"]:
            lines += ["", "examples:"]
            for r in c["rows"]:
                label = f"  {r['label']!r}" if r.get("label") else ""
                if r["kind"] == "changed":
                    moved = f" (from {r['old_split']})" if r.get("old_split") else ""
                    why = ",".join(r["reasons"])
                    lines.append(f"  changed {r['id']} [{r['split']}{moved}] {why}{label}")
                else:
                    stage = (
                        f"{r['stage']}: {r['verdict']}" + (f" ({r['reason']})" if r.get("reason") else "")
                        if r.get("stage")
                        else "absent from the inputs"
                    )
                    was = f"; was {r['was_stage']}: {r['was_verdict']}" if r.get("was_stage") else ""
                    lines.append(f"  {r['kind']:<7} {r['id']} [{r['split']}] {stage}{was}{label}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# --- The release's history: the previous build kept aside, the summary its card shows, review. ---

PREVIOUS_DIR = ".previous"  # releases/.previous/<key>: the build a rebuild replaced (hard links)
PENDING_DIR = ".pending"  # releases/.pending/<key>: a build waiting for `ragsft release promote KEY`


def previous_dir(target: Path) -> Path:
    """Where the release a rebuild replaces is kept: ``releases/.previous/<key>``."""
    return target.parent / PREVIOUS_DIR / target.name


def pending_dir(target: Path) -> Path:
    """Where a build that waits for review is written: ``releases/.pending/<key>``."""
    return target.parent / PENDING_DIR / target.name


def keep_previous(target: Path) -> Path | None:
    """Keep the current release of ``target`` as ``previous_dir(target)`` before it is rebuilt.

    The copy is hard links (no data is copied): every file of a release is replaced by a rename,
    never rewritten in place, so the linked files keep the old bytes. Returns the kept folder, or
    None when there is no release to keep. An older kept build is replaced.
    """
    import shutil

    if not (target / layout.README).is_file():
        return None
    keep = previous_dir(target)
    keep.parent.mkdir(parents=True, exist_ok=True)
    tmp = keep.parent / f".{target.name}.keeping"
    shutil.rmtree(tmp, ignore_errors=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # a filesystem without hard links: copy
            shutil.copy2(src, dst)

    shutil.copytree(target, tmp, copy_function=link, symlinks=True)
    shutil.rmtree(keep, ignore_errors=True)
    os.replace(tmp, keep)
    return keep


def snapshot_language(key: str) -> str:
    """The language of a snapshot key (``20240916.fr`` -> ``fr``; corpus.snapshot_layout's rule)."""
    return key.split(".", 1)[1] if "." in key else ""


def baseline(releases: Path, key: str, reviewing: bool = False) -> tuple[Path, str] | None:
    """What the release of ``key`` is compared with, ``(folder, label)``, or None when nothing is:

    - a build waiting for review (``reviewing``): the release it would replace, when the key has one;
    - a rebuilt key: the build it replaced (``previous_dir``);
    - else the release of the latest earlier snapshot of the same language.
    """
    current = releases / key
    if reviewing and (current / layout.README).is_file():
        return current, key
    kept = previous_dir(current)
    if (kept / layout.README).is_file():
        return kept, f"{key} (previous build)"
    lang, snap = snapshot_language(key), key.split(".", 1)[0]
    earlier = sorted(
        p.name
        for p in (releases.iterdir() if releases.is_dir() else [])
        if p.is_dir()
        and not p.name.startswith(".")
        and (p / layout.README).is_file()
        and snapshot_language(p.name) == lang
        and p.name.split(".", 1)[0] < snap
    )
    return (releases / earlier[-1], earlier[-1]) if earlier else None


# Publishing: "now" swaps each build into releases/<key> (as always); "review" writes the builds the
# sensor and schedule request to releases/.pending/<key>, swapped in by `ragsft release promote KEY`.
PUBLISH_ENV = "RAGSFT_PUBLISH"
PUBLISH_TAG = "ragsft/publish"
PUBLISH_MODES = ("now", "review")


def publish_mode(value: str | None = None) -> str:
    """The publish mode (``$RAGSFT_PUBLISH``, default ``now``).

    Raises:
        ValueError: a value other than ``now`` or ``review``.
    """
    mode = (value if value is not None else os.environ.get(PUBLISH_ENV, "now")).strip().lower() or "now"
    if mode not in PUBLISH_MODES:
        raise ValueError(f"{PUBLISH_ENV}={mode!r}: expected one of {list(PUBLISH_MODES)}")
    return mode


def publish_tags() -> dict[str, str]:
    """The run tags a sensor-triggered rebuild carries so that its release waits for review."""
    return {PUBLISH_TAG: "review"} if publish_mode() == "review" else {}


def changes_path(folder: Path) -> Path:
    """The diff summary a release's card reads: ``releases/.changes/<key>.json``, beside the release
    (everything inside the release folder is listed by its manifests)."""
    return folder.parent / CHANGES_DIR / f"{folder.name}.json"


def release_stamp(folder: Path) -> list[list[Any]]:
    """What identifies one build of a release: its data files' paths, sizes and modification times
    (every build writes new files; the card and manifests leave them alone)."""
    out = []
    for splits in layout.release_files(folder).values():
        for rel in splits.values():
            st = (folder / rel).stat()
            out.append([rel, st.st_size, st.st_mtime_ns])
    return sorted(out)


def write_changes(folder: Path, result: Mapping[str, Any]) -> Path:
    """Record the diff of the release in ``folder`` against its baseline, for its card."""
    from ragsft_assets.storage import atomic_write_bytes

    path = changes_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"stamp": release_stamp(folder), "diff": dict(result)}
    # Keys keep their order (configs in release order, reasons most frequent first): the card reads it.
    return atomic_write_bytes(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def clear_changes(folder: Path) -> None:
    """Forget a release's recorded diff (no baseline this time: the card shows no changes)."""
    changes_path(folder).unlink(missing_ok=True)


def read_changes(folder: Path) -> dict[str, Any] | None:
    """The diff recorded for this very build of the release in ``folder``, else None (none, or one
    recorded for an earlier build of the key)."""
    path = changes_path(folder)
    if not path.is_file():
        return None
    doc = orjson.loads(path.read_bytes())
    try:
        current = release_stamp(folder)
    except (OSError, ValueError):
        return None
    return doc["diff"] if doc.get("stamp") == current else None


def card_section(folder: Path) -> list[str]:
    """The card's "Changes since OLD" section: counts and main reasons per config; [] when no diff
    was recorded for this build (``write_changes``)."""
    from ragsft_assets.table_stats import markdown_table

    result = read_changes(folder)
    if not result:
        return []
    rows = []
    for name, c in result["configs"].items():
        reasons = list(c["changed_reasons"].items())[:CARD_REASONS]
        rows.append(
            (f"`{name}`", *(c[k] for k in COUNTS), ", ".join(f"{r} ({n})" for r, n in reasons) or "-")
        )
    return [
        f"## Changes since `{result['old']}`",
        "",
        markdown_table(["config", *COUNTS, "main reasons"], rows),
        "",
        "A row is matched by its key (`id`, `_id` for questions); `ragsft diff OLD NEW` lists the rows "
        "and their reasons (revision, text, documents, split, verdict, recipe, model, prompt).",
        "",
    ]


def metadata_tables(result: Mapping[str, Any], examples: int = 3) -> tuple[str, str]:
    """Markdown for the ``release_diff`` asset: the counts per config and split, and a few examples."""
    from ragsft_assets.table_stats import markdown_table

    counts = []
    for name, c in result["configs"].items():
        for split, v in c.get("splits", {}).items():
            counts.append((name, split, *(v[k] for k in COUNTS)))
        reasons = ", ".join(f"{r} {n}" for r, n in c["changed_reasons"].items())
        counts.append((name, "all", *(c[k] for k in COUNTS), reasons))
    table = markdown_table(
        ["config", "split", *COUNTS, "changed because"], [(*r, "") if len(r) == 6 else r for r in counts]
    )
    lines = []
    for name, c in result["configs"].items():
        for kind in KINDS:
            for r in [r for r in c["rows"] if r["kind"] == kind][:examples]:
                why = (
                    ",".join(r["reasons"])
                    if kind == "changed"
                    else (r.get("stage") or "absent from the inputs")
                )
                lines.append(f"- `{name}` {kind} `{r['id']}` [{r['split']}]: {why}")
    return table, "\n".join(lines) or "(no row changed)"


def promote(target: Path) -> Path:
    """Swap the build waiting for review (``pending_dir(target)``) into ``target``; the release it
    replaces is kept as ``previous_dir(target)``, and the pending build's diff summary follows it.

    Raises:
        FileNotFoundError: no build waits for review for this key.
    """
    from ragsft_assets.storage import swap_folder

    pending = pending_dir(target)
    if not (pending / layout.README).is_file():
        raise FileNotFoundError(
            f"no release waiting for review at {pending}: build one with publish mode `review` "
            "(RAGSFT_PUBLISH=review), or the key was promoted already"
        )
    keep_previous(target)
    summary = changes_path(pending)
    swap_folder(pending, target)
    if summary.is_file():
        changes_path(target).parent.mkdir(parents=True, exist_ok=True)
        os.replace(summary, changes_path(target))
    return target
