"""Lineage down to the row: each product id -> question -> bridge pair (a, b) -> documents -> articles.

``provenance/<config>/lineage.parquet`` has one row per product id (``LINEAGE_SCHEMA``). The links
are recovered from the ids, which are derived from inputs (``ids.py``), never from model text:

- SFT row -> question: the row's ``question_id`` column when it has one, else the ``rag_prompts``
  row of the same id, else the question whose ``ids.pair_id(question_id)`` equals the row's
  ``pair_id`` (twins share it), else a question with the row's own id.
- question -> bridge pair: the ``question_drafts`` asset when it carries ``a_id``/``b_id``, else
  the bridge pair whose ``ids.question_id(a_id, b_id, k)`` equals the question id for a draft
  index ``k < max_drafts``.
- documents: for a question, its context titles (gold = supporting-fact titles); for an SFT row,
  the ``* filename: <title>`` lines of the prompt (the documents the model really saw); ids are
  ``ids.doc_id(title)``, joined with ``abstracts`` for the identifier, URL and revision.
- cache keys: every ledger row whose candidate is the row, its question, its twin pair or its
  bridge pair.

Everything is computed by DuckDB over the Parquet files (``LineageSources.register`` defines the
lookup views, ``lineage_sql`` the query of one config) and streamed into the lineage file: no table
of the partition becomes Python rows, so the lineage of 800,000 abstracts fits in bounded memory.
The SQL reproduces the Python definitions exactly: ids are SHA-256 in DuckDB (``ids.py``'s
formula), titles are stripped of what ``str.strip`` strips, a repeated id keeps its last row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.arrow_schemas import STRING_LIST, strings
from ragsft_assets.release.stream import PROVENANCE_GROUP_ROWS, SplitSource, quote, scan_sql, write_batches
from ragsft_assets.sql import sql_list, sql_literal
from ragsft_assets.storage import asset_files

DOC_STRUCT = pa.struct(
    [
        *strings("doc_id", "title"),
        ("role", pa.string()),  # "self" | "gold_a" | "gold_b" | "gold" | "context"
        ("identifier", pa.int64()),
        ("url", pa.string()),
        ("revision", pa.int64()),
    ]
)
LINEAGE_SCHEMA = pa.schema(
    [
        *strings("config", "id", "question_id", "twin_pair_id", "bridge_pair_id", "a_id", "b_id"),
        ("doc_ids", STRING_LIST),
        ("documents", pa.list_(DOC_STRUCT)),
        ("cache_keys", STRING_LIST),
        ("resolution", pa.string()),  # how the question -> pair link was found
    ]
)
FILENAME_RE = re.compile(r"^\* filename: (.*)$", re.MULTILINE)
FILENAME_SQL = r"(?m)^\* filename: (.*)$"  # FILENAME_RE in RE2 (DuckDB's regexes)
# What str.strip() and str.split() treat as whitespace, as code points (derived, not listed by hand).
WHITESPACE = tuple(c for c in range(0x110000) if chr(c).isspace())


def whitespace_chars_sql() -> str:
    """A SQL string of every character ``str.strip`` strips (for DuckDB's ``trim(s, chars)``)."""
    return "(" + " || ".join(f"chr({c})" for c in WHITESPACE) + ")"


def whitespace_class() -> str:
    """The RE2 character class body of Python's whitespace (``[^...]+`` is one ``str.split`` word)."""
    return "".join(f"\\x{{{c:x}}}" for c in WHITESPACE)


def doc_id_sql(title: str) -> str:
    """``ids.doc_id`` in SQL: the first 24 hex chars of SHA-256 of the title."""
    return f"substr(sha256({title}), 1, 24)"


def derived_id_sql(*parts: str) -> str:
    """``ids.derived_id`` in SQL over SQL expressions (``str(None)`` is ``'None'``, as in Python)."""
    joined = ", ".join(f"coalesce(CAST({p} AS VARCHAR), 'None')" for p in parts)
    return f"substr(sha256(concat_ws(chr(31), {joined})), 1, 24)"


# Product rows per lineage query: DuckDB joins, aggregates and sorts one id range at a time.
LINEAGE_RANGE_ROWS = 50_000
TWIN_SQL = derived_id_sql("'pair'", "id")  # ids.pair_id(question id)
PAIR_SQL = derived_id_sql("'bridge_pair'", "d.a", "d.b")  # bridge_pairs.pair_key(a, b)


def _files(assets_root: Path, partition: str, asset: str) -> list[Path]:
    return asset_files(partition, asset, assets_root)


def _columns(files: Sequence[Path]) -> set[str]:
    names: set[str] = set()
    for f in files:
        names |= set(pq.read_schema(f).names)
    return names


def _col(names: set[str], name: str, sql_type: str, expr: str | None = None) -> str:
    """``expr`` (default the column) when the files have ``name``, else a typed NULL."""
    return (
        f"{expr or quote(name)} AS {quote(name)}" if name in names else f"NULL::{sql_type} AS {quote(name)}"
    )


def _last_row_per(key: str) -> str:
    # A repeated key keeps its last row in file order, as a dict filled row by row does.
    return f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY _fidx DESC, _rn DESC) = 1"


