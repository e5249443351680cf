"""The content-addressed LLM call cache: one SQLite database in WAL mode.

Key = SHA-256 of (model identity incl. weights hash, sampling parameters, messages, JSON
schema, prompt template version, key format version). Value = the request and the
response. Why SQLite in WAL mode: several processes (Dagster steps, CLI, tests) read and
write at once with readers never blocked; each completed call is committed on its own, so
a killed process loses only the calls in flight; ``INSERT OR IGNORE`` makes two processes
that answered the same call harmless (same key = same request; the first answer stays).

Shared across partitions and configs: the database lives in ``$RAGSFT_HOME/llm_cache/``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm.types import Message, SamplingParams

KEY_FORMAT = "ragsft-llm-cache/1"  # bump when the key's layout changes: old entries become unreachable
DB_NAME = "calls.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    weights_sha256 TEXT NOT NULL,
    template_version TEXT NOT NULL,
    request BLOB NOT NULL,
    response BLOB NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_model ON calls (model, template_version);
"""


def request_record(
    identity: Mapping[str, str],
    params: SamplingParams,
    messages: Sequence[Message],
    json_schema: Mapping[str, Any] | None,
    template_version: str,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    prompt: str | None = None,
) -> dict[str, Any]:
    """The canonical request a key is the hash of (also what ``ragsft cache show`` prints).

    ``chat_template_kwargs`` and ``prompt`` (a raw completion) enter the record only when set,
    so the keys of plain chat calls made before they existed are unchanged.
    """
    record: dict[str, Any] = {
        "format": KEY_FORMAT,
        "model": {k: identity[k] for k in sorted(identity)},
        "params": params.to_dict(),
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "json_schema": json_schema,
        "template_version": template_version,
    }
    if chat_template_kwargs:
        record["chat_template_kwargs"] = dict(chat_template_kwargs)
    if prompt is not None:
        record["kind"] = "completion"  # a completion never shares a key with a chat
        record["prompt"] = prompt
    return record


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace; a schema's key order does not change its key."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def cache_key(
    identity: Mapping[str, str],
    params: SamplingParams,
    messages: Sequence[Message],
    json_schema: Mapping[str, Any] | None = None,
    template_version: str = "",
    chat_template_kwargs: Mapping[str, Any] | None = None,
    prompt: str | None = None,
) -> str:
    """The content address of one call (64 hex chars). Any changed input gives another key."""
    return sha256_hex(
        canonical_json(
            request_record(
                identity, params, messages, json_schema, template_version, chat_template_kwargs, prompt
            )
        )
    )


# Columns of ``LLMCache.stats()`` rows, in display order.
STATS_COLUMNS = (
    "backend",
    "model",
    "weights",
    "template_version",
    "entries",
    "prompt_tokens",
    "completion_tokens",
)


PAGE_CACHE_KIB = 256  # per connection (thread)


class SQLiteCache:
    """A content-addressed SQLite database in WAL mode, one connection per thread (a base class).

    What the LLM call cache and the embedding cache (``resources.embedder``) share: the file
    ``<folder>/<db_name>``, the schema created on open, the per-thread connections (SQLite
    connections must not cross threads), keyed lookups in bounded batches, ``len`` and ``close``.

    Args:
        folder: the cache folder (created if absent).
        busy_timeout_s: how long a writer waits for another process's write lock.
    """

    DB_NAME = ""  # the database file, set by each cache
    TABLE = ""  # its table, keyed by ``key``
    SCHEMA = ""  # CREATE statements run on open

    def __init__(self, folder: str | Path, busy_timeout_s: float = 60.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / self.DB_NAME
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        with self._conn() as c:
            c.executescript(self.SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a process crash (only an OS crash can lose the last commits).
            conn.execute("PRAGMA synchronous=NORMAL")
            # a small page cache per connection: the multihop stream runs a thousand threads, each
            # with its own (2 MB each by default: gigabytes); the OS page cache serves re-reads
            conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
            self._local.conn = conn
        return conn

    def _values(self, column: str, keys: Iterable[str]) -> Iterable[tuple[str, Any]]:
        """(key, column value) of the keys present, each key once."""
        keys = list(dict.fromkeys(keys))
        conn = self._conn()
        # one statement whatever the number of keys (a JSON list as its one parameter): an IN list
        # of as many ``?`` as keys was a new prepared statement per count, and each connection
        # caches 128 of them, about 4 MB; with a stream's hundreds of threads (a connection each)
        # that was a gigabyte of bench fleet's peak RSS at 20,000 pairs. As fast (tested).
        sql = f"SELECT key, {column} FROM {self.TABLE} WHERE key IN (SELECT value FROM json_each(?))"
        for start in range(0, len(keys), 5000):
            yield from conn.execute(sql, (orjson.dumps(keys[start : start + 5000]).decode(),))

    def __len__(self) -> int:
        return self._conn().execute(f"SELECT count(*) FROM {self.TABLE}").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class LLMCache(SQLiteCache):
    """The cache database at ``<folder>/calls.sqlite``; one connection per thread.

    Args:
        folder: the cache folder (created if absent).
        busy_timeout_s: how long a writer waits for another process's write lock.
    """

    DB_NAME = DB_NAME
    TABLE = "calls"
    SCHEMA = _SCHEMA

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Responses of the keys present (key -> response dict)."""
        return {key: orjson.loads(resp) for key, resp in self._values("response", keys)}

    def put(self, key: str, request: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        """Persist one completed call now (its own transaction: durable as soon as this returns)."""
        model = request["model"]
        self._conn().execute(
            "INSERT OR IGNORE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                key,
                model.get("backend", ""),
                model.get("model", ""),
                model.get("weights_sha256", ""),
                request.get("template_version", ""),
                canonical_json(request),
                canonical_json(response),
                int(response.get("prompt_tokens", 0)),
                int(response.get("completion_tokens", 0)),
                time.time(),
            ),
        )

    def show(self, key_or_prefix: str) -> dict[str, Any] | None:
        """The stored call whose key is or starts with ``key_or_prefix`` (None when absent).

        Raises:
            ValueError: the prefix matches several keys.
        """
        rows = (
            self._conn()
            .execute(
                "SELECT key, request, response, created FROM calls WHERE key >= ? AND key < ? LIMIT 2",
                (key_or_prefix, key_or_prefix + "\U0010ffff"),
            )
            .fetchall()
        )
        if not rows:
            return None
        if len(rows) > 1:
            raise ValueError(f"key prefix {key_or_prefix!r} is ambiguous")
        key, req, resp, created = rows[0]
        return {"key": key, "created": created, "request": orjson.loads(req), "response": orjson.loads(resp)}

    def stats(self) -> list[dict[str, Any]]:
        """Entries and tokens per (backend, model, weights, template version), largest first."""
        rows = self._conn().execute(
            "SELECT backend, model, substr(weights_sha256, 1, 12), template_version, count(*),"
            " sum(prompt_tokens), sum(completion_tokens) FROM calls"
            " GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC, 2, 4"
        )
        return [dict(zip(STATS_COLUMNS, r, strict=True)) for r in rows]
