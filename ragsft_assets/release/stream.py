"""Release files written from DuckDB queries in bounded memory (Dagster-free).

A release at full Wikipedia scale (800,000 abstracts, 100,000 questions) does not fit in memory as
Arrow tables, let alone as Python rows: every data file, the decisions and the lineage are streamed
batch by batch into a Parquet writer. A data file whose upstream rows already come sorted by id
(what the assets write) streams straight from the upstream files as Arrow batches; otherwise DuckDB
ranks its keys and the rows are sorted through bucket files on disk (``write_sorted``: DuckDB's own
sort of wide rows ran out of memory at full scale). The decisions and the lineage come from DuckDB
queries over the Parquet files, which sort under a memory limit and spill to a temp folder of their
own.

Bytes stay deterministic and match ``storage.write_parquet`` (the same writer options): a file
of at most ``rows_per_group`` rows is one row group with one chunk per column, exactly what
``pq.write_table`` writes for the same table; a longer file is cut into row groups of
``rows_per_group`` rows, a count fixed from the inputs, never from DuckDB's batch boundaries.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ragsft_assets.release.layout import RELEASE_CONFIGS, ReleaseConfig, data_file
from ragsft_assets.sql import sql_list, sql_literal
from ragsft_assets.storage import PARQUET_OPTIONS, SPLITS, asset_files, replacing

# DuckDB's share of the release's memory: its sorts and hash tables spill beyond this.
DUCKDB_MEMORY_LIMIT = os.environ.get("RAGSFT_RELEASE_DUCKDB_MEMORY", "640MB")
# A row group holds about this many bytes of Arrow memory (measured on the upstream files' first rows).
ROW_GROUP_BYTES = 64 << 20
MAX_GROUP_ROWS = 1024 * 1024  # pq.write_table's own default: small tables stay one row group
MIN_GROUP_ROWS = 1024
PROVENANCE_GROUP_ROWS = 65_536  # lineage and decision rows are small (ids, a few documents)


@contextmanager
def connect(
    memory_limit: str = DUCKDB_MEMORY_LIMIT, spill_in: Path | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection with a memory limit and a private spill folder (removed after).

    ``spill_in``: where the spill folder goes (the release's staging folder, so that a killed build
    leaves it where the next build's cleanup removes it); default the system temp folder.
    """
    spill = tempfile.mkdtemp(prefix=".duckdb-spill-", dir=spill_in)
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = {sql_literal(memory_limit)}")
        con.execute(f"SET temp_directory = {sql_literal(spill)}")
        # Every query whose order matters says ORDER BY; the rest need not keep scan order in memory.
        con.execute("SET preserve_insertion_order = false")
        yield con
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
        # Arrow's allocator keeps freed blocks for a while: hand them back before the next step's
        # DuckDB takes its own share, so the two never add up.
        pa.default_memory_pool().release_unused()


