"""The DuckDB catalog: every materialized asset of every partition as a view, for ad-hoc SQL.

``$RAGSFT_HOME/catalog.duckdb`` holds views only (no data): they read the Parquet files where the
assets lie, through globs, so a re-materialized asset is seen without a rebuild; a new asset or
partition needs ``ragsft catalog --rebuild``.

Naming: one schema per partition, the asset name as the view name::

    SELECT reason, count(*) FROM "20240916.fr".decisions GROUP BY 1;
    SELECT * FROM "sample.fr".abstracts LIMIT 5;

(the partition key holds a dot, so it is double-quoted). In ``main``:

- ``main.<asset>``: the asset over all partitions, with a ``partition`` column first;
- ``main.decisions``: every ledger row of every partition; ``main.final_decisions``: one row per
  candidate (the last deciding stage in pipeline order, see ``decisions.py``);
- per partition, ``decisions`` and ``final_decisions`` over its ledger, and ``lineage`` over its
  release's ``provenance/<config>/lineage.parquet`` when a release is built.

One writer: the database is built in a temporary file and renamed into place, so readers
(``read_only=True`` connections) never see a half-built catalog and never block the build.

Root digests: each built release appends ``{folder, partition, digest, run_id, at}`` to
``$RAGSFT_HOME/release_digests.jsonl`` (``record_release_digest``), which lives outside every
release folder and survives catalog rebuilds; the catalog shows it as ``main.release_digests`` and
``ragsft verify FOLDER --catalog`` checks the folder against its latest recorded digest.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ragsft_assets import leftovers
from ragsft_assets.home import assets_dir, ragsft_home, releases_dir
from ragsft_assets.release.decisions import final_decisions_sql
from ragsft_assets.sql import sql_literal
from ragsft_assets.storage import LEDGER_DIR

CATALOG_FILE = "catalog.duckdb"
DIGESTS_FILE = "release_digests.jsonl"


def digests_path(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / DIGESTS_FILE


def record_release_digest(
    folder: Path, partition: str, digest: str, run_id: str = "", home: Path | None = None
) -> Path:
    """Append one line to the digest log: this release folder was built with this root digest.

    One ``write`` of one line on a file opened for appending: concurrent builds never interleave
    their lines (POSIX appends of a few hundred bytes are atomic on local file systems).
    """
    import time

    import orjson

    path = digests_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = orjson.dumps(
        {
            "folder": str(Path(folder).resolve()),
            "partition": partition,
            "digest": digest,
            "run_id": run_id,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)
    return path


def recorded_digest(folder: Path, home: Path | None = None) -> str | None:
    """The latest root digest recorded for release ``folder`` (None when it was never recorded)."""
    import orjson

    path = digests_path(home)
    if not path.is_file():
        return None
    want, found = str(Path(folder).resolve()), None
    for line in path.read_bytes().splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line cut by a crash: the next ones are still read
        if isinstance(entry, dict) and entry.get("folder") == want:
            found = entry.get("digest")
    return found


def catalog_path(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / CATALOG_FILE


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def discover(home: Path) -> dict[str, list[str]]:
    """``{partition: [asset, ...]}`` of every asset folder holding at least one Parquet file."""
    root = assets_dir(home)
    out: dict[str, list[str]] = {}
    if not root.is_dir():
        return out
    for part in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        assets = sorted(
            a.name
            for a in part.iterdir()
            if a.is_dir() and not a.name.startswith(".") and any(a.glob("*.parquet"))
        )
        if assets:
            out[part.name] = assets
    return out


@dataclass(slots=True)
class CatalogSummary:
    path: Path
    views: list[str] = field(default_factory=list)


def build_catalog(home: Path | None = None, db_path: Path | None = None) -> CatalogSummary:
    """(Re)build the catalog database from what is materialized under ``home``; returns its views."""
    home = home or ragsft_home()
    db_path = db_path or catalog_path(home)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    # Named after this process: a build killed mid-way leaves its file (and DuckDB's .wal beside it),
    # which the next build removes once that process is gone (``leftovers``).
    leftovers.remove_stale(db_path.parent, f".{db_path.name}.")
    fd, tmp = tempfile.mkstemp(dir=db_path.parent, prefix=leftovers.owned(f".{db_path.name}."), suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)  # DuckDB wants to create the file itself
    summary = CatalogSummary(db_path)
    con = duckdb.connect(tmp)
    try:
        found = discover(home)
        per_asset: dict[str, list[str]] = {}
        ledgers: list[str] = []
        for partition, assets in found.items():
            con.execute(f"CREATE SCHEMA {_q(partition)}")
            for asset in assets:
                glob = assets_dir(home) / partition / asset / "*.parquet"
                if asset == LEDGER_DIR:
                    name = f"{_q(partition)}.decisions"
                    src = f"SELECT * FROM read_parquet({sql_literal(glob)}, union_by_name=true)"
                    con.execute(f"CREATE VIEW {name} AS {src}")
                    con.execute(f"CREATE VIEW {_q(partition)}.final_decisions AS {final_decisions_sql(src)}")
                    summary.views += [f"{partition}.decisions", f"{partition}.final_decisions"]
                    ledgers.append(name)
                    continue
                con.execute(
                    f"CREATE VIEW {_q(partition)}.{_q(asset)} AS "
                    f"SELECT * FROM read_parquet({sql_literal(glob)}, union_by_name=true)"
                )
                summary.views.append(f"{partition}.{asset}")
                per_asset.setdefault(asset, []).append(partition)
            lineage = sorted((releases_dir(home) / partition / "provenance").glob("*/lineage.parquet"))
            if lineage:
                glob = releases_dir(home) / partition / "provenance" / "*" / "lineage.parquet"
                con.execute(
                    f"CREATE VIEW {_q(partition)}.lineage AS "
                    f"SELECT * FROM read_parquet({sql_literal(glob)}, union_by_name=true)"
                )
                summary.views.append(f"{partition}.lineage")
        for asset, partitions in sorted(per_asset.items()):
            union = " UNION ALL BY NAME ".join(
                f"SELECT {sql_literal(p)} AS partition, * FROM {_q(p)}.{_q(asset)}" for p in partitions
            )
            con.execute(f"CREATE VIEW main.{_q(asset)} AS {union}")
            summary.views.append(asset)
        if ledgers:
            union = " UNION ALL BY NAME ".join(f"SELECT * FROM {n}" for n in ledgers)
            con.execute(f"CREATE VIEW main.decisions AS {union}")
            con.execute(
                f"CREATE VIEW main.final_decisions AS {final_decisions_sql('SELECT * FROM main.decisions')}"
            )
            summary.views += ["decisions", "final_decisions"]
        if digests_path(home).is_file():
            con.execute(
                "CREATE VIEW main.release_digests AS SELECT * FROM read_json("
                f"{sql_literal(digests_path(home))}, format='newline_delimited', ignore_errors=true, "
                "columns={folder: 'VARCHAR', partition: 'VARCHAR', digest: 'VARCHAR', run_id: 'VARCHAR', \"at\": 'VARCHAR'})"
            )
            summary.views.append("release_digests")
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        for leftover in (tmp, tmp + ".wal"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise
    con.close()
    os.replace(tmp, db_path)
    return summary


def open_catalog(home: Path | None = None, rebuild: bool = False) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the catalog, building it first when asked or when it is absent."""
    path = catalog_path(home)
    if rebuild or not path.is_file():
        build_catalog(home, path)
    return duckdb.connect(str(path), read_only=True)


def list_views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """``(schema, view)`` of every view in the catalog, sorted."""
    return [
        (s, v)
        for s, v in con.execute(
            "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1, 2"
        ).fetchall()
    ]
