"""Building the ``abstracts`` table from a snapshot's dump files, streaming, on several cores.

Input is cut into chunks that workers process independently (byte ranges of plain JSON-lines files,
read by the worker itself so the input never crosses a pipe; line batches of gzipped files; Parquet
batches); each chunk gives candidate rows and counts. Results are consumed in chunk order, so line
numbers in error messages are exact, and the final table is deduplicated and sorted by id, so the
output does not depend on the number of workers or the chunk size.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.corpus.abstracts import (
    ABSTRACTS_SCHEMA,
    BAD_INPUT_REASONS,
    BLANK_LINE,
    DUPLICATE_TITLE,
    KEPT,
    LINK_REASONS,
    REASONS,
    AbstractsConfig,
    ChunkResult,
    deduplicate_titles,
    process_items,
)
from ragsft_assets.corpus.structured_wikipedia import (
    is_parquet,
    is_xml_dump,
    iter_line_chunks,
    iter_parquet_records,
    iter_xml_dump_records,
)

CHUNK_BYTES = 4 << 20  # 4 MiB of JSON lines per task: large enough to amortise, small enough to stream
GZ_CHUNK_LINES = 500


class BadInputError(ValueError):
    """Too large a share of the input lines could not be read as records."""


@dataclass(slots=True)
class AbstractsBuild:
    """The ``abstracts`` table and the accounting of how it was obtained."""

    table: pa.Table
    funnel: dict[str, int]
    link_funnel: dict[str, int]
    bad_examples: list[tuple[str, int, str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)

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
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def run_task(task: tuple[Any, ...], cfg: AbstractsConfig) -> ChunkResult:
    """Process one chunk (a worker entry point; importable, so any start method works)."""
    kind = task[0]
    if kind == "range":
        items: list[Any] = _lines_of_range(task[1], task[2], task[3])
    else:
        items = task[1]
    return process_items(items, cfg)


def _run_task_star(args: tuple[tuple[Any, ...], AbstractsConfig]) -> ChunkResult:
    return run_task(*args)


def _ordered_results(
    tasks: Iterator[tuple[Path, tuple[Any, ...]]], cfg: AbstractsConfig, workers: int
) -> Iterator[tuple[Path, ChunkResult]]:
    """Results in task order, at most ``2 * workers`` tasks in flight (bounded memory)."""
    if workers <= 1:
        for path, task in tasks:
            yield path, run_task(task, cfg)
        return
    with worker_context().Pool(workers) as pool:
        pending: deque[tuple[Path, Any]] = deque()
        for path, task in tasks:
            pending.append((path, pool.apply_async(run_task, (task, cfg))))
            if len(pending) >= 2 * workers:
                p, res = pending.popleft()
                yield p, res.get()
        while pending:
            p, res = pending.popleft()
            yield p, res.get()


def worker_context() -> mp.context.BaseContext:
    """The start method for worker pools: a fork server that has already imported the corpus code.

    Forking a running Dagster process (threads) is unsafe; a fork server is started once, clean, and
    preloading the modules spares every worker the import of pyarrow and of the corpus code.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["ragsft_assets.corpus.build", "ragsft_assets.corpus.enumeration"])
    return ctx


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
) -> AbstractsBuild:
    """Read every dump file and build the abstracts table (deduplicated, sorted by id).

    Args:
        files: the dump files, read in the given order.
        cfg: filters, language, seed and split shares.
        workers: processes to use (1 = in this process).
        chunk_bytes: size of a JSON-lines task.

    Returns:
        The table and its funnel: ``lines_read`` (non-blank lines or Parquet rows), one count per
        reason of :data:`REASONS`, and ``kept``; the link funnel; up to 5 bad-line examples per chunk
        as ``(file name, line number, reason, detail)``; the rejected ``(id, reason, title)``.
    """
    reasons: Counter[str] = Counter()
    link_reasons: Counter[str] = Counter()
    tables: list[pa.Table] = []
    bad: list[tuple[str, int, str, str]] = []
    rejected: list[tuple[str, str, str]] = []
    line_base: dict[Path, int] = {}
    records = 0
    for path, res in _ordered_results(_tasks(files, chunk_bytes), cfg, workers):
        base = line_base.get(path, 0)
        for n, reason, detail in res.bad:
            if len(bad) < 50:
                bad.append((path.name, base + n, reason, detail))
        line_base[path] = base + res.lines
        records += res.lines - res.reasons.get(BLANK_LINE, 0)
        reasons.update(res.reasons)
        link_reasons.update(res.link_reasons)
        rejected.extend(res.rejected)
        if res.table.num_rows:
            tables.append(res.table)
    table = pa.concat_tables(tables) if tables else ABSTRACTS_SCHEMA.empty_table()
    table, duplicates = deduplicate_titles(table)
    reasons[DUPLICATE_TITLE] += len(duplicates)
    rejected.extend(duplicates)
    rejected.sort()
    funnel = {"lines_read": records}
    funnel.update({r: reasons.get(r, 0) for r in REASONS})
    funnel[KEPT] = table.num_rows
    link_funnel = {"links_read": sum(link_reasons.values())}
    link_funnel.update({r: link_reasons.get(r, 0) for r in LINK_REASONS})
    return AbstractsBuild(table, funnel, link_funnel, bad, rejected)


def check_bad_share(build: AbstractsBuild, max_bad_share: float, where: str = "") -> None:
    """Raise :class:`BadInputError` when more than ``max_bad_share`` of the lines are bad input.

    The message names the files and line numbers of the first bad lines and says how to raise the limit.
    """
    if build.records == 0 or build.bad_share <= max_bad_share:
        return
    examples = "; ".join(f"{f}:{n} ({reason}: {detail})" for f, n, reason, detail in build.bad_examples[:5])
    raise BadInputError(
        f"{build.bad_lines} of {build.records} lines{(' in ' + where) if where else ''} are not readable "
        f"records ({build.bad_share:.2%} > max_bad_share {max_bad_share:.2%}); first bad lines: {examples}. "
        "Fix or remove those lines, or raise max_bad_share in the asset config."
    )