def _group_batches(reader: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Re-cut a stream of batches into batches of exactly ``rows`` rows (the last may be shorter)."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in reader:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        have += batch.num_rows
        while have >= rows:
            take, out = rows, []
            while take:
                head = pending[0]
                if head.num_rows <= take:
                    out.append(head)
                    take -= head.num_rows
                    pending.pop(0)
                else:
                    out.append(head.slice(0, take))
                    pending[0] = head.slice(take)
                    take = 0
            have -= rows
            yield out[0] if len(out) == 1 else pa.Table.from_batches(out).combine_chunks().to_batches()[0]
    if pending:
        yield (
            pending[0]
            if len(pending) == 1
            else pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
        )


def write_batches(
    batches: Iterator[pa.RecordBatch], path: Path, schema: pa.Schema, rows_per_group: int
) -> int:
    """Write ``batches`` to ``path`` atomically in row groups of ``rows_per_group`` rows, cast to ``schema``."""
    n = 0
    # owner-named temp file: a killed writer's is removed by the next write of the same path
    with replacing(path) as tmp, pq.ParquetWriter(tmp, schema, **PARQUET_OPTIONS) as writer:
        for batch in _group_batches(batches, rows_per_group):
            writer.write_table(pa.Table.from_batches([batch.cast(schema)]))
            n += batch.num_rows
        if n == 0:
            writer.write_table(schema.empty_table())
    return n


def write_query(
    con: duckdb.DuckDBPyConnection, sql: str, path: Path, schema: pa.Schema, rows_per_group: int
) -> int:
    """Write the rows of ``sql`` to ``path`` (atomically), cast to ``schema``; returns the row count.

    The writer options are ``storage.PARQUET_OPTIONS``, those of ``storage.write_parquet``.
    """
    return write_batches(iter(con.sql(sql).to_arrow_reader(rows_per_group)), path, schema, rows_per_group)


def unified_schema(files: Sequence[Path]) -> pa.Schema:
    """The schema ``pa.concat_tables(..., promote_options="default")`` would give these files."""
    schemas = [pq.read_schema(f) for f in files]
    if len(schemas) == 1:
        return schemas[0]
    return pa.unify_schemas(schemas, promote_options="default")


def group_rows(src: SplitSource, ranks: np.ndarray | None = None) -> int:
    """Rows per row group for a split: about ``ROW_GROUP_BYTES`` of Arrow memory per group.

    The size of a row is measured on the split's first ``MIN_GROUP_ROWS`` rows in release order, as
    Arrow holds them once rebuilt from their values (the Parquet footer's sizes are encoded sizes:
    dictionary pages make repeated text look small). So the count, and with it the file's bytes,
    follows from the split's rows alone, not from the order the upstream files hold them in.
    ``ranks``: each row's release position (:func:`release_ranks`) when the source is not in order.
    """
    head = _first_rows(src, ranks, MIN_GROUP_ROWS)
    if head.num_rows == 0:
        return MIN_GROUP_ROWS
    canonical = pa.Table.from_pylist(head.to_pylist(), schema=src.schema)
    per_row = max(1, -(-canonical.nbytes // canonical.num_rows))
    return max(MIN_GROUP_ROWS, min(MAX_GROUP_ROWS, ROW_GROUP_BYTES // per_row))


def _first_rows(src: SplitSource, ranks: np.ndarray | None, k: int) -> pa.Table:
    """The split's first ``k`` rows in release order (file order when ``ranks`` is None)."""
    parts, ranked, pos = [], [], 0
    for batch in src.batches(k):
        if ranks is None:
            parts.append(pa.Table.from_batches([batch]).slice(0, k - pos))
            pos += parts[-1].num_rows
            if pos >= k:
                break
            continue
        r = ranks[pos : pos + batch.num_rows]
        pos += batch.num_rows
        mine = np.flatnonzero(r < k)
        if len(mine):
            parts.append(pa.Table.from_batches([batch]).take(pa.array(mine)))
            ranked.append(r[mine])
    if not parts:
        return src.schema.empty_table()
    head = pa.concat_tables(parts)
    return head.take(pa.array(np.argsort(np.concatenate(ranked)))) if ranks is not None else head


def scan_sql(files: Sequence[Path]) -> str:
    """``read_parquet`` over ``files`` with each row's file position (``_fidx``) and row number (``_rn``)."""
    lst = sql_list(files)
    return (
        f"(SELECT *, list_position({lst}, filename) AS _fidx, file_row_number AS _rn "
        f"FROM read_parquet({lst}, union_by_name=true, filename=true, file_row_number=true))"
    )


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(slots=True)
class SplitSource:
    """One split of a release config: the upstream files and, for an ``all`` file, the split value."""

    files: list[Path]
    split: str | None  # rows where the `split` column equals this; None: every row
    schema: pa.Schema  # the shipped schema: no `split` column, no metadata
    rows: int = 0
    # (asset column, shipped name), ``ReleaseConfig.renames``: applied as the data file is written
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def published_schema(self) -> pa.Schema:
        """The data file's schema: ``schema`` with the renamed columns under their shipped names."""
        names = dict(self.renames)
        return pa.schema([f.with_name(names.get(f.name, f.name)) for f in self.schema])

    def published(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` (in ``schema``) under the shipped names."""
        names = self.published_schema.names
        for batch in batches:
            yield batch.rename_columns(names) if self.renames else batch

    def select_sql(
        self, columns: Sequence[str] | None = None, extra: Sequence[str] = (), condition: str = ""
    ) -> str:
        """The split's rows (``columns``, default all shipped ones, plus ``extra`` SQL expressions), unordered.

        ``condition``: an SQL condition on the upstream columns the rows must also meet.
        """
        names = [quote(c) for c in (self.schema.names if columns is None else columns)]
        conds = [f"split = {sql_literal(self.split)}"] if self.split is not None else []
        conds += [f"({condition})"] if condition else []
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        return f"SELECT {', '.join([*names, *extra])} FROM {scan_sql(self.files)} {where}"

    def read(self) -> pa.Table:
        """The split's rows in file order as one Arrow table (small releases and tests only)."""
        t = pa.concat_tables([pq.read_table(f) for f in self.files], promote_options="default")
        return t.filter(pc.equal(t["split"], self.split)) if self.split is not None else t

    @property
    def has_id(self) -> bool:
        """Whether the upstream rows have an ``id``: release order sorts by it, shipped or not (the
        RAG SFT configs ship the card's three fields, their ids go to provenance)."""
        return "id" in self.schema.names or any("id" in pq.read_schema(f).names for f in self.files)

    def in_release_order(self) -> bool:
        """Whether the rows already come in release order (ids non-decreasing, none null), as upstream
        assets write them: then they stream straight through, with no sort."""
        if not self.has_id:
            return True
        cols = ["id", "split"] if self.split is not None else ["id"]
        t = pa.concat_tables([pq.read_table(f, columns=cols) for f in self.files], promote_options="default")
        if self.split is not None:
            t = t.filter(pc.equal(t["split"], self.split))
        col = t["id"].combine_chunks()
        if col.null_count:
            return False
        return len(col) < 2 or bool(
            pc.all(pc.greater_equal(col.slice(1), col.slice(0, len(col) - 1))).as_py()
        )

    def batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The split's rows in file order as Arrow batches (shipped columns), without DuckDB."""
        cols = [*self.schema.names, "split"] if self.split is not None else list(self.schema.names)
        for f in self.files:
            names = set(pq.read_schema(f).names)
            for batch in pq.ParquetFile(f).iter_batches(
                batch_size=rows, columns=[c for c in cols if c in names]
            ):
                if self.split is not None:
                    batch = batch.filter(pc.equal(batch["split"], self.split))
                t = pa.Table.from_batches([batch])
                for name in self.schema.names:  # a column another file of the union has
                    if name not in t.column_names:
                        t = t.append_column(name, pa.nulls(t.num_rows, self.schema.field(name).type))
                yield from t.select(self.schema.names).cast(self.schema).to_batches()

    @property
    def order_sql(self) -> str:
        """Release order: by id, stable (Arrow's ``sort_by("id")``: nulls last, ties in file order)."""
        return "id NULLS LAST, _fidx, _rn" if self.has_id else "_fidx, _rn"


@dataclass(slots=True)
class ConfigPlan:
    """What the release will ship: ``{config: {split: SplitSource}}`` and the notes of what it skips."""

    configs: dict[str, dict[str, SplitSource]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan_configs(assets_root: Path, partition: str, configs: Sequence | None = None) -> ConfigPlan:
    """The split sources of every release config, without reading the tables (:func:`read_config_tables` reads them).

    A config whose asset is not materialized is left out with a note. An asset with split files
    gives those splits; one with a single ``all`` file is split by its ``split`` column when it has
    one, else shipped as ``train``. Empty splits are left out with a note.
    """
    plan = ConfigPlan()
    con = duckdb.connect()
    try:
        for cfg in configs or RELEASE_CONFIGS:
            files = asset_files(partition, cfg.asset, assets_root)
            if not files:
                plan.notes.append(f"config {cfg.name!r} skipped: asset {cfg.asset!r} is not materialized")
                continue
            by_split: dict[str, SplitSource] = {}
            split_files = [f for f in files if f.stem in SPLITS]
            if split_files:
                for f in split_files:
                    schema = _columns(_shipped(unified_schema([f])), cfg)
                    by_split[f.stem] = SplitSource([f], None, schema, pq.ParquetFile(f).metadata.num_rows)
            else:
                whole = unified_schema(files)
                schema = _columns(_shipped(whole), cfg)
                if "split" in whole.names:
                    counts = dict(
                        con.execute(
                            f"SELECT split, count(*) FROM read_parquet({sql_list(files)}, union_by_name=true)"
                            " GROUP BY 1"
                        ).fetchall()
                    )
                    for split in SPLITS:
                        by_split[split] = SplitSource(list(files), split, schema, int(counts.get(split, 0)))
                else:
                    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
                    by_split["train"] = SplitSource(list(files), None, schema, rows)
            kept = {}
            for split in SPLITS:
                if split not in by_split:
                    continue
                if by_split[split].rows == 0:
                    plan.notes.append(f"config {cfg.name!r}: split {split!r} is empty and left out")
                    continue
                kept[split] = by_split[split]
            if not kept:
                plan.notes.append(f"config {cfg.name!r} skipped: asset {cfg.asset!r} has no rows")
                continue
            for src in kept.values():
                src.renames = tuple(getattr(cfg, "renames", ()))
            plan.configs[cfg.name] = kept
    finally:
        con.close()
    return plan


def read_config_tables(
    assets_root: Path, partition: str, configs: tuple[ReleaseConfig, ...] = RELEASE_CONFIGS
) -> tuple[dict[str, dict[str, pa.Table]], list[str]]:
    """Read the upstream asset of every config, split by split.

    Returns ``({config: {split: table}}, notes)``. A config whose asset is not materialized for the
    partition is left out with a note (never an error: the release grows as families land). An
    asset with split files gives those splits; one with a single ``all`` file is split by its
    ``split`` column when it has one, else shipped as ``train``. Empty splits are left out (with a
    note), because a Hub split must hold rows.
    """
    plan = plan_configs(assets_root, partition, configs)
    tables = {
        name: {
            split: _release_table(_by_id(src.read()).select(src.schema.names)).rename_columns(
                src.published_schema.names
            )
            for split, src in splits.items()
        }
        for name, splits in plan.configs.items()
    }
    return tables, plan.notes


def _by_id(table: pa.Table) -> pa.Table:
    """The rows sorted by id (stable) when they have one, before the shipped columns are chosen."""
    return table.sort_by("id") if "id" in table.column_names else table


def _release_table(table: pa.Table) -> pa.Table:
    """The shipped form of an asset table: no `split` column (the file says it), no schema metadata."""
    if "split" in table.column_names:
        table = table.drop_columns(["split"])
    if "id" in table.column_names:
        # Sorted by id so the bytes do not depend on how the upstream wrote them.
        table = table.sort_by("id")
    return table.replace_schema_metadata(None)


def _columns(schema: pa.Schema, cfg: object) -> pa.Schema:
    """The config's shipped columns (``ReleaseConfig.columns``, in that order), or all of them."""
    columns = getattr(cfg, "columns", ())
    return pa.schema([schema.field(c) for c in columns if c in schema.names]) if columns else schema


def _shipped(schema: pa.Schema) -> pa.Schema:
    if "split" in schema.names:
        schema = schema.remove(schema.get_field_index("split"))
    return schema.remove_metadata()


def write_data_files(
    con: duckdb.DuckDBPyConnection, folder: Path, plan: Mapping[str, Mapping[str, SplitSource]]
) -> dict[str, dict[str, str]]:
    """Write every config's split files under ``folder``, sorted by id; returns ``{config: {split: rel}}``."""
    files: dict[str, dict[str, str]] = {}
    for config, splits in plan.items():
        files[config] = {}
        for split, src in splits.items():
            rel = data_file(config, split)
            if src.in_release_order():  # the usual case: upstream assets write sorted by id
                rows = group_rows(src)
                write_batches(src.published(src.batches(rows)), folder / rel, src.published_schema, rows)
            else:  # DuckDB ranks the keys; the rows are bucketed by rank on disk (write_sorted)
                ranks = release_ranks(con, src)
                rows = group_rows(src, ranks)
                write_sorted(con, src, folder / rel, rows, ranks=ranks)
            files[config][split] = rel
    return files


MAX_OPEN_BUCKETS = 256  # bucket files written at once by one pass of write_sorted over the source


def release_ranks(con: duckdb.DuckDBPyConnection, src: SplitSource) -> np.ndarray:
    """Each row's position in release order (``ORDER BY order_sql``), in the split's file order.

    Only the narrow keys (id, file index, row number) go through DuckDB's sorts, which spill them
    within its memory limit; the wide columns never do.
    """
    keys = src.select_sql(columns=["id"], extra=["_fidx", "_rn"])
    sql = (
        f"SELECT rank FROM (SELECT _fidx, _rn, row_number() OVER (ORDER BY {src.order_sql}) - 1 AS rank "
        f"FROM ({keys})) ORDER BY _fidx, _rn"
    )
    ranks = con.sql(sql).to_arrow_table().column("rank")
    return np.asarray(ranks.to_numpy(), dtype=np.int64)


def write_sorted(
    con: duckdb.DuckDBPyConnection,
    src: SplitSource,
    path: Path,
    rows_per_group: int,
    max_open: int = MAX_OPEN_BUCKETS,
    ranks: np.ndarray | None = None,
) -> int:
    """Write a split whose rows are not in release order to ``path`` in release order; returns the rows.

    The same bytes as ``write_query`` of ``ORDER BY order_sql``, in bounded memory whatever the width
    of the rows: DuckDB's sort of wide rows (the ``rag_sft`` prompts, ~7 KB each) ran out of memory
    under its limit at 160,000 rows, failing to pin blocks. Here DuckDB ranks the keys only
    (:func:`release_ranks`); the rows are streamed in file order into bucket files (Arrow IPC, in
    DuckDB's spill folder) of ``rows_per_group`` consecutive ranks each, and every bucket, one row
    group of the output, is sorted in memory. At most ``max_open`` buckets are written per pass over
    the source. ``ranks``: :func:`release_ranks` of ``src``, when the caller has them already.
    """
    ranks = release_ranks(con, src) if ranks is None else ranks
    n_buckets = -(-len(ranks) // rows_per_group)
    spill = Path(con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0])
    spill.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".sorted-", dir=spill))
    ranked = pa.schema([*src.schema, pa.field("_rank", pa.int64())])
    try:
        for first in range(0, n_buckets, max_open):
            _scatter(
                src, ranks, rows_per_group, range(first, min(n_buckets, first + max_open)), folder, ranked
            )

        def in_order() -> Iterator[pa.RecordBatch]:
            for b in range(n_buckets):
                bucket = folder / f"{b}.arrow"
                with pa.memory_map(str(bucket)) as source:
                    t = ipc.open_file(source).read_all()
                    t = t.take(pc.sort_indices(t.column("_rank"))).drop_columns(["_rank"])
                    yield from t.combine_chunks().to_batches()
                    del t
                bucket.unlink()

        return write_batches(src.published(in_order()), path, src.published_schema, rows_per_group)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _scatter(
    src: SplitSource,
    ranks: np.ndarray,
    rows_per_group: int,
    buckets: range,
    folder: Path,
    schema: pa.Schema,
) -> None:
    """One pass over the split: its rows of ranks in ``buckets`` appended to their bucket files."""
    writers: dict[int, ipc.RecordBatchFileWriter] = {}
    try:
        for b in buckets:
            writers[b] = ipc.new_file(str(folder / f"{b}.arrow"), schema)
        pos = 0
        for batch in src.batches(rows_per_group):
            r = ranks[pos : pos + batch.num_rows]
            pos += batch.num_rows
            bucket = r // rows_per_group
            mine = np.flatnonzero((bucket >= buckets.start) & (bucket < buckets.stop))
            if not len(mine):
                continue
            order = mine[np.argsort(bucket[mine], kind="stable")]
            values, starts = np.unique(bucket[order], return_index=True)
            rows = pa.Table.from_batches([batch]).append_column("_rank", pa.array(r)).take(pa.array(order))
            ends = [*starts[1:], len(order)]
            for b, lo, hi in zip(values.tolist(), starts.tolist(), ends, strict=True):
                for part in rows.slice(lo, hi - lo).to_batches():
                    writers[b].write_batch(part)
        if pos != len(ranks):
            raise RuntimeError(f"{src.files}: {pos} rows read, {len(ranks)} ranked (files changed?)")
    finally:
        for w in writers.values():
            w.close()
