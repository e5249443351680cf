"""Building the ``abstracts`` table from a snapshot's dump files, streaming, on several cores.

Input is cut into chunks that workers process independently (byte ranges of plain JSON-lines files,
read by the worker itself so the input never crosses a pipe; line batches of gzipped files; Parquet
batches); each chunk gives candidate rows and counts. Results are consumed in chunk order, so line
numbers in error messages are exact, and the final table is deduplicated and sorted by split, then
id (the order of the asset's split files), so the output does not depend on the number of workers or
the chunk size.

Memory: a worker writes its chunk's rows to a temporary Arrow IPC file and returns only counts and
the file name, so neither the pipe nor the parent carries the rows while the input is read. The
parent then memory-maps those files, sorts the row indices on the key columns only, and gathers the
output one column at a time (only that column's pages are mapped in at once), so besides the output
table itself memory does not grow with the input. With ``out_paths`` (what the asset runs) the output
table is not held either: the split files are written a row group at a time
(:func:`merge_chunks_to_files`), and memory holds the sort keys' result (row numbers, ids) besides.
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing as mp
import os
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ragsft_assets import leftovers, worker_pools
from ragsft_assets.corpus.abstracts import (
    ABSTRACTS_SCHEMA,
    BAD_INPUT_REASONS,
    BLANK_LINE,
    DUPLICATE_TITLE,
    KEPT,
    LINK_REASONS,
    REASONS,
    SPLIT_NAMES,
    AbstractsConfig,
    ChunkResult,
    dedup_order,
    empty_table,
    kept_rows,
    process_items,
)
from ragsft_assets.corpus.spill import ROW_GROUP_ROWS, MappedArrow, write_row_groups
from ragsft_assets.corpus.structured_wikipedia import (
    is_parquet,
    is_xml_dump,
    iter_line_chunks,
    iter_parquet_records,
    iter_xml_dump_records,
)
from ragsft_assets.gc_pause import paused_gc
from ragsft_assets.worker_pools import closing_pool, start_pool

CHUNKS_PREFIX = ".abstracts.chunks-"  # the per-build folder of chunk files (see build_abstracts)
CHUNK_BYTES = 4 << 20  # 4 MiB of JSON lines per task: large enough to amortise, small enough to stream
GZ_CHUNK_LINES = 500


class BadInputError(ValueError):
    """Too large a share of the input lines could not be read as records."""


class BadExample(NamedTuple):
    """An unreadable dump line, shown in the asset's metadata and log."""

    file: str  # the dump file's name
    line: int  # 1-based, over the whole file
    reason: str
    detail: str


@dataclass(slots=True)
class AbstractsBuild:
    """The ``abstracts`` table and the accounting of how it was obtained."""

    table: pa.Table
    funnel: dict[str, int]
    link_funnel: dict[str, int]
    bad_examples: list[BadExample] = field(default_factory=list)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)
    # CPU seconds of the pool's workers (0 when the chunks ran in this process, whose own clock has them).
    worker_cpu_s: float = 0.0
    # With ``out_paths`` (see build_abstracts): the split files written, and ``table`` holds only the
    # ``id`` and ``split`` columns of their rows, in the same order.
    paths: dict[str, Path] | None = None

    @property
    def records(self) -> int:
        return self.funnel.get("lines_read", 0)

    @property
    def bad_lines(self) -> int:
        return sum(self.funnel.get(r, 0) for r in BAD_INPUT_REASONS)

    @property
    def bad_share(self) -> float:
        return self.bad_lines / self.records if self.records else 0.0


