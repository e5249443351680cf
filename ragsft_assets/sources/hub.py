"""``ragsft sources add KEY --hub ID``: an outside question set streamed from the hub, resumably.

The snapshot hub path's machinery (``corpus.hub_snapshot``): the revision is pinned when the
export starts (:func:`resolve_revision`), records stream through ``datasets`` into gzipped
JSON-lines shards written as ``.part`` and renamed when complete (:func:`stream_shards`), and
``hub.json`` records the finished shards with the stream position after them, so a rerun after
an interruption keeps them and continues. Here one export holds several splits, one after the
other: the shards are ``<split>-NNNNN.jsonl.gz`` (the source reader takes the split from the name)
and ``hub.json`` keeps one entry per split; its top-level ``shards`` and ``complete`` are what
``snapshot_revision`` reads, so the release manifest names the dataset, config and revision.

Dagster-free; heavy imports (``datasets``) only when an export runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragsft_assets.corpus.hub_snapshot import (
    DEFAULT_LINES_PER_FILE,
    HUB_MANIFEST,
    read_hub_manifest,
    resolve_revision,
    stream_shards,
)
from ragsft_assets.sources import trust_align
from ragsft_assets.storage import atomic_write_bytes

# The hub config a preset's dataset is read from when --config is not given.
PRESET_CONFIGS = {"hotpotqa": "distractor"}
# The folder of the dataset a preset's card reads (--data-dir overrides), and the commit it pins
# when --revision is not given (trust_align's card: Trust-Align/sft at 0b89ac0).
PRESET_DATA_DIRS = {trust_align.PRESET: trust_align.HUB_DATA_DIR}
PRESET_REVISIONS = {trust_align.PRESET: trust_align.HUB_REVISION}


def open_hub_split(
    dataset: str, config: str | None, split: str, revision: str | None, data_dir: str | None = None
) -> Any:
    """One split of a hub dataset (or a local folder laid out like it) as a streaming dataset;
    ``data_dir`` reads one folder of the dataset (its files give the splits)."""
    import datasets  # heavy: imported only when the hub path is used

    return datasets.load_dataset(
        dataset, config, split=split, streaming=True, revision=revision, data_dir=data_dir
    )


def hub_split_names(
    dataset: str, config: str | None, revision: str | None, data_dir: str | None = None
) -> list[str]:
    """The splits of a hub config (of one folder with ``data_dir``), as ``datasets`` lists them."""
    import datasets

    return list(datasets.get_dataset_split_names(dataset, config, revision=revision, data_dir=data_dir))


def shard_file(split: str, index: int) -> str:
    """``train-00003.jsonl.gz``: zero-padded so that name order is shard order, split in the name."""
    return f"{split}-{index:05d}.jsonl.gz"


def _save(folder: Path, state: dict[str, Any]) -> None:
    # The flat view snapshot_revision reads (records, shards, complete) beside the per-split entries.
    state["shards"] = [s for split in state["splits"] for s in state["progress"][split]["shards"]]
    state["complete"] = all(state["progress"][s]["complete"] for s in state["splits"])
    atomic_write_bytes(folder / HUB_MANIFEST, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode())


def export_hub_source(
    key: str,
    folder: Path,
    *,
    dataset: str,
    config: str | None = None,
    splits: Sequence[str] = (),
    revision: str | None = None,
    lines_per_file: int = DEFAULT_LINES_PER_FILE,
    progress: Callable[[str], None] | None = None,
    open_split: Callable[..., Any] = open_hub_split,
    list_splits: Callable[..., list[str]] = hub_split_names,
    data_dir: str | None = None,
    allow_unpinned: bool = False,
) -> list[Path]:
    """Stream ``splits`` of hub ``dataset``/``config`` into ``folder``, resuming an interrupted export.

    Args:
        key: the source key (for the progress lines).
        folder: the source folder (created).
        dataset: a hub dataset id, or a local folder laid out like one.
        config: the hub config (None: the dataset's only one).
        splits: the splits to export, in order (empty: every split of the config).
        revision: a branch, tag or commit to pin (default: the default branch's current commit).
        lines_per_file: records per shard (must match the export being resumed).
        progress: one line per finished shard and per split.
        open_split: opens one split as a streaming dataset (a seam for tests; ``data_dir`` is
            passed as a keyword when set).
        list_splits: lists a config's splits (a seam for tests, ``data_dir`` likewise).
        allow_unpinned: export even when no revision can be pinned (recorded as unpinned).
        data_dir: one folder of the dataset to read (None: the whole config).

    Returns:
        Every shard of the export, in order.

    Raises:
        ValueError: a resume whose dataset, config, splits, revision or shard size differs, or a
            shard recorded in ``hub.json`` that is gone.
    """
    say = progress or (lambda _line: None)
    state = read_hub_manifest(folder)
    if state:
        checked = [("dataset", dataset), ("config", config), ("lines_per_file", lines_per_file)]
        checked += [("data_dir", data_dir)] if data_dir or state.get("data_dir") else []
        for name, want in checked:
            if state.get(name) != want:
                raise ValueError(
                    f"{folder / HUB_MANIFEST}: a previous export used {name}={state.get(name)!r}, not "
                    f"{want!r}; rerun with the same value or `ragsft sources remove {key}` to start over"
                )
        if splits and list(splits) != state.get("splits"):
            raise ValueError(
                f"{folder / HUB_MANIFEST}: a previous export streams splits {state.get('splits')}, not "
                f"{list(splits)}; rerun with the same splits or remove the source to start over"
            )
        if revision and state.get("revision") not in (None, revision):
            raise ValueError(
                f"{folder / HUB_MANIFEST}: a previous export pinned revision {state['revision']!r}, not "
                f"{revision!r}; remove the source to export another revision"
            )
        missing = [s["name"] for s in state.get("shards", []) if not (folder / s["name"]).is_file()]
        if missing:
            raise ValueError(
                f"{folder}: shard(s) {', '.join(missing)} recorded in {HUB_MANIFEST} are missing; "
                f"`ragsft sources remove {key}` and add it again"
            )
    else:
        pinned = resolve_revision(dataset, revision, allow_unpinned)
        folder_kw = {"data_dir": data_dir} if data_dir else {}
        names = list(splits) or list_splits(dataset, config, pinned, **folder_kw)
        if not names:
            raise ValueError(f"{dataset} (config {config!r}) lists no split")
        state = {
            "dataset": dataset,
            "config": config,
            "revision": pinned,
            **({"data_dir": data_dir} if data_dir else {}),
            "lines_per_file": lines_per_file,
            "splits": names,
            "progress": {s: {"shards": [], "complete": False} for s in names},
        }
        folder.mkdir(parents=True, exist_ok=True)  # only once the dataset answered: no empty folder
        _save(folder, state)
    if state["complete"]:
        say(f"{key}: already exported ({len(state['shards'])} shard(s)), nothing to stream")
    for split in state["splits"]:
        entry = state["progress"][split]
        shards: list[dict[str, Any]] = entry["shards"]
        if entry["complete"]:
            continue
        ds = open_split(
            dataset, config, split, state["revision"], **({"data_dir": data_dir} if data_dir else {})
        )
        if entry.get("resume_state") is not None:
            ds.load_state_dict(entry["resume_state"])
            done = sum(s["records"] for s in shards)
            say(f"{key}: {split}: resuming after {len(shards)} finished shard(s) ({done:,} records)")

        def checkpoint(resume_state: Any, entry: dict[str, Any] = entry) -> None:
            entry["resume_state"] = resume_state
            _save(folder, state)

        stream_shards(
            ds,
            folder,
            shards,
            shard_file=lambda i, split=split: shard_file(split, i),
            lines_per_file=lines_per_file,
            checkpoint=checkpoint,
            say=say,
            label=f"{key}: {split}",
        )
        entry["complete"] = True
        entry.pop("resume_state", None)
        _save(folder, state)
        say(f"{key}: {split}: {sum(s['records'] for s in shards):,} records in {len(shards)} shard(s)")
    if not state["shards"]:
        raise ValueError(f"{dataset} (config {config!r}, splits {state['splits']}) holds no record")
    return [folder / s["name"] for s in state["shards"]]
