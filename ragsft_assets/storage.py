"""Parquet artifacts under ``$RAGSFT_HOME/assets/<partition>/<asset>/``, written atomically.

Dagster-free: the ``store`` resource and the CLI both use these functions.
A file is written to a temporary name in the same folder and renamed into
place, so a killed run never leaves a half-written artifact behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets import leftovers
from ragsft_assets.home import assets_dir

ALL = "all"  # file stem of an asset that has no splits
SPLITS = ("train", "validation", "test")
LEDGER_DIR = "_ledger"


def asset_path(partition: str, asset: str, part: str = ALL, root: Path | None = None) -> Path:
    """Path of one Parquet file of an asset (``part`` is a split name or ``all``)."""
    return (root or assets_dir()) / partition / asset / f"{part}.parquet"


def current_umask() -> int:
    """This process's umask, read without changing it where Linux shows it (``/proc/self/status``).

    Elsewhere ``os.umask`` is set and put back at once (not atomic: another thread creating a file in
    that instant would get mode 0o022's default).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(target: Path | str | int, directory: bool = False) -> None:
    """Give a file (a path or an open descriptor) or a folder the mode a plain ``open``/``mkdir`` gives.

    ``tempfile`` makes its files 0600 and folders 0700 whatever the umask; a release renamed into
    place from them would stay private to its writer, where users of a shared machine (``datasets``
    readers, a team's group) expect the umask's 0644/0755.
    """
    mode = (0o777 if directory else 0o666) & ~current_umask()
    if isinstance(target, int):
        os.fchmod(target, mode)
    else:
        os.chmod(target, mode)


def temp_beside(path: Path) -> tuple[int, str]:
    """A temp file beside ``path``, named after this process; first removes those of dead writers.

    ``.<name>.<host>-<pid>-<start>-XXXX.tmp``: a writer killed mid-write leaves its temp file, and
    the next write of the same path removes it (``leftovers``). Its mode follows the umask.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    leftovers.remove_stale(path.parent, f".{path.name}.")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=leftovers.owned(f".{path.name}."), suffix=".tmp")
    try:
        follow_umask(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def staging_folder(target: Path) -> Path:
    """A fresh folder beside ``target`` (same file system, so the final rename is atomic).

    Named after this process (``.<name>.build-<host>-<pid>-<start>-XXXX``), so that a writer killed
    while filling it leaves a folder the next one recognizes as dead and removes
    (``leftovers.recover``, called first). Its mode follows the umask.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    leftovers.recover(target)
    folder = Path(
        tempfile.mkdtemp(dir=target.parent, prefix=leftovers.owned(leftovers.sibling_prefix(target, "build")))
    )
    follow_umask(folder, directory=True)
    return folder


def swap_folder(built: Path, target: Path) -> Path:
    """Replace ``target`` by the fully built folder ``built`` (same parent), never leaving a half folder.

    The old folder is renamed aside, the new one renamed in, then the old one deleted: a reader sees
    either the old or the new folder. A process killed in between leaves the old one aside under its
    owner's name, and the next writer puts it back (``leftovers.recover``).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    leftovers.recover(target)
    old = None
    if target.exists() or target.is_symlink():
        old = Path(
            tempfile.mkdtemp(
                dir=target.parent, prefix=leftovers.owned(leftovers.sibling_prefix(target, "old"))
            )
        )
        os.rmdir(old)
        os.replace(target, old)
    os.replace(built, target)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()
    return target


@contextmanager
def replacing(path: Path) -> Iterator[str]:
    """A temp file beside ``path`` (:func:`temp_beside`) to write; it becomes ``path`` when the block
    ends, and is removed if the block raises: readers see the old file or the whole new one."""
    fd, tmp = temp_beside(path)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write bytes to ``path`` atomically (temp file + rename in the same folder)."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return path


# The project's Parquet writer options, for pq.write_table and pq.ParquetWriter alike: the same options
# give the same bytes, whichever writes the file.
PARQUET_OPTIONS: dict[str, object] = {"compression": "zstd", "write_statistics": True, "use_dictionary": True}


def write_parquet(table: pa.Table, path: Path) -> Path:
    """Write ``table`` to ``path`` atomically, deterministically (no timestamps, fixed options)."""
    with replacing(path) as tmp:
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
    return path


def write_asset(
    table: pa.Table, partition: str, asset: str, part: str = ALL, root: Path | None = None
) -> Path:
    """Write one file of an asset and return its path."""
    return write_parquet(table, asset_path(partition, asset, part, root))


def write_split_asset(
    table: pa.Table, partition: str, asset: str, split_column: str = "split", root: Path | None = None
) -> dict[str, Path]:
    """Write one file per split value of ``split_column`` (every split of SPLITS, even empty).

    Each file holds its split's rows in table order. A table already grouped by split in SPLITS
    order (as the corpus build returns it) is cut into slices, with no copy; another is filtered.
    """
    paths = {}
    for split, part in zip(SPLITS, split_parts(table, split_column), strict=True):
        paths[split] = write_asset(part, partition, asset, split, root)
    return paths


def split_parts(table: pa.Table, split_column: str = "split") -> list[pa.Table]:
    """The rows of each split of SPLITS, in table order (slices where the table is grouped that way)."""
    import numpy as np
    import pyarrow.compute as pc

    if not table.num_rows:
        return [table] * len(SPLITS)
    codes = pc.index_in(table[split_column], value_set=pa.array(SPLITS))  # null: not a split of SPLITS
    if codes.null_count == 0:
        ranks = codes.to_numpy(zero_copy_only=False)
        if bool(np.all(ranks[1:] >= ranks[:-1])):
            bounds = np.searchsorted(ranks, np.arange(len(SPLITS) + 1), side="left")
            return [
                table.slice(int(lo), int(hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
            ]
    return [table.filter(pc.equal(table[split_column], split)) for split in SPLITS]


def read_asset(partition: str, asset: str, part: str | None = None, root: Path | None = None) -> pa.Table:
    """Read an asset: one part, or all its files concatenated (split files in SPLITS order)."""
    folder = (root or assets_dir()) / partition / asset
    if part is not None:
        return pq.read_table(asset_path(partition, asset, part, root))
    files = asset_files(partition, asset, root)
    if not files:
        raise FileNotFoundError(
            f"asset {asset!r} of partition {partition!r} has no data under {folder}: materialize it first"
        )
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def asset_files(partition: str, asset: str, root: Path | None = None) -> list[Path]:
    """The Parquet files of an asset, split files first in SPLITS order, then the rest sorted."""
    folder = (root or assets_dir()) / partition / asset
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))
    order = {s: i for i, s in enumerate(SPLITS)}
    return sorted(files, key=lambda p: (order.get(p.stem, len(order)), p.name))
