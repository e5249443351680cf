"""``ragsft snapshots add|list|remove``: snapshot folders and the ``snapshot`` dynamic partitions.

Dynamic partitions have no Dagster CLI: these commands put a dump under
``$RAGSFT_HOME/snapshots/<key>/`` and register ``<key>`` in the Dagster instance at
``home.dagster_home()`` (the one ``dagster dev`` uses), creating it if needed.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

import click

from ragsft_assets.cli.instance import instance as _instance
from ragsft_assets.cli.instance import source_key_taken
from ragsft_assets.corpus.structured_wikipedia import dump_files
from ragsft_assets.home import dagster_home, snapshots_dir
from ragsft_assets.resources.snapshots import SNAPSHOT_CONFIG

SAMPLE_KEY = "sample.fr"
PARTITIONS = "snapshot"


def sample_folder() -> Path:
    """The bundled sample snapshot folder (package data)."""
    return Path(str(resources.files("ragsft_assets") / "sample_snapshot" / SAMPLE_KEY))


def install_snapshot(key: str, source: Path, home: Path | None = None, *, link: bool = False) -> Path:
    """Copy (or symlink) the dump files, snapshot.json and topic files of ``source`` into the folder of ``key``.

    ``source`` may be a folder or one dump file. Raises ValueError when it holds no dump file.
    """
    from ragsft_assets.defs.partitions import validate_snapshot_key

    validate_snapshot_key(key)
    source = source.expanduser().resolve()
    files = dump_files(source) if source.is_dir() else [source]
    if not files or not all(f.is_file() for f in files):
        raise ValueError(f"no dump file (*.jsonl, *.jsonl.gz, *.parquet, *.xml.bz2) in {source}")
    target = snapshots_dir(home) / key
    target.mkdir(parents=True, exist_ok=True)
    from ragsft_assets.multihop.topics import TOPIC_FILES

    # snapshot.json and the topic categories (the card's keep rate by topic) travel with the dumps.
    extra = [
        source / n for n in (SNAPSHOT_CONFIG, *TOPIC_FILES) if source.is_dir() and (source / n).is_file()
    ]
    for f in [*files, *extra]:
        dest = target / f.name
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        if link:
            dest.symlink_to(f)
        else:
            shutil.copy2(f, dest)
    return target


def register_partition(key: str, home: Path | None = None) -> bool:
    """Add ``key`` to the ``snapshot`` dynamic partitions; False when it was already there."""
    instance = _instance(home)
    if instance.has_dynamic_partition(PARTITIONS, key):
        return False
    instance.add_dynamic_partitions(PARTITIONS, [key])
    return True


@click.group()
def snapshots() -> None:
    """Snapshot folders under $RAGSFT_HOME/snapshots and the `snapshot` partitions."""


@snapshots.command("add")
@click.argument("key")
@click.option("--from", "source", type=click.Path(exists=True, path_type=Path), help="Folder or dump file.")
@click.option("--sample", is_flag=True, help="Install the bundled sample snapshot (key sample.fr).")
@click.option("--hub", is_flag=True, help="Download KEY (<YYYYMMDD>.<lang>) from the Hugging Face hub.")
@click.option("--link", is_flag=True, help="Symlink the files instead of copying them.")
@click.option(
    "--revision", default=None, help="With --hub: the dataset revision to pin (default: the branch's commit)."
)
@click.option(
    "--allow-unpinned",
    is_flag=True,
    help="With --hub: export even when no revision can be pinned (recorded as unpinned in every manifest).",
)
def add(
    key: str,
    source: Path | None,
    sample: bool,
    hub: bool,
    link: bool,
    revision: str | None,
    allow_unpinned: bool = False,
) -> None:
    """Install snapshot KEY and register it as a partition.

    With --hub the export resumes: rerun the same command after an interruption and the finished
    shards are kept.
    """
    if sum([source is not None, sample, hub]) != 1:
        raise click.UsageError("give exactly one of --from FOLDER, --sample, --hub")
    if (revision or allow_unpinned) and not hub:
        raise click.UsageError("--revision and --allow-unpinned go with --hub")
    if hub:  # the key is the hub config: check it before anything is created or downloaded
        from ragsft_assets.corpus.hub_snapshot import validate_hub_key

        try:
            validate_hub_key(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEY") from exc
    if source_key_taken(key):  # a key belongs to one partition set only
        raise click.ClickException(f"{key!r} is already a source key (ragsft sources): pick another key")
    try:
        if sample:
            folder = install_snapshot(key, sample_folder())
        elif hub:
            from ragsft_assets.resources.snapshots import SnapshotSource

            SnapshotSource().fetch_from_hub(
                key, revision=revision, progress=click.echo, allow_unpinned=allow_unpinned
            )
            folder = snapshots_dir() / key
            from ragsft_assets.corpus.hub_snapshot import snapshot_revision

            pinned = snapshot_revision(folder)
            click.echo(
                f"snapshot {key}: {pinned['dataset']} revision {pinned['revision'] or 'UNPINNED (--allow-unpinned)'}"
            )
        else:
            assert source is not None
            folder = install_snapshot(key, source, link=link)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    added = register_partition(key)
    click.echo(f"snapshot {key}: {len(dump_files(folder))} file(s) in {folder}")
    click.echo(f"partition {key} {'added to' if added else 'already in'} the instance at {dagster_home()}")


@snapshots.command("list")
def list_() -> None:
    """List snapshot folders and whether each is a registered partition."""
    from ragsft_assets.resources.snapshots import SnapshotSource

    keys = SnapshotSource().list_snapshots()
    registered = (
        set(_instance().get_dynamic_partitions(PARTITIONS)) if keys or dagster_home().exists() else set()
    )
    for key in sorted(set(keys) | registered):
        state = ("folder" if key in keys else "NO FOLDER") + (
            ", partition" if key in registered else ", no partition"
        )
        click.echo(f"{key}\t{state}")
    if not keys and not registered:
        click.echo(
            f"no snapshot under {snapshots_dir()}; add one with `ragsft snapshots add KEY --from FOLDER`"
        )


@snapshots.command("remove")
@click.argument("key")
@click.option("--keep-files", is_flag=True, help="Only remove the partition, keep the snapshot folder.")
def remove(key: str, keep_files: bool) -> None:
    """Remove snapshot KEY: its partition and its folder (built assets are left in place)."""
    instance = _instance()
    if instance.has_dynamic_partition(PARTITIONS, key):
        instance.delete_dynamic_partition(PARTITIONS, key)
        click.echo(f"partition {key} removed")
    folder = snapshots_dir() / key
    if folder.exists() and not keep_files:
        shutil.rmtree(folder) if not folder.is_symlink() else os.unlink(folder)
        click.echo(f"folder {folder} removed")
