"""Which snapshots a source offers, and which of them a sensor tick should start (cursor logic).

A sensor tick is one cheap listing plus a cursor. The cursor is the sorted list of snapshot keys
already handled (requested, or found to be a partition already); it is JSON so it can be read in the
UI and restored after a restart. Handled keys are never requested again, keys not yet handled are
requested in sorted order, at most ``cap`` per tick, so a restart from a saved cursor neither misses
nor repeats a snapshot.

A local folder is ready (issue 34: ``kubectl cp``, ``cp`` and ``snapshots add`` all write final
names, so a ``.part`` suffix cannot tell a folder mid-copy) when either

- ``ragsft snapshots add`` wrote its manifest (``ADDED_MANIFEST``), which it writes last and
  atomically, and the folder holds exactly the files it lists, with those sizes; or
- for a folder copied by hand, the names, sizes and modification times of its files are the same
  at two ticks in a row. The cursor keeps each waiting folder's fingerprint (``waiting``) for the
  next tick, so a copy that is still growing is never taken.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ragsft_assets.corpus.snapshot_layout import (
    ADDED_MANIFEST,
    DUMP_SUFFIXES,
    HUB_DATASET,
    PARTIAL_SUFFIXES,
    validate_snapshot_key,
)

# A listing for a sensor tick: the ready keys, and the fingerprints of the folders still waiting.
Listing = tuple[list[str], dict[str, str]]


def is_valid_key(key: str) -> bool:
    try:
        validate_snapshot_key(key)
    except ValueError:
        return False
    return True


def is_ready_folder(folder: Path) -> bool:
    """A snapshot folder is ready when it holds a dump file and no file still being copied."""
    names = [p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    if any(name.endswith(PARTIAL_SUFFIXES) for name in names):
        return False
    return any(name.endswith(DUMP_SUFFIXES) for name in names)


def _files(folder: Path) -> list[tuple[str, int, int]]:
    """(name, size, mtime in ns) of every file of ``folder`` (hidden ones too), the manifest excepted."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.name != ADDED_MANIFEST and p.is_file():
            st = p.stat()
            out.append((p.name, st.st_size, st.st_mtime_ns))
    return out


