"""Which snapshots a source offers, and which of them a sensor tick should start (cursor logic).

A sensor tick is one cheap listing plus a cursor. The cursor is the sorted list of snapshot keys
already handled (requested, or found to be a partition already); it is JSON so it can be read in the
UI and restored after a restart. Handled keys are never requested again, keys not yet handled are
requested in sorted order, at most ``cap`` per tick, so a restart from a saved cursor neither misses
nor repeats a snapshot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ragsft_assets.corpus.snapshot_layout import (
    DUMP_SUFFIXES,
    HUB_DATASET,
    PARTIAL_SUFFIXES,
    validate_snapshot_key,
)


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


def list_snapshot_folders(root: Path) -> list[str]:
    """The keys of the ready snapshot folders under ``root`` (``<YYYYMMDD>.<lang>``), sorted.

    Folders whose name is not a snapshot key, and folders still being copied, are left out; a
    missing root means no snapshot.
    """
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if p.is_dir() and is_valid_key(p.name) and is_ready_folder(p)
    )


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


def available_snapshots(root: Path, environ: dict[str, str] | None = None) -> list[str]:
    """Every snapshot the configured source offers: local folders, plus hub configs when enabled.

    The hub is asked only when ``RAGSFT_SNAPSHOT_SOURCE=hub``; ``RAGSFT_HUB_LANGUAGES`` (comma
    separated, default ``fr``) says which languages, ``RAGSFT_HUB_DATASET`` which dataset.
    """
    env = os.environ if environ is None else environ
    keys = set(list_snapshot_folders(root))
    if env.get("RAGSFT_SNAPSHOT_SOURCE", "local") == "hub":
        # RAGSFT_HUB_DATASET: the same dataset the export reads (a mirror or a local hub-like folder).
        dataset = env.get("RAGSFT_HUB_DATASET") or HUB_DATASET
        keys.update(list_hub_snapshots(env.get("RAGSFT_HUB_LANGUAGES", "fr").split(","), dataset))
    return sorted(keys)


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


def write_cursor(handled: Iterable[str]) -> str:
    return json.dumps({"handled": sorted(set(handled))}, separators=(",", ":"))


def plan_tick(available: Iterable[str], partitions: Iterable[str], cursor: str | None, cap: int) -> Plan:
    """Decide a tick: the first ``cap`` new keys (sorted) are requested, known partitions are skipped.

    Args:
        available: the snapshot keys the source offers now.
        partitions: the keys that already are partitions of the instance.
        cursor: the cursor saved by the previous tick (None on the first).
        cap: the most run requests in one tick (the rest wait for the next tick).
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
        cursor=write_cursor(handled | set(already) | set(to_request)),
        remaining=len(candidates) - len(to_request),
    )