class LineageSources:
    """The upstream Parquet files of one partition, as DuckDB lookup views (read by every config).

    Args:
        assets_root: the assets folder (``$RAGSFT_HOME/assets``).
        partition: the snapshot key.
        ledger: the ledger files (``decisions.ledger_files``); None: no cache keys.
        max_drafts: draft indexes tried when a question is resolved from the bridge pairs.
    """

    def __init__(
        self,
        assets_root: Path,
        partition: str,
        ledger: Sequence[Path] | None = None,
        max_drafts: int = 10,
    ) -> None:
        self.assets_root = Path(assets_root)
        self.partition = partition
        self.ledger = list(ledger or [])
        self.max_drafts = max_drafts

    def register(self, con: duckdb.DuckDBPyConnection) -> None:
        """Define the views ``lin_articles``, ``lin_questions``, ``lin_twins``, ``lin_examples``,
        ``lin_pairs`` (question -> bridge pair) and ``lin_keys`` (candidate -> cache key) on ``con``."""
        files = lambda asset: _files(self.assets_root, self.partition, asset)  # noqa: E731

        def view(name: str, fs: list[Path], select: str, empty: str) -> None:
            body = select.format(scan=scan_sql(fs)) if fs else f"SELECT {empty} WHERE false"
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {body}")

        fs = files("abstracts")
        names = _columns(fs)
        view(
            "lin_articles",
            fs,
            f"SELECT {_col(names, 'id', 'VARCHAR')}, {_col(names, 'identifier', 'BIGINT')}, "
            f"{_col(names, 'url', 'VARCHAR')}, {_col(names, 'revision', 'BIGINT')} FROM {{scan}} "
            + _last_row_per("id"),
            "NULL::VARCHAR AS id, NULL::BIGINT AS identifier, NULL::VARCHAR AS url, NULL::BIGINT AS revision",
        )
        fs = files("multihop_questions")
        names = _columns(fs)
        view(
            "lin_questions",
            fs,
            f"SELECT id, {_col(names, 'supporting_facts', 'VARCHAR[]', 'supporting_facts.title')} , "
            f"{_col(names, 'context', 'VARCHAR[]', 'context.title')} FROM {{scan}} " + _last_row_per("id"),
            "NULL::VARCHAR AS id, NULL::VARCHAR[] AS supporting_facts, NULL::VARCHAR[] AS context",
        )
        con.execute(
            "CREATE OR REPLACE TEMP TABLE lin_twins AS "
            f"SELECT {TWIN_SQL} AS twin, id AS qid FROM lin_questions"
        )
        fs = files("rag_prompts")
        has_qid = "question_id" in _columns(fs)
        view(
            "lin_examples",
            fs if has_qid else [],
            "SELECT id, question_id FROM {scan} " + _last_row_per("id"),
            "NULL::VARCHAR AS id, NULL::VARCHAR AS question_id",
        )
        fs = files("bridge_pairs")
        view(
            "lin_pair_ids",
            fs,
            "SELECT a_id, b_id, id AS pid, _fidx, _rn FROM {scan} " + _last_row_per("a_id, b_id"),
            "NULL::VARCHAR AS a_id, NULL::VARCHAR AS b_id, NULL::VARCHAR AS pid, 0 AS _fidx, 0 AS _rn",
        )
        fs = files("question_drafts")
        names = _columns(fs)
        qcol = "question_id" if "question_id" in names else "id"
        pid = f"coalesce(nullif(p.pid, ''), {PAIR_SQL})"
        view(
            "lin_drafts",
            fs if {"a_id", "b_id"} <= names else [],
            f"SELECT d.q AS qid, {pid} AS pid, d.a, d.b, 'question_drafts' AS how FROM "
            f"(SELECT {quote(qcol)} AS q, a_id AS a, b_id AS b FROM {{scan}} {_last_row_per(quote(qcol))}) d "
            "LEFT JOIN lin_pair_ids p ON p.a_id IS NOT DISTINCT FROM d.a AND p.b_id IS NOT DISTINCT FROM d.b",
            "NULL::VARCHAR AS qid, NULL::VARCHAR AS pid, NULL::VARCHAR AS a, NULL::VARCHAR AS b, "
            "NULL::VARCHAR AS how",
        )
        wanted = (
            "SELECT id FROM lin_questions q WHERE NOT EXISTS (SELECT 1 FROM lin_drafts d WHERE d.qid = q.id)"
        )
        pairs = "SELECT qid, pid, a, b, how FROM lin_drafts"
        # Questions no draft names: the pair whose question_id(a, b, k) is theirs, for k < max_drafts.
        if (
            con.execute(f"SELECT count(*) FROM ({wanted})").fetchall()[0][0]
            and con.execute("SELECT count(*) FROM lin_pair_ids").fetchall()[0][0]
        ):
            qid = derived_id_sql("'question'", "a_id", "b_id", "k")
            pairs += (
                " UNION ALL SELECT q AS qid, pid, a_id AS a, b_id AS b, 'bridge_pairs' AS how FROM ("
                f"SELECT {qid} AS q, pid, a_id, b_id, _fidx, _rn FROM lin_pair_ids, range({int(self.max_drafts)}) r(k)"
                f") WHERE q IN ({wanted}) "
                "QUALIFY row_number() OVER (PARTITION BY q ORDER BY _fidx DESC, _rn DESC) = 1"
            )
        con.execute(f"CREATE OR REPLACE TEMP TABLE lin_pairs AS {pairs}")
        if self.ledger:
            keys = (
                "SELECT DISTINCT candidate_id AS cid, k AS key FROM ("
                f"SELECT candidate_id, unnest(cache_keys) AS k FROM read_parquet({sql_list(self.ledger)}, "
                "union_by_name=true)) WHERE k IS NOT NULL AND coalesce(candidate_id, '') <> ''"
            )
        else:
            keys = "SELECT NULL::VARCHAR AS cid, NULL::VARCHAR AS key WHERE false"
        con.execute(f"CREATE OR REPLACE TEMP TABLE lin_keys AS {keys}")


