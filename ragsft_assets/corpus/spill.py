"""Out-of-core helpers of the corpus stage: gathers from memory-mapped Arrow files and Parquet row groups
written one at a time, so peak memory stays near a row group's size whatever the snapshot's size.

The Parquet files are written with the options of :func:`ragsft_assets.storage.write_parquet`; a row
group written here is the bytes ``pq.write_table`` gives for the same rows. ``pq.write_table`` puts up
to 1,048,576 rows (Arrow's default) in a row group; the corpus files hold at most
:data:`ROW_GROUP_ROWS` (ours: a bounded row group, so a file of up to that many rows is byte-identical
to the one ``pq.write_table`` writes, and a larger one holds the same rows in more row groups).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ragsft_assets import storage

# ours: 65,536 rows a row group (about 100 MB of abstracts, 20 MB of edges, in memory at once).
ROW_GROUP_ROWS = 65_536
# ours: a gather gives back mapped pages once the files it read since the last time reach 128 MiB
# (one madvise per file read, for every column of every row group, is a call and page faults each).
DROP_EVERY_BYTES = 128 << 20


def write_row_groups(path: Path, schema: pa.Schema, groups: Iterable[pa.Table]) -> Path:
    """Write ``groups`` (tables of at most :data:`ROW_GROUP_ROWS` rows) as the row groups of ``path``,
    atomically, with the project's Parquet options; an empty file when there is none (as
    ``pq.write_table`` of an empty table)."""
    with storage.replacing(path) as tmp, pq.ParquetWriter(tmp, schema, **storage.PARQUET_OPTIONS) as writer:
        wrote = False
        for group in groups:
            # One contiguous array per column: chunk boundaries would move the writer's page cuts.
            writer.write_table(group.combine_chunks())
            wrote = True
        if not wrote:
            writer.write_table(schema.empty_table())
    return path


class MappedArrow:
    """Arrow IPC files memory-mapped and read as one table, with :meth:`gather` by global row number.

    ``drop_pages`` gives the mapped pages back (``madvise(MADV_DONTNEED)`` on a read-only file mapping
    only unmaps them: the table stays valid and a page read again comes from the page cache), so a
    pass over the files in batches keeps only a batch's pages resident.
    """

    def __init__(self, paths: Sequence[str], schema: pa.Schema) -> None:
        self._maps: list[mmap.mmap] = []
        tables = []
        batch_file: list[int] = []  # the file of each record batch
        for k, path in enumerate(paths):
            with open(path, "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps.append(m)
            table = ipc.open_file(pa.py_buffer(m)).read_all()
            tables.append(table)
            batch_file += [k] * table.column(0).num_chunks if table.num_columns else []
        self.table = pa.concat_tables(tables) if tables else schema.empty_table()
        self.schema = schema
        self._batch_file = batch_file
        # Every column of an IPC file is cut at the same record batches: one offset list for all.
        lengths = [len(a) for a in self.table.column(0).chunks] if self.table.num_columns else []
        self._starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def drop_pages(self, files: Iterable[int] | None = None) -> None:
        """Give back the resident pages of ``files`` (indices into the paths; default: all)."""
        if hasattr(mmap, "MADV_DONTNEED"):  # Linux and most Unixes; elsewhere the pages just stay
            for k in range(len(self._maps)) if files is None else files:
                self._maps[k].madvise(mmap.MADV_DONTNEED)

    def gather(self, rows: np.ndarray, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows ``rows`` (global row numbers, any order) of ``columns``, one contiguous array each.

        A take per record batch (a take over the whole chunked column would first concatenate it:
        a copy of the whole column), then one reordering take of the batch-sized result. Files'
        pages are given back once those read reach :data:`DROP_EVERY_BYTES`: rows spread over every file would
        otherwise map in nearly all of their pages (a page holds a few rows) before any went back.
        """
        names = list(columns) if columns is not None else self.schema.names
        rows = np.asarray(rows, dtype=np.int64)
        chunk = np.searchsorted(self._starts, rows, side="right") - 1
        by_chunk = np.argsort(chunk, kind="stable")
        sorted_chunks = chunk[by_chunk]
        local = rows[by_chunk] - self._starts[sorted_chunks]
        cuts = np.flatnonzero(np.diff(sorted_chunks)) + 1
        bounds = np.concatenate([[0], cuts, [len(rows)]]).astype(np.int64)
        back = pa.array(np.argsort(by_chunk, kind="stable"))
        out = []
        touched: list[int] = []  # files read since their pages were last given back
        mapped = 0  # their size
        for name in names:
            arrays = self.table.column(name).chunks
            pieces = []
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                if hi > lo:
                    c = int(sorted_chunks[lo])
                    pieces.append(arrays[c].take(pa.array(local[lo:hi])))
                    last = hi == len(rows) or self._batch_file[int(sorted_chunks[hi])] != self._batch_file[c]
                    if last:  # the file's last batch in this gather
                        touched.append(self._batch_file[c])
                        mapped += len(self._maps[touched[-1]])
                        if mapped > DROP_EVERY_BYTES:  # one madvise per file costs faults and calls
                            self.drop_pages(touched)
                            touched, mapped = [], 0
            typ = self.schema.field(name).type
            whole = pa.concat_arrays(pieces) if pieces else pa.array([], typ)
            out.append(whole.take(back) if len(whole) else whole)
        self.drop_pages(touched)
        return pa.Table.from_arrays(out, schema=pa.schema([self.schema.field(n) for n in names]))
