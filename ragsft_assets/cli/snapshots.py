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


def _dump_files_of(source: Path) -> list[Path]:
    """The dump files ``source`` (a folder or one file) offers; ValueError, saying what was found, when none."""
    from ragsft_assets.corpus.snapshot_layout import DUMP_SUFFIXES

    kinds = ", ".join(f"*{s}" for s in DUMP_SUFFIXES)
    if source.is_dir():
        files = dump_files(source)
        if not files:
            raise ValueError(f"no dump file ({kinds}) in {source}: nothing to add")
    elif source.is_file() and source.name.endswith(DUMP_SUFFIXES):
        files = [source]
    else:
        raise ValueError(f"{source} is not a dump file ({kinds}) nor a folder of them: nothing to add")
    empty = [f.name for f in files if f.stat().st_size == 0]
    if empty:
        raise ValueError(f"empty dump file(s) in {source}: {', '.join(empty)}")
    return files


def same_files(new: list[Path], held: list[Path]) -> bool:
    """Whether ``held`` are the files ``new`` would install: same names and sizes, and each pair has
    the same modification time (``shutil.copy2`` keeps it) or, failing that, the same bytes."""
    import filecmp

    by_name = {p.name: p for p in held if p.is_file()}
    if sorted(by_name) != sorted(p.name for p in new) or len(held) != len(new):
        return False
    for f in new:
        a, b = f.stat(), by_name[f.name].stat()
        if a.st_size != b.st_size:
            return False
        if a.st_mtime_ns != b.st_mtime_ns and not filecmp.cmp(f, by_name[f.name], shallow=False):
            return False
    return True


def write_added_manifest(folder: Path, key: str) -> Path:
    """Write the folder's ``ADDED_MANIFEST`` (every file's name and size), atomically and last.

    The new-snapshot sensor takes a folder holding it, with those very files, as complete
    (``automation.discovery``): ``snapshots add`` writes it once every file is in place. Its bytes
    depend on the files only (no path, no time), like everything a release lists.
    """
    import json

    from ragsft_assets.corpus.snapshot_layout import ADDED_MANIFEST
    from ragsft_assets.storage import atomic_write_bytes

    files = {
        p.name: p.stat().st_size
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name != ADDED_MANIFEST
    }
    body = {"key": key, "files": files}
    return atomic_write_bytes(folder / ADDED_MANIFEST, (json.dumps(body, indent=2) + "\n").encode())


def install_snapshot(
    key: str, source: Path, home: Path | None = None, *, link: bool = False, replace: bool = False
) -> Path:
    """Copy (or symlink) the dump files, snapshot.json and topic files of ``source`` into the folder of ``key``.

    ``source`` may be a folder or one dump file. Nothing is deleted before the new copy is complete:
    the files go to a staging folder beside the key's folder, which is then swapped in
    (``storage.swap_folder``). ``source`` being the key's own folder (where deploy/README.md has
    users copy dumps) registers it in place. A key whose folder already holds other data is
    replaced only with ``replace`` (or by the bundled sample, the project's own data); the same
    files again (names, sizes, then times or bytes) are left as they are.

    Raises:
        ValueError: an invalid key; ``source`` holds no dump file (or an empty one); the key's
            folder holds other data and ``replace`` is false.
    """
    from ragsft_assets.corpus.snapshot_layout import ADDED_MANIFEST
    from ragsft_assets.defs.partitions import validate_snapshot_key
    from ragsft_assets.multihop.topics import TOPIC_FILES
    from ragsft_assets.storage import staging_folder, swap_folder

    validate_snapshot_key(key)
    source = source.expanduser().resolve()
    files = _dump_files_of(source)
    target = snapshots_dir(home) / key
    here = target.resolve()
    if (source if source.is_dir() else source.parent) == here:  # the key's own folder: register in place
        write_added_manifest(target, key)
        return target
    # snapshot.json and the topic categories (the card's keep rate by topic) travel with the dumps.
    extra = [
        source / n for n in (SNAPSHOT_CONFIG, *TOPIC_FILES) if source.is_dir() and (source / n).is_file()
    ]
    # The bundled sample is the project's own data, the same on every machine: a newer one replaces it.
    replace = replace or source == sample_folder().resolve()
    if target.is_dir():
        held = [p for p in target.iterdir() if not p.name.startswith(".") and p.name != ADDED_MANIFEST]
        if held and same_files([*files, *extra], held):
            write_added_manifest(target, key)  # the same files again: nothing to replace
            return target
        if held and not replace:
            raise ValueError(
                f"snapshot {key} already has data in {target} ({len(held)} file(s)): add --replace to "
                f"replace it by the files of {source}, or pick another key. Nothing was changed."
            )
    if link and here in source.parents:
        raise ValueError(f"--link from {source}, inside {target}, would link to files being replaced")
    staging = staging_folder(target)
    try:
        for f in [*files, *extra]:
            if link:
                (staging / f.name).symlink_to(f)
            else:
                shutil.copy2(f, staging / f.name)
        write_added_manifest(staging, key)  # last: the folder is complete
        swap_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
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
@click.option("--replace", is_flag=True, help="Replace the data KEY already has (kept otherwise).")
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
    replace: bool = False,
) -> None:
    """Install snapshot KEY and register it as a partition.

    --from the key's own folder ($RAGSFT_HOME/snapshots/KEY) registers it in place. Data KEY already
    has is replaced only with --replace, once the new copy is complete. With --hub the export
    resumes: rerun the same command after an interruption and the finished shards are kept.
    """
    if replace and hub:
        raise click.UsageError("--replace goes with --from or --sample")
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
            folder = install_snapshot(key, sample_folder(), replace=replace)
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
            folder = install_snapshot(key, source, link=link, replace=replace)
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
    # no instance folder: no partition to remove, and none is made (nor a home) to find that out
    instance = _instance() if dagster_home().exists() else None
    if instance is not None and instance.has_dynamic_partition(PARTITIONS, key):
        instance.delete_dynamic_partition(PARTITIONS, key)
        click.echo(f"partition {key} removed")
    folder = snapshots_dir() / key
    if folder.exists() and not keep_files:
        shutil.rmtree(folder) if not folder.is_symlink() else os.unlink(folder)
        click.echo(f"folder {folder} removed")