def _product_sql(
    sources: Sequence[SplitSource], exprs: dict[str, tuple[str, str, str | None]], condition: str = ""
) -> str:
    """The rows of a config's splits (in split order) with the columns the lineage reads.

    ``exprs``: ``{alias: (column, sql type, expression or None)}``; a column absent from a split is NULL.
    """
    parts = []
    for i, src in enumerate(sources):
        # The upstream's columns, not only the shipped ones: a config that ships no `id` (the RAG SFT
        # configs' three fields) still has its rows' ids, twins and questions in its asset.
        names = set(src.schema.names) | _columns(src.files)
        cols = [
            _col(names, col, typ, expr).rsplit(" AS ", 1)[0] + f" AS {alias}"
            for alias, (col, typ, expr) in exprs.items()
        ]
        parts.append(src.select_sql([], [*cols, f"{i} AS _sidx", "_fidx", "_rn"], condition))
    return " UNION ALL ".join(parts)


def _documents_sql(rows: str, role: str) -> str:
    """Per row key, its documents in title order: ``rows`` has ``_sidx, _fidx, _rn, titles`` + the role's columns."""
    return f"""
        SELECT _sidx, _fidx, _rn,
               list({{'doc_id': did, 'title': title, 'role': {role}, 'identifier': a.identifier,
                      'url': a.url, 'revision': a.revision}} ORDER BY pos) AS documents
        FROM (SELECT *, {doc_id_sql("title")} AS did
              FROM (SELECT *, unnest(titles) AS title, generate_subscripts(titles, 1) AS pos FROM ({rows})))
        LEFT JOIN lin_articles a ON a.id = did
        GROUP BY _sidx, _fidx, _rn"""


def _keys_sql(rows: str, candidates: str) -> str:
    return f"""
        SELECT _sidx, _fidx, _rn, list(DISTINCT k.key ORDER BY k.key) AS cache_keys
        FROM (SELECT _sidx, _fidx, _rn, unnest({candidates}) AS cid FROM ({rows})) c
        JOIN lin_keys k ON k.cid = c.cid
        GROUP BY _sidx, _fidx, _rn"""


ROLE_SQL = (
    "CASE WHEN did = a THEN 'gold_a' WHEN did = b THEN 'gold_b' "
    "WHEN list_contains(gold, title) THEN 'gold' ELSE 'context' END"
)