def _plan_ranges(path: Path, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of a file that start at line starts (each range ends just after a newline)."""
    size = path.stat().st_size
    ranges: list[tuple[int, int]] = []
    with open(path, "rb") as fh:
        start = 0
        while start < size:
            fh.seek(min(start + chunk_bytes, size))
            if fh.tell() < size:
                fh.readline()  # finish the current line
            end = min(fh.tell(), size)
            ranges.append((start, end))
            start = end
    return ranges


def _tasks(files: Sequence[Path], chunk_bytes: int) -> Iterator[tuple[Path, tuple[Any, ...]]]:
    for path in files:
        if is_parquet(path) or is_xml_dump(path):
            batches = iter_parquet_records(path) if is_parquet(path) else iter_xml_dump_records(path)
            for _first, rows in batches:
                yield path, ("records", rows)
        elif path.name.endswith(".gz"):
            for _first, lines in iter_line_chunks(path, GZ_CHUNK_LINES):
                yield path, ("lines", lines)
        else:
            for start, end in _plan_ranges(path, chunk_bytes):
                yield path, ("range", str(path), start, end)


def _lines_of_range(path: str, start: int, end: int) -> list[bytes]:
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the range ends with a newline
    if b"\r" not in data:  # no CRLF line: one C scan instead of a test per line
        return lines
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def run_task(task: tuple[Any, ...], cfg: AbstractsConfig, out_path: str | None = None) -> ChunkResult:
    """Process one chunk (a worker entry point; importable, so any start method works).

    With ``out_path``, the chunk's rows are written there (Arrow IPC) and the result carries the path
    and an empty table.
    """
    cpu_started = time.process_time()
    kind = task[0]
    if kind == "range":
        items: list[Any] = _lines_of_range(task[1], task[2], task[3])
    else:
        items = task[1]
    # A chunk builds tens of thousands of containers (decoded leads, row tuples, sentence lists); the
    # collector's passes over them cost about a tenth of the chunk's time and found nothing.
    with paused_gc():
        res = process_items(items, cfg)
    del items  # the raw lines are the bulk of a chunk: free them before writing
    if out_path is not None and res.table.num_rows:
        with ipc.new_file(out_path, ABSTRACTS_SCHEMA) as writer:
            writer.write_table(res.table)
        res.path = out_path
        res.table = empty_table()  # Schema.empty_table() calls pa.array, which imports pandas
    res.cpu_s = time.process_time() - cpu_started
    return res


def _ordered_results(
    tasks: Iterator[tuple[Path, tuple[Any, ...]]], cfg: AbstractsConfig, workers: int, out_dir: str | None
) -> Iterator[tuple[Path, ChunkResult, bool]]:
    """Results in task order, at most ``2 * workers`` tasks in flight (bounded memory).

    Each result comes with whether it ran in a pool worker. While the pool starts (its fork server
    imports pyarrow, pandas and the corpus code: up to half a second during which this process would
    only wait), the first chunks run here; the pool takes the rest.
    The chunk files and the order of the results are the same either way.
    """

    def out_path(n: int) -> str | None:
        return os.path.join(out_dir, f"chunk-{n:07d}.arrow") if out_dir else None

    if workers <= 1:
        for n, (path, task) in enumerate(tasks):
            yield path, run_task(task, cfg, out_path(n)), False
        return
    global _FORK_SERVER_UP
    _FORK_SERVER_UP = True  # the pool below starts the fork server (it lives as long as this process)
    started: dict[str, Any] = {}

    def start_in_background() -> None:
        try:
            started["pool"] = pool = start_pool(worker_context(), workers)
            # Pool() returns before its workers can work: each first runs the parent's main script
            # again when that is a file (multiprocessing's rule; a script that imports dagster costs
            # each worker ~0.7 s, measured). The pool is up when a worker answers; until then this
            # process keeps running chunks instead of waiting.
            pool.apply(os.getpid)
        except BaseException as exc:  # re-raised in the caller's thread, below
            started["error"] = exc

    starter = threading.Thread(target=start_in_background, name="corpus-pool-start", daemon=True)
    starter.start()
    numbered = enumerate(tasks)
    # The last 2 * workers chunks are always left to the pool, started anyway (a small input does not
    # wait for it for nothing, and a pool's workers always report their CPU).
    ahead: deque[tuple[int, tuple[Path, tuple[Any, ...]]]] = deque()
    try:
        while starter.is_alive():
            while len(ahead) <= 2 * workers and (item := next(numbered, None)) is not None:
                ahead.append(item)
            if len(ahead) <= 2 * workers:
                break
            n, (path, task) = ahead.popleft()
            yield path, run_task(task, cfg, out_path(n)), False
    except BaseException:  # a chunk failed here, or the caller stopped: no pool left behind
        starter.join()
        if "pool" in started:
            started["pool"].terminate()
        raise
    starter.join()
    if "error" in started:
        raise started["error"]
    with closing_pool(started["pool"]) as pool:
        pending: deque[tuple[Path, Any]] = deque()
        for n, (path, task) in itertools.chain(ahead, numbered):
            pending.append((path, pool.apply_async(run_task, (task, cfg, out_path(n)))))
            if len(pending) >= 2 * workers:
                p, res = pending.popleft()
                yield p, res.get(), True
        while pending:
            p, res = pending.popleft()
            yield p, res.get(), True


# Output columns gathered together: the narrow ones at once, each wide one alone (bounded pages mapped).
_WIDE_COLUMNS = ("text", "sentences", "links")
_GATHER_GROUPS = (
    [n for n in ABSTRACTS_SCHEMA.names if n not in _WIDE_COLUMNS],
    *([n] for n in _WIDE_COLUMNS),
)


class _MappedChunk:
    """A chunk file mapped once, read as a table; :meth:`drop_pages` gives its resident pages back.

    The merge reads the files column group by column group. Opening every file again per group cost
    ~30 ms a group at 158 files; keeping them open would keep every page read so far resident.
    ``madvise(MADV_DONTNEED)`` on a read-only file mapping only unmaps the pages: the table stays
    valid, and a page read again comes back from the page cache.
    """

    def __init__(self, path: str) -> None:
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.table = ipc.open_file(pa.py_buffer(self._map)).read_all()

    def drop_pages(self) -> None:
        if hasattr(mmap, "MADV_DONTNEED"):  # Linux and most Unixes; elsewhere the pages just stay
            self._map.madvise(mmap.MADV_DONTNEED)


def merge_chunks(chunk_paths: Sequence[str]) -> tuple[pa.Table, list[tuple[str, str, str]]]:
    """The deduplicated table, sorted by split then id, of the chunk files, and the dropped duplicates.

    Same result as :func:`ragsft_assets.corpus.abstracts.deduplicate_titles` over the chunks
    concatenated in order. The sort reads the key columns; each output column is then gathered with
    only the chunk files' pages of that column mapped in.
    """
    if not chunk_paths:
        return ABSTRACTS_SCHEMA.empty_table(), []
    chunks = [_MappedChunk(p) for p in chunk_paths]
    keys = pa.concat_tables([c.table for c in chunks])
    order = dedup_order(keys)
    rows = kept_rows(keys, order)
    gone = order.filter(pc.invert(order.column("keep"))).column("row")
    dropped: list[tuple[str, str, str]] = []
    if len(gone):
        lost = keys.select(["id", "title"]).take(gone)
        dropped = [
            (i, DUPLICATE_TITLE, t)
            for i, t in zip(lost.column("id").to_pylist(), lost.column("title").to_pylist(), strict=True)
        ]
    del keys, order, gone
    for chunk in chunks:
        chunk.drop_pages()
    pa.default_memory_pool().release_unused()
    columns: dict[str, pa.Array] = {}
    for group in _GATHER_GROUPS:
        # One contiguous copy per column (a chunked take would make it anyway), then the files' pages
        # are dropped before the gather: the mapped pages and the gathered column are never resident
        # together.
        whole = {
            name: pa.concat_arrays([a for c in chunks for a in c.table.column(name).chunks]) for name in group
        }
        for chunk in chunks:
            chunk.drop_pages()
        for name in group:
            columns[name] = whole.pop(name).take(rows)
        # Hand the temporaries back to the system now: freed pool memory otherwise stays resident
        # and adds up with the next group's.
        pa.default_memory_pool().release_unused()
    return pa.Table.from_arrays(
        [columns[n] for n in ABSTRACTS_SCHEMA.names], schema=ABSTRACTS_SCHEMA
    ), dropped


def merge_chunks_to_files(
    chunk_paths: Sequence[str], out_paths: dict[str, Path]
) -> tuple[pa.Table, list[tuple[str, str, str]]]:
    """:func:`merge_chunks` written straight to the split files ``out_paths``, a row group at a time.

    Returns the ``id`` and ``split`` columns of the written rows (in file order) and the dropped
    duplicates. Besides those narrow columns, memory holds one row group (:data:`spill.ROW_GROUP_ROWS`
    rows) and the chunk files' pages it reads, dropped after each group.
    """
    chunks = MappedArrow(chunk_paths, ABSTRACTS_SCHEMA)
    keys = chunks.table
    dropped: list[tuple[str, str, str]] = []
    if keys.num_rows:
        order = dedup_order(keys)
        rows = kept_rows(keys, order)
        gone = order.filter(pc.invert(order.column("keep"))).column("row")
        if len(gone):
            lost = keys.select(["id", "title"]).take(gone)
            dropped = [
                (i, DUPLICATE_TITLE, t)
                for i, t in zip(lost.column("id").to_pylist(), lost.column("title").to_pylist(), strict=True)
            ]
        del order, gone
        rows_np = rows.to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        rows_np = np.zeros(0, np.int64)
    narrow = chunks.gather(rows_np, ["id", "split"])
    del keys
    chunks.drop_pages()
    pa.default_memory_pool().release_unused()
    # kept_rows orders the rows by split (train, validation, test), then id: each split is a run.
    rank = pc.index_in(narrow.column("split"), value_set=pa.array(SPLIT_NAMES)).fill_null(len(SPLIT_NAMES))
    bounds = np.searchsorted(
        rank.to_numpy(zero_copy_only=False), np.arange(len(SPLIT_NAMES) + 1), side="left"
    )
    for k, split in enumerate(SPLIT_NAMES):
        mine = rows_np[bounds[k] : bounds[k + 1]]

        def groups(mine: np.ndarray = mine) -> Iterator[pa.Table]:
            for lo in range(0, len(mine), ROW_GROUP_ROWS):
                group = chunks.gather(mine[lo : lo + ROW_GROUP_ROWS])
                chunks.drop_pages()
                yield group
                pa.default_memory_pool().release_unused()

        write_row_groups(out_paths[split], ABSTRACTS_SCHEMA, groups())
    return narrow.slice(0, int(bounds[-1])), dropped


_FORK_SERVER_UP = False


def fork_server_started() -> bool:
    """Whether this process has started a corpus worker pool already (its fork server is then up, with
    the corpus code imported, so a further pool starts in a fraction of the first's time)."""
    return _FORK_SERVER_UP


# pyarrow imports pandas on the first pa.array() call of a process (0.3-0.4 s each, measured): every
# chunk task makes such calls, so the fork server imports it once for all workers.
WORKER_PRELOAD = ("ragsft_assets.corpus.build", "ragsft_assets.corpus.enumeration", "pandas")


def worker_context() -> mp.context.BaseContext:
    """The corpus pools' start method: the shared fork server, with the corpus code preloaded."""
    return worker_pools.worker_context(WORKER_PRELOAD)


def default_workers() -> int:
    """Worker processes to use: the cores this process may run on, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def build_abstracts(
    files: Sequence[Path],
    cfg: AbstractsConfig,
    *,
    workers: int = 1,
    chunk_bytes: int = CHUNK_BYTES,
    tmp_dir: str | None = None,
    out_paths: dict[str, Path] | None = None,
) -> AbstractsBuild:
    """Read every dump file and build the abstracts table (deduplicated, sorted by split then id).

    Args:
        files: the dump files, read in the given order.
        cfg: filters, language, seed and split shares.
        workers: processes to use (1 = in this process).
        chunk_bytes: size of a JSON-lines task.
        tmp_dir: where the per-chunk files go (a temporary folder in it, removed at the end, and
            the folders of killed builds removed at the start; default: the system's temporary folder).
        out_paths: a Parquet path per split (train, validation, test): the rows are written there
            a row group at a time (:func:`merge_chunks_to_files`) instead of returned, so memory
            does not hold the table; ``table`` then holds only their ``id`` and ``split`` columns.

    Returns:
        The table and its funnel: ``lines_read`` (non-blank lines or Parquet rows), one count per
        reason of :data:`REASONS`, and ``kept``; the link funnel; up to 5 bad-line examples per chunk
        as ``(file name, line number, reason, detail)``; the rejected ``(id, reason, title)``.
    """
    # Named after this process: chunks of a build killed mid-way are removed by the next build
    # once that process is gone (``leftovers``); TemporaryDirectory cleans up every other ending.
    parent = Path(tmp_dir) if tmp_dir else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    leftovers.remove_stale(parent, CHUNKS_PREFIX)
    # This process gathers a Python row of counts, bad lines and rejections per chunk (~one tuple per
    # rejected record) and makes no cycles: collections during the build walked the whole process
    # (~0.1 s each with Dagster loaded, twice per 100,000 bench records) and found nothing.
    with (
        tempfile.TemporaryDirectory(prefix=leftovers.owned(CHUNKS_PREFIX), dir=parent) as out_dir,
        paused_gc(),
    ):
        return _build_abstracts(files, cfg, workers, chunk_bytes, out_dir, out_paths)


def _build_abstracts(
    files: Sequence[Path],
    cfg: AbstractsConfig,
    workers: int,
    chunk_bytes: int,
    out_dir: str,
    out_paths: dict[str, Path] | None = None,
) -> AbstractsBuild:
    reasons: Counter[str] = Counter()
    link_reasons: Counter[str] = Counter()
    chunk_paths: list[str] = []
    bad: list[BadExample] = []
    rejected: list[tuple[str, str, str]] = []
    line_base: dict[Path, int] = {}
    records = 0
    worker_cpu = 0.0
    for path, res, in_pool in _ordered_results(_tasks(files, chunk_bytes), cfg, workers, out_dir):
        base = line_base.get(path, 0)
        for n, reason, detail in res.bad:
            if len(bad) < 50:
                bad.append(BadExample(path.name, base + n, reason, detail))
        line_base[path] = base + res.lines
        records += res.lines - res.reasons.get(BLANK_LINE, 0)
        worker_cpu += res.cpu_s if in_pool else 0.0  # this process's own clock has the others
        reasons.update(res.reasons)
        link_reasons.update(res.link_reasons)
        rejected.extend(res.rejected)
        if res.path is not None:
            chunk_paths.append(res.path)
    if out_paths is None:
        table, duplicates = merge_chunks(chunk_paths)
    else:
        table, duplicates = merge_chunks_to_files(chunk_paths, out_paths)
    reasons[DUPLICATE_TITLE] += len(duplicates)
    rejected.extend(duplicates)
    rejected.sort()
    funnel = {"lines_read": records}
    funnel.update({r: reasons.get(r, 0) for r in REASONS})
    funnel[KEPT] = table.num_rows
    link_funnel = {"links_read": sum(link_reasons.values())}
    link_funnel.update({r: link_reasons.get(r, 0) for r in LINK_REASONS})
    return AbstractsBuild(table, funnel, link_funnel, bad, rejected, worker_cpu, out_paths)


def check_bad_share(build: AbstractsBuild, max_bad_share: float, where: str = "") -> None:
    """Raise :class:`BadInputError` when more than ``max_bad_share`` of the lines are bad input.

    The message names the files and line numbers of the first bad lines and says how to raise the limit.
    """
    if build.records == 0 or build.bad_share <= max_bad_share:
        return
    examples = "; ".join(f"{b.file}:{b.line} ({b.reason}: {b.detail})" for b in build.bad_examples[:5])
    raise BadInputError(
        f"{build.bad_lines} of {build.records} lines{(' in ' + where) if where else ''} are not readable "
        f"records ({build.bad_share:.2%} > max_bad_share {max_bad_share:.2%}); first bad lines: {examples}. "
        "Fix or remove those lines, or raise max_bad_share in the asset config."
    )
