"""Release assets: the Hugging Face folder, its dataset card, its manifests (group ``release``)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from ragsft_assets.defs.metadata import funnel_metadata
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.release import build, layout
from ragsft_assets.release.catalog import build_catalog
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore

GROUP = "release"


class ReleaseNamesConfig(dg.Config):
    """The config names the release ships; the defaults are the HotpotQA-fr card's (issues 12, 13)."""

    filtered: str = "filtered"
    filtered_qwen: str = "filtered_qwen"
    filtered_qwen_v2: str = "filtered_qwen_v2"
    corpus_filtered_qwen_v2: str = "corpus_filtered_qwen_v2"
    # The RAG SFT config; "" = the product's: hotpotqa_fr_abstracts_v2 for a French snapshot (one
    # split, train, as its card), hotpotqa_cite otherwise.
    rag_sft: str = ""


def release_names(config: ReleaseNamesConfig, partition: str) -> dict[str, str]:
    """``{card's name: shipped name}`` for ``layout.release_configs``, the product's name for rag_sft."""
    from ragsft_assets.defs.rag_sft.assets import product_name

    names = {
        "filtered": config.filtered,
        "filtered_qwen": config.filtered_qwen,
        "filtered_qwen_v2": config.filtered_qwen_v2,
        "corpus_filtered_qwen_v2": config.corpus_filtered_qwen_v2,
        "hotpotqa_cite": config.rag_sft or product_name(snapshot_language(partition)),
    }
    return {old: new for old, new in names.items() if new != old}


PRODUCT_ASSETS = [c.asset for c in layout.RELEASE_CONFIGS]
# Upstream assets whose run config and model metadata go into the manifests.
UPSTREAM = [
    "abstracts", "link_graph", "bridge_pairs", "question_drafts", "question_checks", "distractors",
    "ablation_verdicts", "multihop_questions", "multihop_audit", "rag_prompts", "rag_responses",
    "rag_verdicts", "rag_sft",
]  # fmt: skip


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def release_folder(store: ArtifactStore, partition: str) -> Path:
    return store.home_path / "releases" / partition


def _repository(context: Any) -> Any:
    """The code location's repository, or None (``dg.materialize`` of an asset list sets none)."""
    try:
        return context.repository_def
    except Exception:  # noqa: BLE001 - Dagster raises a CheckError when no repository is set
        return None


def _effective_config(
    context: dg.AssetExecutionContext,
    asset: str | dg.AssetKey,
    passed: Any,
    known: Mapping[dg.AssetKey, dg.AssetsDefinition] | None = None,
) -> dict[str, Any] | None:
    """The op config an asset ran with: what the run passed, completed with the config class's defaults.

    The asset's definition comes from the code location, else from ``known`` (the caller's own
    definitions: ``execute_in_process`` and ``dg.materialize`` set no repository).
    """
    from dagster._config import process_config  # Dagster's own config resolution (defaults included)

    key = asset if isinstance(asset, dg.AssetKey) else dg.AssetKey(asset)
    repo = _repository(context)
    node = None
    if repo is not None and key in repo.assets_defs_by_key:
        node = repo.assets_defs_by_key[key].node_def
    elif known and key in known:
        node = known[key].node_def
    if node is None:  # not in this code location (a test's asset list): as passed
        return dict(passed) if isinstance(passed, dict) else None
    if node.config_schema is None or not node.has_config_field:
        return None
    done = process_config(node.config_schema.config_type, passed if passed is not None else {})
    return dict(done.value) if done.success else {"unresolved": passed}


def resource_settings(context: dg.AssetExecutionContext) -> dict[str, Any]:
    """Every resource's settings as the code location binds them, with this run's overrides.

    Plain config values only (never a resource's runtime state); secrets are dropped later by
    ``release.provenance.redact_settings``.
    """
    repo = _repository(context)
    if repo is None:
        return {}
    resources = repo.get_top_level_resources()
    overrides = (context.run.run_config or {}).get("resources", {})
    out: dict[str, Any] = {}
    for name, res in sorted(resources.items()):
        field = getattr(res, "config_field", None)
        settings = dict(field.default_value) if field is not None and field.default_provided else {}
        settings |= (overrides.get(name) or {}).get("config") or {}
        out[name] = settings
    return out


def _written_sha256(context: dg.AssetExecutionContext) -> dict[str, str]:
    """The data files' SHA-256 as the latest ``release`` materialization hashed them when writing."""
    res = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("release"), asset_partitions=[context.partition_key]),
        limit=1,
    )
    if not res.records or res.records[0].asset_materialization is None:
        return {}
    value = res.records[0].asset_materialization.metadata.get("written_sha256")
    return dict(_value(value) or {}) if value is not None else {}


