"""Release assets: the Hugging Face folder, its dataset card, its manifests (group ``release``)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from ragsft_assets import published_configs
from ragsft_assets.defs.check_results import check_result, verify_failures
from ragsft_assets.defs.metadata import funnel_metadata
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.defs.release.diff import publish_folder
from ragsft_assets.multihop.card_section import release_sections
from ragsft_assets.release import build, layout
from ragsft_assets.release.catalog import build_catalog
from ragsft_assets.release.diff import keep_previous
from ragsft_assets.release.notes_log import notes_line
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore

GROUP = "release"


RENAMABLE = tuple(c.name for c in published_configs.configs() if c.renamable)
# The config names the release ships, one field per renamable published config (default: its
# name, the HotpotQA-fr card's; issues 12, 13), and the RAG SFT config's: "" = the product's name for
# the snapshot's language (``rag_sft.recipes.default_recipe``; one split, train, for a French one).
ReleaseNamesConfig = type(
    "ReleaseNamesConfig",
    (dg.Config,),
    {
        "__module__": __name__,
        "__doc__": "The config names the release ships; the defaults are the HotpotQA-fr card's (issues 12, 13).",
        "__annotations__": dict.fromkeys((*RENAMABLE, "rag_sft"), str),
        **{name: name for name in RENAMABLE},
        "rag_sft": "",
    },
)


def release_names(config: ReleaseNamesConfig, partition: str) -> dict[str, str]:
    """``{card's name: shipped name}`` for ``layout.release_configs``, the product's name for rag_sft."""
    from ragsft_assets.defs.rag_sft.assets import product_name

    names = {name: getattr(config, name) for name in RENAMABLE}
    for c in published_configs.of_family("rag_sft"):
        names[c.name] = config.rag_sft or product_name(snapshot_language(partition))
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


def resolve_config(schema: Any, type_key: str, value: Any) -> Any:
    """``value`` completed with the defaults of config type ``type_key`` of a job's config schema snapshot.

    Walks Dagster's ``ConfigSchemaSnapshot`` (stored with every run, in-process runs included):
    a field the value lacks takes its declared default, recursively; keys the schema does not
    declare (a permissive shape) are kept as given.
    """
    import json

    from dagster._config import ConfigTypeKind

    if not schema.has_config_snap(type_key):
        return value
    snap = schema.get_config_snap(type_key)
    kind = snap.kind
    if ConfigTypeKind.has_fields(kind) and not ConfigTypeKind.is_selector(kind):
        if value is not None and not isinstance(value, dict):
            return value
        given = dict(value or {})
        out: dict[str, Any] = {}
        for f in snap.fields or []:
            if f.name in given:
                out[f.name] = resolve_config(schema, f.type_key, given.pop(f.name))
            elif f.default_provided and f.default_value_as_json_str is not None:
                out[f.name] = resolve_config(schema, f.type_key, json.loads(f.default_value_as_json_str))
        return out | given
    if ConfigTypeKind.is_selector(kind) and isinstance(value, dict):
        types = {f.name: f.type_key for f in snap.fields or []}
        return {k: resolve_config(schema, types[k], v) if k in types else v for k, v in value.items()}
    inner = (snap.type_param_keys or [None])[-1]
    if inner is None or value is None:
        return value
    if kind == ConfigTypeKind.NONEABLE:
        return resolve_config(schema, inner, value)
    if kind == ConfigTypeKind.ARRAY and isinstance(value, list):
        return [resolve_config(schema, inner, v) for v in value]
    if kind == ConfigTypeKind.MAP and isinstance(value, dict):
        return {k: resolve_config(schema, inner, v) for k, v in value.items()}
    return value


def _field_type(schema: Any, type_key: str | None, name: str) -> str | None:
    """The type key of field ``name`` of config type ``type_key`` (None when there is no such field)."""
    if type_key is None or not schema.has_config_snap(type_key):
        return None
    return next((f.type_key for f in schema.get_config_snap(type_key).fields or [] if f.name == name), None)


def _secret_fields(schema: Any, root: str, resource: str) -> frozenset[str]:
    """Names of the fields resource ``resource`` declares secret (Dagster's ``is_secret``)."""
    key = _field_type(schema, _field_type(schema, _field_type(schema, root, "resources"), resource), "config")
    if key is None:
        return frozenset()
    return frozenset(f.name for f in schema.get_config_snap(key).fields or [] if f.is_secret)


def _job_schema(instance: dg.DagsterInstance, run: Any) -> tuple[Any, str] | None:
    """``(config schema snapshot, root config type key)`` of the job a run ran, from the run record."""
    snapshot_id = getattr(run, "job_snapshot_id", None)
    if not snapshot_id:
        return None
    try:
        snap = instance.get_job_snapshot(snapshot_id)
    except Exception:  # noqa: BLE001 - a run store without its snapshot: the run config as passed
        return None
    modes = snap.mode_def_snaps
    return (snap.config_schema_snapshot, modes[0].root_config_key) if modes else None


def resolved_run_config(instance: dg.DagsterInstance, run: Any) -> dict[str, Any]:
    """A run's config as it ran: the run record's config resolved against its job's config schema.

    Every run has both (``execute_in_process``, the daemon, ``dg.materialize``), so the defaults
    are filled in the same way with or without a code location.
    """
    passed = dict(getattr(run, "run_config", None) or {})
    found = _job_schema(instance, run)
    if found is None:
        return passed
    schema, root = found
    out = resolve_config(schema, root, passed)
    return out if isinstance(out, dict) else passed


def resource_settings(context: dg.AssetExecutionContext) -> dict[str, Any]:
    """Every resource's settings in this run, by the names of its declared config fields.

    Resolved from the run record against the job's config schema (the values a resource was
    built with are its fields' defaults there, the run's overrides on top), so what is recorded
    is declared configuration, never a resource's runtime state. Fields declared secret are
    masked here; credentials in names, URLs and headers are masked by
    ``release.provenance.redact_settings`` when the manifest is built.
    """
    from ragsft_assets.release.provenance import REDACTED

    run = context.run
    resolved = resolved_run_config(context.instance, run).get("resources") or {}
    found = _job_schema(context.instance, run)
    out: dict[str, Any] = {}
    for name, entry in sorted(resolved.items()):
        config = (entry or {}).get("config") if isinstance(entry, dict) else None
        if not isinstance(config, dict):
            continue  # a resource without declared fields (a plain object): nothing to record
        secret = _secret_fields(*found, name) if found is not None else frozenset()
        out[name] = {k: (REDACTED if k in secret and v not in (None, "") else v) for k, v in config.items()}
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
        known: accepted for callers that passed their definitions; not needed any more: each
            run's record holds its config and its job's config schema (``resolved_run_config``).
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
        ops = resolved_run_config(instance, run).get("ops", {}) if run else {}
        op = ops.get(op_name)
        if isinstance(op, dict) and isinstance(op.get("config"), dict):
            run_config[asset] = op["config"]
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


def write_run_manifests(
    context: dg.AssetExecutionContext,
    store: ArtifactStore,
    folder: Path,
    inputs_dir: str,
    upstream: Sequence[str | dg.AssetKey] = UPSTREAM,
    statistics: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """``build.write_manifests`` of a release this run built: its ``upstream`` assets' effective
    configs and metadata and this run's resource settings go with it; ``inputs_dir`` is the home's
    folder the partition's inputs came from (``snapshots`` or ``sources``)."""
    run_config, upstream_md, _ = upstream_provenance(context, upstream)
    return build.write_manifests(
        folder,
        context.partition_key,
        store.root,
        store.home_path / inputs_dir,
        run_config=run_config,
        upstream_metadata=upstream_md,
        resources=resource_settings(context),
        statistics=statistics,
    )


def run_statistics(
    context: dg.AssetExecutionContext, upstream: Sequence[str | dg.AssetKey] = UPSTREAM
) -> dict[str, Any]:
    """How this release's inputs were made: per upstream asset its run, job, host and time; this run's too.

    For ``provenance/run_stats.json``: a resumed run has other runs, hosts and times for the same
    data, so none of this is in the content manifest.
    """
    import socket
    import time

    from ragsft_assets.defs.runs import TAG_HOST

    runs: dict[str, Any] = {}
    for entry in upstream:
        key = entry if isinstance(entry, dg.AssetKey) else dg.AssetKey(entry)
        try:
            res = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[context.partition_key]), limit=1
            )
        except Exception:  # noqa: BLE001 - an instance without event records: nothing to record
            continue
        if not res.records:
            continue
        rec = res.records[0]
        run = context.instance.get_run_by_id(rec.run_id)
        runs[key.path[-1]] = {
            "run_id": rec.run_id,
            "job": run.job_name if run else None,
            "host": run.tags.get(TAG_HOST) if run else None,
            "materialized_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec.timestamp)),
        }
    return {
        "release_run": {
            "run_id": context.run.run_id,
            "host": socket.gethostname(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "upstream_runs": runs,
    }


def record_digest(
    context: dg.AssetExecutionContext, folder: Path, home: Path, partition: str
) -> tuple[str, str]:
    """Log and record a built release's root digest (the catalog's digest log); returns ``(digest, note)``."""
    from ragsft_assets.release.catalog import record_release_digest
    from ragsft_assets.release.manifest import root_digest

    digest = root_digest(folder)
    context.log.info(
        f"release {folder}: root digest {digest} (check with: ragsft verify {folder} --digest {digest})"
    )
    try:
        record_release_digest(folder, partition, digest, context.run.run_id, home)
        return digest, "recorded"
    except OSError as e:  # a read-only home: the digest is still in the run's metadata
        return digest, f"not recorded: {e}"


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
    target = publish_folder(context, store, partition)  # releases/.pending/<key> when it waits for review
    if target == release_folder(store, partition):
        keep_previous(target)  # release_diff compares a rebuilt key with the build it replaces
    names = release_names(config, partition)
    built = build.build_release(store.root, partition, target, configs=layout.release_configs(names))
    if line := notes_line(built.notes):  # one line, not one per empty split (`notes` lists them all)
        context.log.info(line)
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
    # the card reads the audit numbers and the changes since the previous release, and the RAG SFT
    # statistics from rag_sft, rag_prompts and the questions: declared, not assumed
    deps=[release, "release_diff", "multihop_audit", "rag_sft", "rag_prompts", "multihop_questions"],
    kinds={"markdown"},
)
def dataset_card(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
    """The generated dataset card (README body) and its histograms."""
    partition = context.partition_key
    folder = publish_folder(context, store, partition)
    _, _, limits = upstream_provenance(context)
    body, plots = build.write_card(
        folder,
        partition,
        limits,
        sections=[
            *release_sections(store.root, partition, folder),
            *rag_sft_sections(store, partition, folder),
        ],
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
    code_version="release-manifest-2",
    deps=[release, dataset_card, "multihop_audit"],
    kinds={"json"},
    check_specs=[dg.AssetCheckSpec("release_verifies", asset="release_manifest", blocking=True)],
)
def release_manifest(context: dg.AssetExecutionContext, store: ArtifactStore):  # noqa: ANN201
    """SHA-256 manifests per config (+ release index), checked by recomputing every hash."""
    partition = context.partition_key
    folder = publish_folder(context, store, partition)
    manifests = write_run_manifests(context, store, folder, "snapshots", statistics=run_statistics(context))
    digest, digest_note = record_digest(context, folder, store.home_path, partition)
    report = verify_release(folder, expected_digest=digest)
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
            "root_digest": digest,
            "root_digest_log": digest_note,
            "catalog": catalog_note,
            **funnel_metadata({c: m["rows_total"] for c, m in manifests.items()}, key="rows_per_config"),
        }
    )
    lines = report.lines() + [f"changed since `release` wrote it: {rel}" for rel in changed]
    if not written:
        lines.append("no write-time hashes recorded by `release` (rematerialize it to compare)")
    yield check_result(
        check_name="release_verifies",
        passed=report.ok and not changed and bool(written),
        failures=verify_failures(report) + len(changed) + (not written),
        metadata={
            "report": dg.MetadataValue.md("\n".join(f"- {x}" for x in lines)),
            "changed_since_write": dg.MetadataValue.json(changed),
        },
    )
