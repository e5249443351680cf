"""``ragsft sources add|list|remove``: outside question sets and the ``qa_source`` partitions.

A source goes under ``$RAGSFT_HOME/sources/<key>/`` (its data files plus ``source.json``, which
names the preset or holds the mapping) and ``<key>`` is registered in the ``qa_source`` dynamic
partitions of the instance ``ragsft snapshots`` uses. A key belongs to one partition set only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ragsft_assets import published_configs
from ragsft_assets.cli.instance import SOURCE_PARTITIONS as PARTITIONS
from ragsft_assets.cli.instance import instance as _instance
from ragsft_assets.cli.instance import sources_dir
from ragsft_assets.home import dagster_home, snapshots_dir

if TYPE_CHECKING:  # the readers (pyarrow) load only when a command runs
    from ragsft_assets.sources.read import SourceRead, SourceScan

# The presets `sources add --preset` knows (sources/read.py's PRESETS; a test keeps them equal):
# named here so that --help lists them without importing the readers.
PRESET_NAMES = ("hotpotqa", "narrativeqa", "rag_tge", "synthetic_convqa", "trust_align")


def require_questions(key: str, read: SourceRead | SourceScan) -> None:
    """Refuse a source that yields no question, naming why its records were left out.

    Raises:
        ValueError: ``read`` has no row; the message lists the reader's reason counts
            (``rejected:<reason>`` and the other counters of its funnel, e.g. trust_align's), or
            the rows read per file.
    """
    if read.num_rows:
        return
    counts = dict(read.rows_per_file)
    reasons = {k.removeprefix("rejected:"): n for k, n in counts.items() if k.startswith("rejected:") and n}
    others = {k: n for k, n in counts.items() if not k.startswith("rejected:") and n}
    detail = ", ".join(f"{k}: {n}" for k, n in sorted({**reasons, **others}.items())) or "no record read"
    raise ValueError(f"source {key}: 0 questions; records left out by reason: {detail}")


def _check_key(key: str, home: Path | None) -> None:
    """A valid source key that is not a snapshot key (a key belongs to one partition set only)."""
    from ragsft_assets.defs.partitions import SNAPSHOT_PARTITIONS_NAME, validate_source_key

    validate_source_key(key)
    if (snapshots_dir(home) / key).exists() or (
        dagster_home(home).exists() and _instance(home).has_dynamic_partition(SNAPSHOT_PARTITIONS_NAME, key)
    ):
        raise ValueError(f"{key!r} is already a snapshot key: a key belongs to one partition set only")


def _write_config(
    target: Path,
    key: str,
    preset: str | None,
    mapping: dict,
    rows_per_file: dict,
    origin: dict | None = None,
) -> None:
    from ragsft_assets.sources.read import SOURCE_CONFIG
    from ragsft_assets.storage import atomic_write_bytes

    cfg = {"key": key, "preset": preset, "mapping": None if preset else mapping, "files": rows_per_file}
    if origin is not None:  # a source exported from this project's own store (--from-snapshot)
        cfg["origin"] = origin
    atomic_write_bytes(target / SOURCE_CONFIG, (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode())


def _refuse_existing(
    target: Path, key: str, replace: bool, what: str, files: list[Path] | None = None
) -> None:
    """ValueError when the folder of ``key`` already holds data and ``replace`` is false.

    The same data ``files`` again (names, sizes, then times or bytes) replace nothing.
    """
    from ragsft_assets.cli.snapshots import same_files
    from ragsft_assets.sources.read import HUB_STATE, SOURCE_CONFIG

    held = [p for p in target.iterdir() if not p.name.startswith(".")] if target.is_dir() else []
    data = [p for p in held if p.name not in (SOURCE_CONFIG, HUB_STATE)]
    if files is not None and data and same_files(files, data):
        return
    if held and not replace:
        raise ValueError(
            f"source {key} already has data in {target} ({len(held)} file(s)): add --replace to replace "
            f"it by {what}, or pick another key. Nothing was changed."
        )


def _install_staged(target: Path, fill: Callable[[Path], None]) -> None:
    """Fill a staging folder beside ``target``, then swap it in: nothing is deleted before the copy is whole."""
    from ragsft_assets.storage import staging_folder, swap_folder

    staging = staging_folder(target)
    try:
        fill(staging)
        swap_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def install_source(
    key: str,
    source: Path,
    *,
    preset: str | None,
    mapping_file: Path | None,
    home: Path | None = None,
    replace: bool = False,
) -> tuple[Path, int]:
    """Validate and copy ``source`` (file or folder) into the source folder of ``key``.

    Every record is read through the preset or mapping first, so a bad file fails here (naming the
    file, the record and the field) rather than in a run. ``source`` being the key's own folder
    registers it in place; a folder that already holds data is replaced only with ``replace``, and
    only once the new copy is complete (staged beside it, then swapped). Returns ``(folder, rows)``.
    """
    from ragsft_assets.sources.read import load_mapping, scan_source, source_files

    _check_key(key, home)
    mapping = load_mapping(preset, mapping_file)
    source = source.expanduser().resolve()
    target = sources_dir(home) / key
    in_place = (source if source.is_dir() else source.parent) == target.resolve()
    if in_place:
        source = target  # the key's own folder: every data file of it, registered where it is
    else:
        _refuse_existing(target, key, replace, f"the files of {source}", source_files(source))
    read = scan_source(source, mapping)  # streamed: a source of any size in flat memory
    require_questions(key, read)
    if in_place:
        _write_config(target, key, preset, mapping, read.rows_per_file)
        return target, read.num_rows

    def fill(staging: Path) -> None:
        for f in source_files(source):
            shutil.copy2(f, staging / f.name)
        _write_config(staging, key, preset, mapping, read.rows_per_file)

    _install_staged(target, fill)
    return target, read.num_rows


# The snapshot assets in the HotpotQA layout, split files ``<split>.parquet``: the default
# configuration and the filtered ones (rows of the default's, unchanged).
SNAPSHOT_QUESTIONS = tuple(c.asset for c in published_configs.of_family("multihop"))


def install_snapshot_source(
    key: str,
    snapshot: str,
    *,
    questions: str = SNAPSHOT_QUESTIONS[0],
    home: Path | None = None,
    replace: bool = False,
) -> tuple[Path, int]:
    """Install a snapshot's multi-hop questions (this project's own corpus) as source ``key``.

    Copies the split files (``train/validation/test.parquet``) of the store asset ``questions`` of
    snapshot ``snapshot`` (HotpotQA layout: each question with its two gold abstracts, the
    supporting paragraphs, among distractor abstracts) into the source folder, reads them through
    the ``hotpotqa`` preset like ``install_source``, and records where they came from in
    ``source.json`` (``origin``: snapshot, asset, each file's SHA-256 and the snapshot's article
    revisions), so a later re-materialization of the snapshot does not pass for the same source.
    Returns ``(folder, rows)``.

    Raises:
        ValueError: unknown ``questions`` asset, or the snapshot has no materialized split file.
    """
    from ragsft_assets.home import assets_dir
    from ragsft_assets.ids import sha256_hex
    from ragsft_assets.release.manifest import source_info
    from ragsft_assets.sources.read import load_mapping, read_source
    from ragsft_assets.storage import SPLITS

    if questions not in SNAPSHOT_QUESTIONS:
        raise ValueError(f"unknown snapshot questions {questions!r}; known: {', '.join(SNAPSHOT_QUESTIONS)}")
    _check_key(key, home)
    root = assets_dir(home)
    folder = root / snapshot / questions
    files = [folder / f"{s}.parquet" for s in SPLITS if (folder / f"{s}.parquet").is_file()]
    if not files:
        raise ValueError(
            f"snapshot {snapshot!r} has no {questions} split file in {folder}:"
            f" materialize {questions} for it first (multihop_job)"
        )
    mapping = load_mapping("hotpotqa")
    target = sources_dir(home) / key
    _refuse_existing(target, key, replace, f"the {questions} of snapshot {snapshot}")
    rows = 0

    def fill(staging: Path) -> None:
        nonlocal rows
        for f in files:  # the split is the file's name, as for every source file
            shutil.copy2(f, staging / f.name)
        read = read_source(staging, mapping)
        origin = {
            "source": "snapshot",
            "snapshot": snapshot,
            "asset": questions,
            "files_sha256": {f.name: sha256_hex((staging / f.name).read_bytes()) for f in files},
            "revisions": source_info(root, None, snapshot).get("revisions"),
        }
        _write_config(staging, key, "hotpotqa", mapping, read.rows_per_file, origin)
        rows = read.table.num_rows

    _install_staged(target, fill)
    return target, rows


def install_hub_source(
    key: str,
    dataset: str,
    *,
    preset: str | None,
    mapping_file: Path | None,
    config: str | None = None,
    splits: tuple[str, ...] = (),
    revision: str | None = None,
    lines_per_file: int | None = None,
    home: Path | None = None,
    progress: Callable[[str], None] | None = None,
    data_dir: str | None = None,
    allow_unpinned: bool = False,
    **seams: Callable,
) -> tuple[Path, int]:
    """Stream hub ``dataset`` into the source folder of ``key`` (resuming an interrupted export), then
    validate every record through the preset or mapping as ``install_source`` does.

    ``config`` defaults to the preset's hub config (``distractor`` for hotpotqa), ``data_dir`` to the
    folder its card reads and ``revision`` to the commit its card pins (``Trust-Align/sft`` at
    ``0b89ac0`` for trust_align). A folder that holds a local install (no ``hub.json``) is refused:
    remove the source first. ``seams`` (``open_split``, ``list_splits``) go to ``export_hub_source``
    (tests). Returns ``(folder, rows)``.

    Raises:
        ValueError: see ``export_hub_source``; a source that yields no question (``require_questions``).
    """
    from ragsft_assets.corpus.hub_snapshot import DEFAULT_LINES_PER_FILE, HUB_MANIFEST
    from ragsft_assets.sources.hub import (
        PRESET_CONFIGS,
        PRESET_DATA_DIRS,
        PRESET_REVISIONS,
        export_hub_source,
    )
    from ragsft_assets.sources.read import SourceError, load_mapping, read_source

    _check_key(key, home)
    mapping = load_mapping(preset, mapping_file)  # a bad preset or mapping fails before any download
    target = sources_dir(home) / key
    if target.exists() and not (target / HUB_MANIFEST).is_file():
        raise ValueError(f"{target} holds a local install of {key}: `ragsft sources remove {key}` first")
    export_hub_source(
        key,
        target,
        dataset=dataset,
        config=config or PRESET_CONFIGS.get(preset or ""),
        splits=splits,
        revision=revision or PRESET_REVISIONS.get(preset or ""),
        lines_per_file=lines_per_file or DEFAULT_LINES_PER_FILE,
        progress=progress,
        data_dir=data_dir or PRESET_DATA_DIRS.get(preset or ""),
        allow_unpinned=allow_unpinned,
        **seams,
    )
    try:
        read = read_source(target, mapping)
    except SourceError as exc:  # the shards stay: a fixed mapping can be tried without streaming again
        raise SourceError(f"{exc} (streamed from {dataset}; the shards are kept in {target})") from exc
    require_questions(key, read)
    _write_config(target, key, preset, mapping, read.rows_per_file)
    return target, read.table.num_rows


@click.group()
def sources() -> None:
    """Outside question sets under $RAGSFT_HOME/sources and the `qa_source` partitions."""


@sources.command("add")
@click.argument("key")
@click.option("--from", "source", type=click.Path(path_type=Path), help="File or folder.")
@click.option(
    "--from-snapshot",
    "snapshot",
    metavar="SNAP",
    help="A snapshot's multi-hop questions from the store (preset hotpotqa; see --questions).",
)
@click.option(
    "--questions",
    type=click.Choice(SNAPSHOT_QUESTIONS),
    help="With --from-snapshot: which configuration (default multihop_questions).",
)
@click.option(
    "--hub", "hub", metavar="ID", help="Stream a hub dataset (or a local folder laid out like one)."
)
@click.option(
    "--config", "hub_config", help="With --hub: the hub config (default: the preset's, e.g. distractor)."
)
@click.option(
    "--split", "splits", multiple=True, help="With --hub: a split to stream (repeatable; default all)."
)
@click.option(
    "--revision",
    help="With --hub: the revision to pin (default: the preset card's commit, e.g. 0b89ac0 for "
    "trust_align, else the branch's current commit).",
)
@click.option(
    "--data-dir",
    "data_dir",
    help="With --hub: one folder of the dataset (default: the preset card's, e.g. Trust-Align/sft).",
)
@click.option("--lines-per-file", type=click.IntRange(min=1), help="With --hub: records per shard.")
@click.option(
    "--allow-unpinned",
    is_flag=True,
    help="With --hub: export even when no revision can be pinned (recorded as unpinned).",
)
@click.option(
    "--preset",
    help=f"Column mapping of a known source ({', '.join(PRESET_NAMES)}); default: the key's first part.",
)
@click.option("--mapping", "mapping_file", type=click.Path(path_type=Path), help="JSON/YAML mapping file.")
@click.option("--replace", is_flag=True, help="Replace the data KEY already has (kept otherwise).")
def add(
    key: str,
    source: Path | None,
    snapshot: str | None,
    questions: str | None,
    hub: str | None,
    hub_config: str | None,
    splits: tuple[str, ...],
    revision: str | None,
    data_dir: str | None,
    lines_per_file: int | None,
    allow_unpinned: bool,
    preset: str | None,
    mapping_file: Path | None,
    replace: bool = False,
) -> None:
    """Install source KEY (<source>.<lang>, e.g. hotpotqa.en) and register it as a partition.

    --from the key's own folder ($RAGSFT_HOME/sources/KEY) registers it in place. Data KEY already
    has is replaced only with --replace, once the new copy is complete. With --hub the export
    resumes: rerun the same command after an interruption and the finished shards are kept.
    """
    from ragsft_assets.sources.read import SourceError

    if [source, hub, snapshot].count(None) != 2:
        raise click.UsageError("give exactly one of --from PATH, --hub ID, --from-snapshot SNAP")
    if hub is None and (hub_config or splits or revision or data_dir or lines_per_file or allow_unpinned):
        raise click.UsageError(
            "--config, --split, --revision, --data-dir, --lines-per-file and --allow-unpinned go with --hub"
        )
    if replace and hub is not None:
        raise click.UsageError("--replace goes with --from or --from-snapshot (--hub resumes its export)")
    if questions is not None and snapshot is None:
        raise click.UsageError("--questions goes with --from-snapshot")
    if snapshot is not None and (preset is not None or mapping_file is not None):
        raise click.UsageError("--from-snapshot reads the HotpotQA layout: no --preset or --mapping")
    if preset is None and mapping_file is None:
        preset = key.split(".", 1)[0]  # hotpotqa.en -> the hotpotqa preset
    elif preset is not None and mapping_file is not None:
        raise click.UsageError("give at most one of --preset NAME, --mapping FILE")
    try:
        if hub is not None:
            folder, rows = install_hub_source(
                key,
                hub,
                preset=preset,
                mapping_file=mapping_file,
                config=hub_config,
                splits=splits,
                revision=revision,
                lines_per_file=lines_per_file,
                progress=click.echo,
                data_dir=data_dir,
                allow_unpinned=allow_unpinned,
            )
        elif snapshot is not None:
            folder, rows = install_snapshot_source(
                key, snapshot, questions=questions or SNAPSHOT_QUESTIONS[0], replace=replace
            )
        else:
            assert source is not None
            folder, rows = install_source(
                key, source, preset=preset, mapping_file=mapping_file, replace=replace
            )
    except (SourceError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # datasets/hub errors (no such dataset, config or split; network)
        if hub is None:
            raise
        raise click.ClickException(
            f"streaming {hub} failed: {type(exc).__name__}: {exc} (finished shards are kept: rerun to resume)"
        ) from exc
    instance = _instance()
    added = not instance.has_dynamic_partition(PARTITIONS, key)
    if added:
        instance.add_dynamic_partitions(PARTITIONS, [key])
    click.echo(f"source {key}: {rows} question(s) in {folder}")
    click.echo(f"partition {key} {'added to' if added else 'already in'} the instance at {dagster_home()}")


def source_origin(folder: Path) -> str:
    """Where an installed source came from, on one line, from its ``hub.json`` and ``source.json``.

    A hub source gives its dataset id, config, splits and pinned revision (``unpinned`` for a local
    folder laid out like the hub, which has no revision); one exported with ``--from-snapshot`` gives
    ``snapshot SNAP ASSET``; a local install says ``local``. The column
    mapping follows (``preset NAME`` or ``mapping``) with the rows read per file. A file that is
    missing or not JSON is named rather than failing the listing.
    """
    from ragsft_assets.corpus.hub_snapshot import HUB_MANIFEST
    from ragsft_assets.sources.read import SOURCE_CONFIG

    def read(name: str) -> dict | None:
        path = folder / name
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return {"error": f"{name} unreadable ({exc})"}
        return data if isinstance(data, dict) else {"error": f"{name} is not a JSON object"}

    hub, cfg = read(HUB_MANIFEST), read(SOURCE_CONFIG)
    parts = []
    own = (cfg or {}).get("origin") if isinstance((cfg or {}).get("origin"), dict) else None
    if own is not None and own.get("source") == "snapshot":
        parts.append(f"snapshot {own.get('snapshot')} {own.get('asset')}")
    elif hub is None:
        parts.append("local")
    elif "error" in hub:
        parts.append(hub["error"])
    else:
        state = "" if hub.get("complete") else " (export incomplete: rerun `sources add` to resume)"
        parts.append(
            f"hub {hub.get('dataset')} config={hub.get('config') or '-'} "
            + (f"data_dir={hub['data_dir']} " if hub.get("data_dir") else "")
            + f"split={','.join(hub.get('splits') or []) or '-'} revision={hub.get('revision') or 'unpinned'}"
            + state
        )
    if cfg is None:
        parts.append(f"no {SOURCE_CONFIG} (not validated)")
    elif "error" in cfg:
        parts.append(cfg["error"])
    else:
        files = cfg.get("files") or {}
        rows = sum(n for n in files.values() if isinstance(n, int))
        parts.append(f"preset {cfg['preset']}" if cfg.get("preset") else "mapping")
        parts.append(f"{rows} rows in {len(files)} file(s)")
    return "; ".join(parts)


@sources.command("list")
def list_() -> None:
    """List source folders, whether each is a registered partition, and where each came from."""
    root = sources_dir()
    keys = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    registered = set(_instance().get_dynamic_partitions(PARTITIONS)) if dagster_home().exists() else set()
    for key in sorted(set(keys) | registered):
        state = ("folder" if key in keys else "NO FOLDER") + (
            ", partition" if key in registered else ", no partition"
        )
        origin = f"\t{source_origin(root / key)}" if key in keys else ""
        click.echo(f"{key}\t{state}{origin}")
    if not keys and not registered:
        click.echo(f"no source under {root}; add one with `ragsft sources add KEY --from PATH`")


@sources.command("remove")
@click.argument("key")
def remove(key: str) -> None:
    """Remove source KEY: its partition and its folder (built assets are left in place)."""
    # no instance folder: no partition to remove, and none is made (nor a home) to find that out
    instance = _instance() if dagster_home().exists() else None
    if instance is not None and instance.has_dynamic_partition(PARTITIONS, key):
        instance.delete_dynamic_partition(PARTITIONS, key)
        click.echo(f"partition {key} removed")
    folder = sources_dir() / key
    if folder.exists():
        shutil.rmtree(folder)
        click.echo(f"folder {folder} removed")