def upstream_provenance(
    context: dg.AssetExecutionContext,
    upstream: Sequence[str | dg.AssetKey] = UPSTREAM,
    known: Mapping[dg.AssetKey, dg.AssetsDefinition] | None = None,
) -> tuple[dict, dict, dict]:
    """Effective run configs, metadata and audit numbers of the latest upstream materializations.

    Returns ``(run_config, metadata, limitations)``, each keyed by upstream asset name (the last
    part of a prefixed key: ``qa/rag_responses`` -> ``rag_responses``, the name its ledger stage
    and store folder carry): ``run_config`` is each op's effective config (defaults included),
    ``metadata`` the plain values of its materialization's metadata
    (``release.provenance.llm_roles`` reads the models from it). Assets never materialized for
    the partition are absent.

    Args:
        context: the release asset's context (its partition, instance and code location).
        upstream: the upstream assets, names or keys (default: the snapshot chain's).
        known: definitions of those assets to resolve their config with when the run has no
            code location (see ``_effective_config``).
    """
    run_config: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    instance = context.instance
    for entry in upstream:
        key = entry if isinstance(entry, dg.AssetKey) else dg.AssetKey(entry)
        asset, op_name = key.path[-1], "__".join(key.path)  # Dagster names a prefixed asset's op a__b
        try:
            res = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[context.partition_key]),
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
        effective = _effective_config(context, key, (ops.get(op_name) or {}).get("config"), known)
        if effective is not None:
            run_config[asset] = effective
        md = mat.metadata if mat else {}
        metadata[asset] = {
            k: _value(v)
            for k, v in sorted(md.items())
            if k.endswith(("/model", "/calls", "/cache_hits")) and not k.startswith("dagster/")
        }
        for k, v in md.items():
            lk = k.lower()
            if "auc" in lk or "longest" in lk:
                val = _value(v)
                if isinstance(val, int | float | str):
                    limits[k.split("/")[-1]] = val
    return run_config, metadata, limits


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="release-2",
    deps=PRODUCT_ASSETS,
    kinds={"parquet", "huggingface"},
)
def release(
    context: dg.AssetExecutionContext, config: ReleaseNamesConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """The release folder: one Hugging Face config per product, decisions and lineage."""
    partition = context.partition_key
    target = release_folder(store, partition)
    names = release_names(config, partition)
    built = build.build_release(store.root, partition, target, configs=layout.release_configs(names))
    for note in built.notes:
        context.log.info(note)
    rows = [(c, s, n) for c, splits in built.rows.items() for s, n in splits.items()]
    from ragsft_assets.table_stats import markdown_table

    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(n for *_, n in rows),
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(sorted(built.rows)),
            "renamed": dg.MetadataValue.json(names),
            "rows_per_split": dg.MetadataValue.md(markdown_table(["config", "split", "rows"], rows)),
            "notes": dg.MetadataValue.md("\n".join(f"- {n}" for n in built.notes) or "(none)"),
            "decisions": built.decisions,
            "lineage_rows": dg.MetadataValue.json(built.lineage_rows),
            "written_sha256": dg.MetadataValue.json(built.written_sha256),
        }
    )


def rag_sft_sections(store: ArtifactStore, partition: str, folder: Path) -> list[str]:
    """The RAG SFT statistics of the QA card (``card.card_statistics``, ``statistics.card_section``) for
    the release's rag_sft config, under the name it ships; none when the release has no such config."""
    from ragsft_assets.defs.rag_sft.assets import INPUT_ASSET
    from ragsft_assets.defs.rag_sft.card import card_statistics
    from ragsft_assets.rag_sft.statistics import card_section

    shipped = layout.read_configs(folder)
    names = [c for c in layout.release_files(folder) if c in shipped and shipped[c].asset == "rag_sft"]
    if not names:
        return []
    missing = [a for a in ("rag_sft", "rag_prompts", INPUT_ASSET) if not store.files(partition, a)]
    if missing:  # a release built from copied files (no chain artifacts): say so, never fail the card
        return [
            f"### `{names[0]}`: citations and answers",
            "",
            f"Not computed: {', '.join(missing)} missing.",
            "",
        ]
    return card_section(card_statistics(store, partition, INPUT_ASSET), names[0])


@dg.asset(
    partitions_def=snapshot_partitions,
    group_name=GROUP,
    code_version="dataset-card-2",
    deps=[release, "multihop_audit"],  # the card reads the audit numbers: declared, not assumed
    kinds={"markdown"},
)
def dataset_card(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """The generated dataset card (README body) and its histograms."""
    partition = context.partition_key
    folder = release_folder(store, partition)
    _, _, limits = upstream_provenance(context)
    body, plots = build.write_card(
        folder, partition, limits, sections=rag_sft_sections(store, partition, folder)
    )
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
    deps=[release, dataset_card, "multihop_audit"],
    kinds={"json"},
    check_specs=[dg.AssetCheckSpec("release_verifies", asset="release_manifest", blocking=True)],
)
def release_manifest(context: dg.AssetExecutionContext, store: ArtifactStore):  # noqa: ANN201
    """SHA-256 manifests per config (+ release index), checked by recomputing every hash."""
    partition = context.partition_key
    folder = release_folder(store, partition)
    run_config, upstream_md, _ = upstream_provenance(context)
    manifests = build.write_manifests(
        folder,
        partition,
        store.root,
        store.home_path / "snapshots",
        run_config=run_config,
        upstream_metadata=upstream_md,
        resources=resource_settings(context),
    )
    report = verify_release(folder)
    written = _written_sha256(context)
    shipped = {rel: f["sha256"] for m in manifests.values() for rel, f in m["files"].items()}
    changed = sorted(rel for rel, sha in written.items() if shipped.get(rel) != sha)
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
    lines = report.lines() + [f"changed since `release` wrote it: {rel}" for rel in changed]
    if not written:
        lines.append("no write-time hashes recorded by `release` (rematerialize it to compare)")
    yield dg.AssetCheckResult(
        check_name="release_verifies",
        passed=report.ok and not changed and bool(written),
        metadata={
            "report": dg.MetadataValue.md("\n".join(f"- {x}" for x in lines)),
            "changed_since_write": dg.MetadataValue.json(changed),
        },
    )
