"""``release_diff``: what the release changes against the previous one (issue 39), for review."""

from pathlib import Path

import dagster as dg
import duckdb

from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.release import diff
from ragsft_assets.resources.store import ArtifactStore

GROUP = "release"
EXAMPLES = 3  # ours: example rows per kind and config in the metadata


def reviewing(context: dg.AssetExecutionContext) -> bool:
    """Whether this run's release waits for review (the sensor's ``ragsft/publish`` tag)."""
    return context.run.tags.get(diff.PUBLISH_TAG) == "review"


def publish_folder(context: dg.AssetExecutionContext, store: ArtifactStore, partition: str) -> Path:
    """Where this run writes the release: ``releases/<key>``, or ``releases/.pending/<key>`` when it
    waits for review (``ragsft release promote KEY`` swaps it in)."""
    target = store.home_path / "releases" / partition
    return diff.pending_dir(target) if reviewing(context) else target


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="release-diff-1",
    deps=["release"],
    kinds={"json"},
)
def release_diff(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """Rows added, removed and changed (and why) since the previous release of the key or language."""
    partition = context.partition_key
    folder = publish_folder(context, store, partition)
    found = diff.baseline(store.home_path / "releases", partition, reviewing=reviewing(context))
    if found is None:
        diff.clear_changes(folder)
        return dg.MaterializeResult(
            metadata={"baseline": "none: no earlier release of this key or language", "path": str(folder)}
        )
    old, label = found
    try:
        result = diff.diff_releases(diff.Release.open(old, label), diff.Release.open(folder, partition))
    except (OSError, ValueError, KeyError, duckdb.Error) as e:
        # A baseline this code cannot read (an old layout, a damaged folder) must not keep the new
        # release from its card and manifests: said loudly here, and the card shows no changes.
        diff.clear_changes(folder)
        message = f"diff against {old} failed: {e}; compare by hand with `ragsft diff {old} {folder}`"
        context.log.error(message)
        return dg.MaterializeResult(metadata={"baseline": label, "error": message, "path": str(folder)})
    diff.write_changes(folder, result)
    table, examples = diff.metadata_tables(result, EXAMPLES)
    totals = {k: sum(c[k] for c in result["configs"].values()) for k in diff.COUNTS}
    return dg.MaterializeResult(
        metadata={
            "baseline": label,
            "path": dg.MetadataValue.path(str(diff.changes_path(folder))),
            "counts": dg.MetadataValue.md(table),
            "examples": dg.MetadataValue.md(examples),
            **{f"rows_{k}": v for k, v in totals.items()},
            "review": f"ragsft release promote {partition}" if reviewing(context) else "published",
        }
    )
