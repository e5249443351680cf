"""``ragsft sources add|list|remove``: outside question sets and the ``qa_source`` partitions.

A source goes under ``$RAGSFT_HOME/sources/<key>/`` (its data files plus ``source.json``, which
names the preset or holds the mapping) and ``<key>`` is registered in the ``qa_source`` dynamic
partitions of the instance ``ragsft snapshots`` uses. A key belongs to one partition set only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from ragsft_assets.cli.snapshots import _instance
from ragsft_assets.home import dagster_home, ragsft_home, snapshots_dir

PARTITIONS = "qa_source"


def sources_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "sources"


def source_key_taken(key: str, home: Path | None = None) -> bool:
    """True when ``key`` is a source (folder or registered partition): `snapshots add` refuses it."""
    if (sources_dir(home) / key).exists():
        return True
    return dagster_home(home).exists() and _instance(home).has_dynamic_partition(PARTITIONS, key)


def install_source(
    key: str, source: Path, *, preset: str | None, mapping_file: Path | None, home: Path | None = None
) -> tuple[Path, int]:
    """Validate and copy ``source`` (file or folder) into the source folder of ``key``.

    Every record is read through the preset or mapping first, so a bad file fails here (naming the
    file, the record and the field) rather than in a run. Returns ``(folder, rows)``.
    """
    from ragsft_assets.defs.partitions import SNAPSHOT_PARTITIONS_NAME, validate_source_key
    from ragsft_assets.sources.read import SOURCE_CONFIG, load_mapping, read_source, source_files

    validate_source_key(key)
    if (snapshots_dir(home) / key).exists() or (
        dagster_home(home).exists() and _instance(home).has_dynamic_partition(SNAPSHOT_PARTITIONS_NAME, key)
    ):
        raise ValueError(f"{key!r} is already a snapshot key: a key belongs to one partition set only")
    mapping = load_mapping(preset, mapping_file)
    source = source.expanduser().resolve()
    read = read_source(source, mapping)
    target = sources_dir(home) / key
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for f in source_files(source):
        shutil.copy2(f, target / f.name)
    cfg = {"key": key, "preset": preset, "mapping": None if preset else mapping, "files": read.rows_per_file}
    (target / SOURCE_CONFIG).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return target, read.table.num_rows


@click.group()
def sources() -> None:
    """Outside question sets under $RAGSFT_HOME/sources and the `qa_source` partitions."""


@sources.command("add")
@click.argument("key")
@click.option("--from", "source", required=True, type=click.Path(path_type=Path), help="File or folder.")
@click.option("--preset", help="Column mapping of a known source (hotpotqa).")
@click.option("--mapping", "mapping_file", type=click.Path(path_type=Path), help="JSON/YAML mapping file.")
def add(key: str, source: Path, preset: str | None, mapping_file: Path | None) -> None:
    """Install source KEY (<source>.<lang>, e.g. hotpotqa.en) and register it as a partition."""
    from ragsft_assets.sources.read import SourceError

    if preset is None and mapping_file is None:
        preset = key.split(".", 1)[0]  # hotpotqa.en -> the hotpotqa preset
    elif preset is not None and mapping_file is not None:
        raise click.UsageError("give at most one of --preset NAME, --mapping FILE")
    try:
        folder, rows = install_source(key, source, preset=preset, mapping_file=mapping_file)
    except (SourceError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    instance = _instance()
    added = not instance.has_dynamic_partition(PARTITIONS, key)
    if added:
        instance.add_dynamic_partitions(PARTITIONS, [key])
    click.echo(f"source {key}: {rows} question(s) in {folder}")
    click.echo(f"partition {key} {'added to' if added else 'already in'} the instance at {dagster_home()}")


@sources.command("list")
def list_() -> None:
    """List source folders and whether each is a registered partition."""
    root = sources_dir()
    keys = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    registered = set(_instance().get_dynamic_partitions(PARTITIONS)) if dagster_home().exists() else set()
    for key in sorted(set(keys) | registered):
        state = ("folder" if key in keys else "NO FOLDER") + (
            ", partition" if key in registered else ", no partition"
        )
        click.echo(f"{key}\t{state}")
    if not keys and not registered:
        click.echo(f"no source under {root}; add one with `ragsft sources add KEY --from PATH`")


@sources.command("remove")
@click.argument("key")
def remove(key: str) -> None:
    """Remove source KEY: its partition and its folder (built assets are left in place)."""
    instance = _instance()
    if instance.has_dynamic_partition(PARTITIONS, key):
        instance.delete_dynamic_partition(PARTITIONS, key)
        click.echo(f"partition {key} removed")
    folder = sources_dir() / key
    if folder.exists():
        shutil.rmtree(folder)
        click.echo(f"folder {folder} removed")
