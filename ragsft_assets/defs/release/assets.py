"""Release assets: the Hugging Face folder, its dataset card, its manifests (group ``release``)."""

from pathlib import Path
from typing import Any

import dagster as dg

from ragsft_assets.defs.metadata import funnel_metadata
from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.release import build, layout
from ragsft_assets.release.catalog import build_catalog
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore

GROUP = "release"
PRODUCT_ASSETS = [c.asset for c in layout.RELEASE_CONFIGS]
# Upstream assets whose run config and model metadata go into the manifests.
UPSTREAM = [
    "abstracts", "link_graph", "bridge_pairs", "question_drafts", "question_checks", "distractors",
    "ablation_verdicts", "multihop_questions", "multihop_audit", "rag_prompts", "rag_responses",
    "rag_verdicts", "rag_sft",
]  # fmt: skip
# Metadata keys worth recording (models, sampling, seeds, templates); volatile ones (times) are not.
_KEEP = ("model", "sampling", "seed", "template", "prompt", "params", "role", "share", "threshold")
_DROP = ("wall", "per_s", "path", "preview", "sha256", "tokens", "calls", "hits", "requests")


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def release_folder(store: ArtifactStore, partition: str) -> Path:
    return store.home_path / "releases" / partition


def upstream_provenance(context: dg.AssetExecutionContext) -> tuple[dict, dict, dict]:
    """Run configs, model metadata and audit numbers of the latest upstream materializations.

    Returns ``(run_config, llm_roles, limitations)``, each keyed by upstream asset name. Assets
    never materialized for the partition are absent.
    """
    run_config: dict[str, Any] = {}
    llm: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    instance = context.instance
    for asset in UPSTREAM:
        try:
            res = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[context.partition_key]),
                limit=1,
            )
        except Exception:  # an instance without event records: nothing to record
            continue
        if not res.records:
            continue
        rec = res.records[0]
        mat = rec.asset_materialization
        run = instance.get_run_by_id(rec.run_id)
        ops = (run.run_config or {}).get("ops", {}) if run else {}
        if asset in ops:
            run_config[asset] = ops[asset]
        md = mat.metadata if mat else {}
        kept = {
            k: _value(v)
            for k, v in sorted(md.items())
            if any(s in k.lower() for s in _KEEP) and not any(s in k.lower() for s in _DROP)
        }
        if kept:
            llm[asset] = kept
        for k, v in md.items():
            lk = k.lower()
            if "auc" in lk or "longest" in lk:
                val = _value(v)
                if isinstance(val, int | float | str):
                    limits[k.split("/")[-1]] = val
    return run_config, llm, limits


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="release-1",
    deps=PRODUCT_ASSETS,
    kinds={"parquet", "huggingface"},
)
def release(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """The release folder: one Hugging Face config per product, decisions and lineage."""
    partition = context.partition_key
    target = release_folder(store, partition)
    built = build.build_release(store.root, partition, target)
    for note in built.notes:
        context.log.info(note)
    rows = [(c, s, n) for c, splits in built.rows.items() for s, n in splits.items()]
    from ragsft_assets.table_stats import markdown_table

    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(n for *_, n in rows),
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(sorted(built.rows)),
            "rows_per_split": dg.MetadataValue.md(markdown_table(["config", "split", "rows"], rows)),
            "notes": dg.MetadataValue.md("\n".join(f"- {n}" for n in built.notes) or "(none)"),
            "decisions": built.decisions,
            "lineage_rows": dg.MetadataValue.json(built.lineage_rows),
        }
    )


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="dataset-card-1",
    deps=[release],
    kinds={"markdown"},
)
def dataset_card(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """The generated dataset card (README body) and its histograms."""
    partition = context.partition_key
    folder = release_folder(store, partition)
    _, _, limits = upstream_provenance(context)
    body, plots = build.write_card(folder, partition, limits)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(folder / layout.README)),
            "plots": dg.MetadataValue.json(plots),
            "limitations": dg.MetadataValue.json(limits),
            "card": dg.MetadataValue.md(body),
        }
    )


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="release-manifest-1",
    deps=[release, dataset_card],
    kinds={"json"},
    check_specs=[dg.AssetCheckSpec("release_verifies", asset="release_manifest", blocking=True)],
)
def release_manifest(context: dg.AssetExecutionContext, store: ArtifactStore):  # noqa: ANN201
    """SHA-256 manifests per config (+ release index), checked by recomputing every hash."""
    partition = context.partition_key
    folder = release_folder(store, partition)
    run_config, llm, _ = upstream_provenance(context)
    manifests = build.write_manifests(
        folder, partition, store.root, store.home_path / "snapshots", run_config=run_config, llm_roles=llm
    )
    report = verify_release(folder)
    try:  # the catalog gains the release's lineage views; a failure here must not fail the release
        build_catalog(store.home_path)
        catalog_note = "rebuilt"
    except Exception as e:  # noqa: BLE001
        catalog_note = f"not rebuilt: {e}"
    yield dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(folder / layout.PROVENANCE)),
            "configs": dg.MetadataValue.json(sorted(manifests)),
            "files_sha256": dg.MetadataValue.json(
                {rel: f["sha256"] for m in manifests.values() for rel, f in m["files"].items()}
            ),
            "git_commit": next(iter(manifests.values()))["project"]["git_commit"] if manifests else "",
            "catalog": catalog_note,
            **funnel_metadata({c: m["rows_total"] for c, m in manifests.items()}, key="rows_per_config"),
        }
    )
    yield dg.AssetCheckResult(
        check_name="release_verifies",
        passed=report.ok,
        metadata={"report": dg.MetadataValue.md("\n".join(f"- {x}" for x in report.lines()))},
    )