def lineage_sql(config: str, family: str, sources: Sequence[SplitSource], condition: str = "") -> str:
    """The lineage rows of one config (``LINEAGE_SCHEMA``, sorted by id), over the views of ``register``.

    Args:
        config: the release config name.
        family: ``corpus``, ``multihop`` or ``rag_sft``: how the product's rows are made.
        sources: the config's split sources (``stream.plan_configs``), in split order.
        condition: an SQL condition on the product rows (e.g. an id range), default every row.
    """
    cfg = sql_literal(config)
    order = "ORDER BY f.id NULLS LAST, f._sidx, f._fidx, f._rn"
    if family == "corpus":
        product = _product_sql(
            sources, {"id": ("id", "VARCHAR", None), "title": ("title", "VARCHAR", None)}, condition
        )
        return f"""
            SELECT {cfg} AS config, f.id, NULL::VARCHAR AS question_id, NULL::VARCHAR AS twin_pair_id,
                   NULL::VARCHAR AS bridge_pair_id, NULL::VARCHAR AS a_id, NULL::VARCHAR AS b_id,
                   [f.did] AS doc_ids,
                   [{{'doc_id': f.did, 'title': f.title, 'role': 'self', 'identifier': a.identifier,
                      'url': a.url, 'revision': a.revision}}] AS documents,
                   []::VARCHAR[] AS cache_keys, 'document' AS resolution
            FROM (SELECT id, coalesce(title, '') AS title, {doc_id_sql("coalesce(title, '')")} AS did,
                         _sidx, _fidx, _rn FROM ({product})) f
            LEFT JOIN lin_articles a ON a.id = f.did
            {order}"""
    if family == "multihop":
        product = _product_sql(
            sources,
            {
                "id": ("id", "VARCHAR", None),
                "own_gold": ("supporting_facts", "VARCHAR[]", "supporting_facts.title"),
                "own_titles": ("context", "VARCHAR[]", "context.title"),
            },
            condition,
        )
        # The question's own row when multihop_questions has it, else the product row's.
        resolved = f"""
            SELECT p.id, p._sidx, p._fidx, p._rn,
                   CASE WHEN q.id IS NOT NULL THEN q.supporting_facts ELSE p.own_gold END AS gold,
                   CASE WHEN q.id IS NOT NULL THEN q.context ELSE p.own_titles END AS titles,
                   nullif(p.id, '') AS qid, NULL::VARCHAR AS twin
            FROM ({product}) p LEFT JOIN lin_questions q ON q.id = p.id"""
        candidates = "[id, pid]"
    else:
        keep = "lambda m: m.role IS DISTINCT FROM 'assistant'"
        prompt = (
            f"array_to_string(list_transform(list_filter(coalesce(messages, []), {keep}), "
            "lambda m: coalesce(m.content, '')), chr(10))"
        )
        titles = (
            f"list_transform(regexp_extract_all({prompt}, {sql_literal(FILENAME_SQL)}, 1), "
            f"lambda t: trim(t, {whitespace_chars_sql()}))"
        )
        product = _product_sql(
            sources,
            {
                "id": ("id", "VARCHAR", None),
                "twin": ("pair_id", "VARCHAR", None),
                "own_qid": ("question_id", "VARCHAR", None),
                "gold": ("supporting_facts_titles", "VARCHAR[]", None),
                "titles": ("messages", "VARCHAR[]", titles),
            },
            condition,
        )
        # qid: the row's question_id, else rag_prompts', else the question of its twin pair, else itself.
        resolved = f"""
            SELECT p.id, p._sidx, p._fidx, p._rn, p.gold, p.titles, p.twin,
                   coalesce(nullif(p.own_qid, ''), nullif(e.question_id, ''), nullif(t.qid, ''),
                            CASE WHEN q.id IS NOT NULL THEN nullif(p.id, '') END) AS qid
            FROM ({product}) p
            LEFT JOIN lin_examples e ON e.id = p.id
            LEFT JOIN lin_twins t ON t.twin = coalesce(p.twin, '')
            LEFT JOIN lin_questions q ON q.id = p.id"""
        candidates = "[id, twin, qid, pid]"
    rows = f"""
        SELECT r.*, lp.pid, lp.a, lp.b,
               CASE WHEN r.qid IS NULL THEN 'none' ELSE coalesce(lp.how, 'none') END AS how
        FROM ({resolved}) r LEFT JOIN lin_pairs lp ON lp.qid = r.qid"""
    return f"""
        WITH f AS ({rows}), d AS ({_documents_sql("SELECT * FROM f", ROLE_SQL)}),
             k AS ({_keys_sql("SELECT * FROM f", candidates)})
        SELECT {cfg} AS config, f.id, f.qid AS question_id, f.twin AS twin_pair_id,
               f.pid AS bridge_pair_id, f.a AS a_id, f.b AS b_id,
               coalesce(list_transform(d.documents, lambda x: x.doc_id), []) AS doc_ids,
               coalesce(d.documents, []) AS documents, coalesce(k.cache_keys, []) AS cache_keys,
               f.how AS resolution
        FROM f LEFT JOIN d USING (_sidx, _fidx, _rn) LEFT JOIN k USING (_sidx, _fidx, _rn)
        {order}"""