def manifest_complete(folder: Path) -> bool:
    """Whether ``snapshots add``'s manifest is there and the folder holds exactly its files, sizes equal."""
    try:
        listed = json.loads((folder / ADDED_MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    present = {name: size for name, size, _ in _files(folder) if not name.startswith(".")}
    return isinstance(listed, dict) and present == listed


def fingerprint(folder: Path) -> str:
    """16 hex digits over the names, sizes and modification times of the folder's files."""
    return hashlib.sha256(json.dumps(_files(folder)).encode()).hexdigest()[:16]


def scan_snapshot_folders(root: Path, seen: Mapping[str, str] | None = None) -> Listing:
    """The ready snapshot folders under ``root`` and the fingerprints of those not ready yet.

    A folder is ready when its manifest is complete (:func:`manifest_complete`) or its fingerprint
    equals ``seen[key]``, the one the previous tick recorded. Folders whose name is not a snapshot
    key, that hold no dump file or a partial file (``.part``...), are left out of both.
    """
    if not root.is_dir():
        return [], {}
    ready, waiting = [], {}
    for p in sorted(root.iterdir()):
        if not (p.is_dir() and is_valid_key(p.name) and is_ready_folder(p)):
            continue
        if manifest_complete(p):
            ready.append(p.name)
            continue
        now = fingerprint(p)
        if seen is not None and seen.get(p.name) == now:
            ready.append(p.name)  # unchanged since the last tick: the copy is over
        else:
            waiting[p.name] = now
    return ready, waiting


def list_snapshot_folders(root: Path, seen: Mapping[str, str] | None = None) -> list[str]:
    """The keys of the ready snapshot folders under ``root`` (``<YYYYMMDD>.<lang>``), sorted.

    Without ``seen`` (no previous tick), only folders ``snapshots add`` completed are ready; a
    missing root means no snapshot. See :func:`scan_snapshot_folders`.
    """
    return scan_snapshot_folders(root, seen)[0]


def list_hub_snapshots(languages: Iterable[str], dataset: str = HUB_DATASET) -> list[str]:
    """The configs (``<YYYYMMDD>.<lang>``) of the structured-wikipedia dataset on the hub, for ``languages``.

    Real code for hub users: it asks the hub for the dataset's config names (no data download).
    """
    from datasets import get_dataset_config_names  # heavy: only when the hub is used

    wanted = {lang.strip() for lang in languages if lang.strip()}
    keys = []
    for config in get_dataset_config_names(dataset):
        if "." in config and config.split(".", 1)[1] in wanted and is_valid_key(config):
            keys.append(config)
    return sorted(keys)


def scan_snapshots(
    root: Path, seen: Mapping[str, str] | None = None, environ: dict[str, str] | None = None
) -> Listing:
    """Every snapshot the configured source offers, ready: local folders, plus hub configs when enabled.

    Returns the ready keys and the fingerprints of the local folders still waiting
    (:func:`scan_snapshot_folders`; ``seen``: those the previous tick recorded). The hub is asked
    only when ``RAGSFT_SNAPSHOT_SOURCE=hub``; ``RAGSFT_HUB_LANGUAGES`` (comma separated, default
    ``fr``) says which languages, ``RAGSFT_HUB_DATASET`` which dataset.
    """
    env = os.environ if environ is None else environ
    ready, waiting = scan_snapshot_folders(root, seen)
    keys = set(ready)
    if env.get("RAGSFT_SNAPSHOT_SOURCE", "local") == "hub":
        # RAGSFT_HUB_DATASET: the same dataset the export reads (a mirror or a local hub-like folder).
        dataset = env.get("RAGSFT_HUB_DATASET") or HUB_DATASET
        keys.update(list_hub_snapshots(env.get("RAGSFT_HUB_LANGUAGES", "fr").split(","), dataset))
    return sorted(keys), {k: v for k, v in waiting.items() if k not in keys}


def available_snapshots(root: Path, environ: dict[str, str] | None = None) -> list[str]:
    """The ready snapshots without a previous tick: folders ``snapshots add`` completed, hub configs."""
    return scan_snapshots(root, None, environ)[0]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one tick does: keys to add as partitions and run, keys only marked handled, new cursor."""

    to_request: list[str]
    already_partitions: list[str]
    cursor: str
    remaining: int


def read_cursor(cursor: str | None) -> set[str]:
    """The handled keys stored in a cursor (an empty or unreadable cursor means none)."""
    if not cursor:
        return set()
    try:
        data = json.loads(cursor)
    except json.JSONDecodeError:
        return set()
    return set(data.get("handled", [])) if isinstance(data, dict) else set()


def read_waiting(cursor: str | None) -> dict[str, str]:
    """The fingerprints of the folders a cursor's tick found still being copied ({} when none)."""
    try:
        data = json.loads(cursor) if cursor else {}
    except json.JSONDecodeError:
        return {}
    waiting = data.get("waiting") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in waiting.items()} if isinstance(waiting, dict) else {}


def write_cursor(handled: Iterable[str], waiting: Mapping[str, str] | None = None) -> str:
    body: dict[str, object] = {"handled": sorted(set(handled))}
    if waiting:
        body["waiting"] = dict(sorted(waiting.items()))
    return json.dumps(body, separators=(",", ":"))


def plan_tick(
    available: Iterable[str],
    partitions: Iterable[str],
    cursor: str | None,
    cap: int,
    waiting: Mapping[str, str] | None = None,
) -> Plan:
    """Decide a tick: the first ``cap`` new keys (sorted) are requested, known partitions are skipped.

    Args:
        available: the snapshot keys the source offers now (ready ones only).
        partitions: the keys that already are partitions of the instance.
        cursor: the cursor saved by the previous tick (None on the first).
        cap: the most run requests in one tick (the rest wait for the next tick).
        waiting: fingerprints of the folders not ready yet, kept in the cursor for the next tick.
    """
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    handled = read_cursor(cursor)
    existing = set(partitions)
    new = sorted(set(available) - handled)
    already = [key for key in new if key in existing]
    candidates = [key for key in new if key not in existing]
    to_request = candidates[:cap]
    return Plan(
        to_request=to_request,
        already_partitions=already,
        cursor=write_cursor(
            handled | set(already) | set(to_request),
            {k: v for k, v in (waiting or {}).items() if k not in handled},
        ),
        remaining=len(candidates) - len(to_request),
    )
