"""Exporting a hub config of wikimedia/structured-wikipedia into a local snapshot folder, resumably.

The export streams the config with ``datasets`` and writes gzipped JSON-lines shards of
``lines_per_file`` records. Each shard goes to ``<name>.part`` and is renamed when complete, then
``hub.json`` records the finished shards and the stream position after them (the
``IterableDataset.state_dict()`` of ``datasets``), so a rerun after an interruption keeps the
finished shards and continues after them without re-reading them. ``hub.json`` also pins the
dataset revision (a commit sha), which the release manifest reads through :func:`snapshot_revision`.

Dagster-free: the CLI (``ragsft snapshots add KEY --hub``) and the ``snapshot_files`` asset call it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.corpus.snapshot_layout import HUB_DATASET, dump_files, validate_snapshot_key

HUB_MANIFEST = "hub.json"
# Where the hub loader reads from: a hub dataset id, or a local folder laid out like it (tests, mirrors).
HUB_DATASET_ENV = "RAGSFT_HUB_DATASET"
DEFAULT_LINES_PER_FILE = 100_000


def hub_dataset() -> str:
    """The dataset the hub path reads: ``$RAGSFT_HUB_DATASET`` or wikimedia/structured-wikipedia."""
    return os.environ.get(HUB_DATASET_ENV) or HUB_DATASET


def validate_hub_key(key: str) -> tuple[str, str]:
    """``(date, lang)`` of a hub snapshot key ``<YYYYMMDD>.<lang>``; ValueError for anything else."""
    validate_snapshot_key(key)
    date, lang = key.split(".", 1)
    if not (len(date) == 8 and date.isdigit()):
        raise ValueError(
            f"invalid hub snapshot key {key!r}: the hub's configs are <YYYYMMDD>.<lang> such as 20240916.fr"
        )
    return date, lang


class UnpinnedSourceError(ValueError):
    """The hub revision could not be pinned and ``--allow-unpinned`` was not given."""


def resolve_revision(dataset: str, revision: str | None, allow_unpinned: bool = False) -> str | None:
    """The revision to pin: ``revision`` when given, else the commit sha of the default branch.

    A local folder has no revision (None). When the hub cannot be asked, the export would stream
    whatever the branch holds at each resume, mixing revisions across shards: that is an error
    unless ``allow_unpinned`` (then None, recorded as unpinned in hub.json and every manifest).

    Raises:
        UnpinnedSourceError: the branch's commit could not be read and unpinned is not allowed.
    """
    if revision:
        return revision
    if Path(dataset).is_dir():
        return None
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(dataset).sha
    except Exception as exc:  # noqa: BLE001 - offline, hub down, gated: said, never silently unpinned
        if allow_unpinned:
            return None
        raise UnpinnedSourceError(
            f"could not pin a revision of {dataset} ({type(exc).__name__}: {exc}); give --revision SHA, "
            "or --allow-unpinned to export whatever the branch holds (recorded as unpinned)"
        ) from exc


def check_resume_revision(folder: Path, recorded: str | None, asked: str | None) -> None:
    """A resume exports the first run's revision: another ``--revision`` is an error naming both.

    Raises:
        ValueError: ``asked`` is given and differs from ``recorded`` (None: the first run was unpinned).
    """
    if not asked or asked == recorded:
        return
    if recorded:
        fix = f"rerun with --revision {recorded} (or none) to resume it, or delete the folder to export {asked!r}"
        first = f"revision {recorded!r}"
    else:
        fix = "its shards may hold any revision: delete the folder to export a pinned one"
        first = "no revision (unpinned)"
    raise ValueError(
        f"{folder / HUB_MANIFEST}: the export being resumed pinned {first}, not --revision {asked!r}; {fix}"
    )


def open_hub_config(dataset: str, config: str, revision: str | None) -> Any:
    """The ``train`` split of ``config`` as a streaming ``datasets.IterableDataset``."""
    import datasets  # heavy: imported only when the hub path is used

    return datasets.load_dataset(dataset, config, split="train", streaming=True, revision=revision)


def read_hub_manifest(folder: Path) -> dict[str, Any]:
    """The ``hub.json`` of a snapshot folder ({} when the folder was not exported from the hub)."""
    path = folder / HUB_MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}): delete it and export again") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object: delete it and export again")
    return data


def snapshot_revision(folder: Path) -> dict[str, Any]:
    """Where a snapshot folder came from, for the release manifest.

    Returns:
        ``{"source": "hub", "dataset", "config", "revision", "pinned", "complete", "records",
        "shards"}`` for a hub export (``revision`` None and ``pinned`` False when it was exported
        unpinned), else ``{"source": "local"}``.
    """
    data = read_hub_manifest(folder)
    if not data:
        return {"source": "local"}
    return {
        "source": "hub",
        "dataset": data.get("dataset"),
        "config": data.get("config"),
        "revision": data.get("revision"),
        "pinned": bool(data.get("revision")),
        "complete": bool(data.get("complete")),
        "records": sum(int(s["records"]) for s in data.get("shards", [])),
        "shards": len(data.get("shards", [])),
    }


def _write_manifest(folder: Path, data: dict[str, Any]) -> None:
    # Written to a temporary file and renamed: an interruption never leaves a half-written hub.json.
    tmp = folder / (HUB_MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(folder / HUB_MANIFEST)


def shard_name(lang: str, index: int) -> str:
    """``frwiki_namespace_0_00003.jsonl.gz``: zero-padded so that name order is shard order."""
    return f"{lang}wiki_namespace_0_{index:05d}.jsonl.gz"


def stream_shards(
    ds: Any,
    folder: Path,
    shards: list[dict[str, Any]],
    *,
    shard_file: Callable[[int], str],
    lines_per_file: int,
    checkpoint: Callable[[Any], None],
    say: Callable[[str], None],
    label: str,
) -> None:
    """Write the records of a streaming dataset as gzipped JSON-lines shards, one finished shard at a time.

    Each shard goes to ``<name>.part`` and is renamed when it holds ``lines_per_file`` records (or
    the stream ends); it is then appended to ``shards`` (``{name, records, bytes}``) and
    ``checkpoint(ds.state_dict())`` persists the stream position after it, so that a rerun that
    loads that state continues after the finished shards. An interruption drops the unfinished
    shard whole. The snapshot export and ``ragsft sources add --hub`` share it.

    Args:
        ds: a ``datasets.IterableDataset`` (positioned by the caller when resuming).
        folder: where the shards go.
        shards: the finished shards so far (appended to).
        shard_file: the file name of shard number ``len(shards)``.
        lines_per_file: records per shard.
        checkpoint: called with the stream state after each finished shard.
        say: one progress line per finished shard.
        label: what the progress lines name (the key).
    """
    part: Path | None = None
    out = None
    count = 0

    def finish() -> None:
        # Rename the complete shard, then record it with the stream position after its last record.
        nonlocal out, part
        out.close()
        final = part.with_name(part.name.removesuffix(".part"))
        part.replace(final)
        shards.append({"name": final.name, "records": count, "bytes": final.stat().st_size})
        checkpoint(ds.state_dict())
        total = sum(s["records"] for s in shards)
        say(f"{label}: shard {final.name} written ({count:,} records, {total:,} in all)")
        out, part = None, None

    try:
        for rec in ds:
            if out is None:
                part = folder / (shard_file(len(shards)) + ".part")
                # Level 6, not gzip's default 9: several times faster for a few percent of size.
                # mtime=0: the header holds no clock time, so a resumed export is byte-identical.
                out = gzip.GzipFile(part, "wb", compresslevel=6, mtime=0)  # noqa: SIM115 - closed in finish()
                count = 0
            out.write(orjson.dumps(rec) + b"\n")
            count += 1
            if count == lines_per_file:
                finish()
        if out is not None:
            finish()
    except BaseException:
        # An interrupted shard is dropped whole: the finished ones and the manifest stay for the rerun.
        if out is not None and not out.closed:
            out.close()
        if part is not None:
            part.unlink(missing_ok=True)
        raise


def export_hub_snapshot(
    key: str,
    folder: Path,
    *,
    dataset: str | None = None,
    revision: str | None = None,
    lines_per_file: int = DEFAULT_LINES_PER_FILE,
    progress: Callable[[str], None] | None = None,
    open_config: Callable[[str, str, str | None], Any] | None = None,
    allow_unpinned: bool = False,
) -> list[Path]:
    """Export hub config ``key`` into ``folder`` as gzipped JSON-lines shards, resuming a previous run.

    Args:
        key: the snapshot key, which is the hub config (``20240916.fr``).
        folder: the snapshot folder (created).
        dataset: the hub dataset id or a local folder laid out like it (default :func:`hub_dataset`).
        revision: a branch, tag or commit to pin; default the default branch's current commit.
        lines_per_file: records per shard (must match the run being resumed).
        progress: called with one line per finished shard.
        open_config: opens the streaming dataset (a seam for tests; the real one by default).
        allow_unpinned: export even when no revision can be pinned (see ``resolve_revision``).

    Returns:
        All the shard files of the snapshot, in order.

    Raises:
        ValueError: an invalid key, or a resume whose dataset, revision or shard size differs.
        UnpinnedSourceError: no revision could be pinned and ``allow_unpinned`` is False.
    """
    _date, lang = validate_hub_key(key)
    say = progress or (lambda _line: None)
    dataset = dataset or hub_dataset()
    folder.mkdir(parents=True, exist_ok=True)
    state = read_hub_manifest(folder)
    if state:
        for name, want in (("dataset", dataset), ("lines_per_file", lines_per_file)):
            if state.get(name) != want:
                raise ValueError(
                    f"{folder / HUB_MANIFEST}: a previous export used {name}={state.get(name)!r}, not {want!r}; "
                    "rerun with the same value or delete the folder to start over"
                )
        check_resume_revision(folder, state.get("revision"), revision)
        missing = [s["name"] for s in state.get("shards", []) if not (folder / s["name"]).is_file()]
        if missing:
            raise ValueError(
                f"{folder}: shard(s) {', '.join(missing)} recorded in {HUB_MANIFEST} are missing; "
                "delete the folder to export again"
            )
    else:
        state = {
            "dataset": dataset,
            "config": key,
            "revision": resolve_revision(dataset, revision, allow_unpinned),
            "lines_per_file": lines_per_file,
            "shards": [],
            "complete": False,
        }
        _write_manifest(folder, state)
    shards: list[dict[str, Any]] = state["shards"]
    if state.get("complete"):
        say(f"{key}: already exported ({len(shards)} shard(s)), nothing to do")
        return [folder / s["name"] for s in shards]
    ds = (open_config or open_hub_config)(dataset, key, state["revision"])
    if state.get("resume_state") is not None:
        ds.load_state_dict(state["resume_state"])
        done = sum(s["records"] for s in shards)
        say(f"{key}: resuming after {len(shards)} finished shard(s) ({done:,} records)")

    def checkpoint(resume_state: Any) -> None:
        state["resume_state"] = resume_state
        _write_manifest(folder, state)

    stream_shards(
        ds,
        folder,
        shards,
        shard_file=lambda i: shard_name(lang, i),
        lines_per_file=lines_per_file,
        checkpoint=checkpoint,
        say=say,
        label=key,
    )
    state["complete"] = True
    state.pop("resume_state", None)
    _write_manifest(folder, state)
    say(f"{key}: export complete, {len(shards)} shard(s), {sum(s['records'] for s in shards):,} records")
    return [folder / s["name"] for s in shards]


SNAPSHOT_SOURCE_ENV = "RAGSFT_SNAPSHOT_SOURCE"
# Hashing reads every byte: files above this size are recorded by name and size only.
HASH_LIMIT_BYTES = 512 * 1024 * 1024


def exports_from_hub(key: str, folder: Path, environ: dict[str, str] | None = None) -> bool:
    """Whether ``key`` is fetched from the hub: ``RAGSFT_SNAPSHOT_SOURCE=hub``, a hub key, and a folder
    that is an export (its hub.json) or not there yet; a local folder with dump files stays local."""
    env = os.environ if environ is None else environ
    if env.get(SNAPSHOT_SOURCE_ENV, "local") != "hub":
        return False
    try:
        validate_hub_key(key)
    except ValueError:
        return False
    return bool(read_hub_manifest(folder)) or not folder.is_dir() or not dump_files(folder)


def describe_files(files: list[Path], hash_limit: int = HASH_LIMIT_BYTES) -> list[dict[str, Any]]:
    """``{name, bytes, sha256}`` per file (sha256 None above ``hash_limit`` bytes: sizes only).

    Raises:
        ValueError: a file is empty (a copy that never started, or a failed download).
    """
    import hashlib

    out = []
    for f in files:
        size = f.stat().st_size
        if size == 0:
            raise ValueError(f"{f} is empty: copy or export the snapshot again")
        digest = None
        if size <= hash_limit:
            h = hashlib.sha256()
            with f.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
            digest = h.hexdigest()
        out.append({"name": f.name, "bytes": size, "sha256": digest})
    return out