def id_ranges(con: duckdb.DuckDBPyConnection, sources: Sequence[SplitSource], rows: int) -> list[str]:
    """SQL conditions cutting the product into id ranges of about ``rows`` rows, in id order.

    The lineage of each range is sorted on its own and the ranges follow each other, so their
    concatenation is the lineage sorted by id, while DuckDB only ever holds one range's rows.
    Equal ids fall in one range; null ids in the last.
    """
    union = " UNION ALL ".join(src.select_sql(["id"]) for src in sources)
    n = con.execute(f"SELECT count(*) FROM ({union})").fetchall()[0][0]
    parts = -(-n // rows) if rows > 0 else 1
    if parts <= 1:
        return [""]
    qs = ", ".join(str(i / parts) for i in range(1, parts))
    cuts = con.execute(f"SELECT quantile_disc(id, [{qs}]) FROM ({union})").fetchall()[0][0] or []
    cuts = sorted({c for c in cuts if c is not None})
    conds = [f"id <= {sql_literal(cuts[0])}"] if cuts else []
    conds += [
        f"id > {sql_literal(lo)} AND id <= {sql_literal(hi)}" for lo, hi in zip(cuts, cuts[1:], strict=False)
    ]
    conds.append(f"id > {sql_literal(cuts[-1])} OR id IS NULL" if cuts else "")
    return conds


def write_lineage(
    con: duckdb.DuckDBPyConnection,
    config: str,
    family: str,
    sources: Sequence[SplitSource],
    path: Path,
    range_rows: int = LINEAGE_RANGE_ROWS,
) -> int:
    """Write ``provenance/<config>/lineage.parquet`` from ``lineage_sql``, id range by id range.

    ``LineageSources.register`` must have defined its tables on ``con``. Returns the row count.
    """

    def batches() -> Iterator[pa.RecordBatch]:
        for cond in id_ranges(con, sources, range_rows):
            yield from con.sql(lineage_sql(config, family, sources, cond)).to_arrow_reader(
                PROVENANCE_GROUP_ROWS
            )

    return write_batches(batches(), path, LINEAGE_SCHEMA, PROVENANCE_GROUP_ROWS)


IDS_FILE = "ids.parquet"  # provenance/<config>/ids.parquet: the ids of a config that ships none
IDS_SCHEMA = pa.schema(
    [("split", pa.string()), ("row", pa.int64()), ("id", pa.string()), ("pair_id", pa.string())]
)


def write_product_ids(con: duckdb.DuckDBPyConnection, splits: dict[str, SplitSource], path: Path) -> int:
    """Write ``provenance/<config>/ids.parquet``: per split, each data row's position (``row``, in the
    data file's order: release order, by id) with its ``id`` and twin ``pair_id``.

    For a config whose data file ships no ``id`` (the Luciole RAG card: "Each row has three
    fields"): ``ragsft explain ID`` reads the ids' lineage, this file ties them to the rows. Returns
    the rows written (0, and no file, when the upstream has no ``id``).
    """
    sources = {name: src for name, src in splits.items() if src.files}
    if not sources or "id" not in _columns(next(iter(sources.values())).files):
        return 0

    def batches() -> Iterator[pa.RecordBatch]:
        for name, src in sources.items():
            names = _columns(src.files)
            pair = "pair_id" if "pair_id" in names else "NULL::VARCHAR"
            rows = src.select_sql(["id"], [f"{pair} AS pair_id", "_fidx", "_rn"])
            # The data file's order is release order (by id, stable: stream.write_config_files),
            # which is the upstream's file order only when the upstream came sorted.
            order = src.order_sql
            sql = (
                f"SELECT {sql_literal(name)} AS split, (row_number() OVER (ORDER BY {order}) - 1)::BIGINT "
                f"AS row, id, pair_id FROM ({rows}) ORDER BY {order}"
            )
            yield from con.sql(sql).to_arrow_reader(PROVENANCE_GROUP_ROWS)

    return write_batches(batches(), path, IDS_SCHEMA, PROVENANCE_GROUP_ROWS)
