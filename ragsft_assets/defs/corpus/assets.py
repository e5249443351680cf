"""Corpus assets: snapshot files, abstracts, link graph, bridge pairs. A table of declarations: each
asset declares what it reads once (``reads=``: its deps and its reader), resolves its settings
(``corpus.settings``), calls the logic, writes Parquet and ledger rows, and describes the output
(``corpus.summaries``)."""

import time
from pathlib import Path
from typing import Any

import dagster as dg

from ragsft_assets.corpus import settings, summaries
from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA
from ragsft_assets.corpus.bridge_pairs import BRIDGE_PAIRS_SCHEMA, BridgePairsConfig, draw_bridge_pairs
from ragsft_assets.corpus.build import build_abstracts, check_bad_share, default_workers
from ragsft_assets.corpus.hub_snapshot import describe_files, exports_from_hub, hub_dataset, snapshot_revision
from ragsft_assets.corpus.ledgers import abstracts_ledger, link_graph_ledger
from ragsft_assets.corpus.link_graph import LINK_GRAPH_SCHEMA, build_link_graph_files
from ragsft_assets.defs.bad_input import fail_at_once_on_bad_input
from ragsft_assets.defs.corpus.checks import check_results, check_specs
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.defs.wiring import declared_inputs, reads
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.ledger import ledger_table
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS

GROUP = "corpus"
PRODUCT = "corpus"
# Bump when a rule changes what the asset writes: the UI then shows downstream work as stale.
# v2: sentence splitting (etc., art/col/vol/cap before an opener) and the month-year / index-page filters.
# v3: the ledger names a dropped record whose title's id is also kept `<id>~<reason>` (corpus.ledgers).
ABSTRACTS_VERSION = "abstracts-v3"
SNAPSHOT_FILES_VERSION = "snapshot_files-v1"
# v2: the over-cited cap counts in-degree over the whole corpus, not within one split.
LINK_GRAPH_VERSION = "link_graph-v2"
# v2: bridge drawn first, then a source among its citers (HotpotQA Algorithm 1, bridge branch).
BRIDGE_PAIRS_VERSION = "bridge_pairs-v2"


class AbstractsAssetConfig(dg.Config):
    """Filters, seed and split shares of ``abstracts`` (unset values come from snapshot.json, then defaults)."""

    seed: int = DEFAULT_SEED
    split_shares: list[float] | None = None
    min_chars: int = 300
    min_sentences: int = 2
    max_bad_share: float = 0.01
    workers: int = 0  # 0 = every core this process may use


class LinkGraphAssetConfig(dg.Config):
    """In-degree cap and bridge rule (unset values come from snapshot.json, then defaults)."""

    in_degree_cap: int | None = None
    bridge_titles: list[str] = []
    bridge_titles_file: str = ""  # one title per line, e.g. the vital articles level 4
    bridge_top_k: int | None = None
    workers: int = 0  # processes for the enumeration rule on large graphs; 0 = every core


class BridgePairsAssetConfig(dg.Config):
    """Seed and number of pairs drawn (``max_pairs`` 0 = snapshot.json's value, else the recipe's
    ``pairs_drawn``: the card's 200,000, or every pair when fewer exist)."""

    seed: int = DEFAULT_SEED
    max_pairs: int = 0


# Each output's schema and the columns its preview shows
OUTPUTS = {
    "abstracts": (ABSTRACTS_SCHEMA, ["id", "title", "split", "text"]),
    "link_graph": (
        LINK_GRAPH_SCHEMA,
        ["source_title", "target_title", "alias", "sentence", "split", "is_bridge"],
    ),
    "bridge_pairs": (BRIDGE_PAIRS_SCHEMA, ["a_title", "b_title", "alias", "a_sentence", "split"]),
}


def output_metadata(asset: str, paths: list[Path]) -> dict[str, Any]:
    """A corpus output's table metadata: schema, row counts per split, preview."""
    schema, preview = OUTPUTS[asset]
    return table_metadata(paths, schema, preview_columns=preview, split_column="split")


def _common_metadata(seed: int | None, started: float, **config: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"wall_time_s": round(time.perf_counter() - started, 3)}
    if seed is not None:
        md["seed"] = seed
    md["config"] = dg.MetadataValue.json(config)
    return md


def _asset(version: str, inputs: tuple[str, ...], **kw: Any):  # noqa: ANN202
    """``dg.asset`` of the family: snapshot partitions, its group, its version, what it reads."""
    return dg.asset(
        partitions_def=snapshot_partitions, group_name=GROUP, code_version=version, deps=reads(*inputs), **kw
    )


@_asset(
    SNAPSHOT_FILES_VERSION,
    (),
    kinds={"huggingface"},
    # The hub export resumes by shard, so a retry after a dropped connection continues where it stopped.
    retry_policy=dg.RetryPolicy(max_retries=3, delay=30, backoff=dg.Backoff.EXPONENTIAL),
)
def snapshot_files(context: dg.AssetExecutionContext, snapshots: SnapshotSource) -> dg.MaterializeResult:
    """The dump files of the snapshot: exported from the hub (RAGSFT_SNAPSHOT_SOURCE=hub) or a local folder.

    Records each file's name, size and SHA-256 and, for a hub export, the pinned dataset revision.
    """
    started = time.perf_counter()
    key = context.partition_key
    folder = snapshots.folder(key)
    hub = exports_from_hub(key, folder)
    if hub:
        context.log.info(f"exporting {key} from {hub_dataset()} into {folder} (resumes by shard)")
        snapshots.fetch_from_hub(key, progress=context.log.info)
    with fail_at_once_on_bad_input():  # "no dump file" fails now, not after three retries
        files = snapshots.files(key)  # raises, saying how to add the snapshot, when there is none
    described = describe_files(files)
    origin = snapshot_revision(folder)
    md: dict[str, Any] = {
        "source": origin["source"],
        "files": dg.MetadataValue.md(summaries.files_table(described)),
        "file_count": len(described),
        "total_bytes": sum(d["bytes"] for d in described),
        "file_list": dg.MetadataValue.json(described),
        "origin": dg.MetadataValue.json(origin),
    }
    if hub:
        md["revision"] = origin["revision"] or "unpinned"
    md.update(_common_metadata(None, started))
    return dg.MaterializeResult(metadata=md)


# the dump files come through the snapshots resource, not the store
@_asset(
    ABSTRACTS_VERSION, ("snapshot_files",), kinds={"parquet", "duckdb"}, check_specs=check_specs("abstracts")
)
def abstracts(
    context: dg.AssetExecutionContext,
    config: AbstractsAssetConfig,
    store: ArtifactStore,
    snapshots: SnapshotSource,
) -> dg.MaterializeResult:
    """Article abstracts of the snapshot: sentences, resolved links, split; filtered with counted reasons."""
    started = time.perf_counter()
    key = context.partition_key
    files = snapshots.files(key)
    cfg = settings.abstracts_config(
        snapshot_language(key).split("-")[0],
        snapshots.config(key),
        seed=config.seed,
        split_shares=config.split_shares,
        min_chars=config.min_chars,
        min_sentences=config.min_sentences,
    )
    workers = config.workers or default_workers()
    context.log.info(f"reading {len(files)} dump file(s) of {key} with {workers} worker(s)")
    # Chunk files beside the partition's assets, not in the system temp folder (often a RAM tmpfs):
    # same disk as the output, and a killed build's chunks are found and removed by the next one.
    # Out of core (issue 36): the split files are written a row group at a time beside their final
    # names, and take them only once the bad-line check passed.
    final = {s: store.path(key, "abstracts", s) for s in SPLITS}
    staged = {s: p.with_name(f".{p.stem}.building.parquet") for s, p in final.items()}
    build = build_abstracts(files, cfg, workers=workers, tmp_dir=str(store.root / key), out_paths=staged)
    check_bad_share(build, config.max_bad_share, where=str(snapshots.folder(key)))
    for bad in build.bad_examples[:20]:
        context.log.warning(f"skipped {bad.file}:{bad.line}: {bad.reason} ({bad.detail})")

    paths = {s: staged[s].replace(final[s]) for s in SPLITS}
    ledger_path = store.write_ledger(
        abstracts_ledger(key, PRODUCT, build.table, build.rejected), key, "abstracts"
    )

    files_out = [paths[s] for s in ("train", "validation", "test")]
    md = output_metadata("abstracts", files_out)
    md.update(funnel_metadata(summaries.funnel_rows(build.funnel)))
    md.update(funnel_metadata(summaries.funnel_rows(build.link_funnel), key="link_funnel"))
    md["bad_lines"] = build.bad_lines
    md["bad_share"] = round(build.bad_share, 6)
    md["bad_line_examples"] = dg.MetadataValue.md(summaries.bad_lines_table(build.bad_examples))
    md["ledger"] = dg.MetadataValue.path(str(ledger_path))
    md["rejections_by_reason"] = dg.MetadataValue.md(summaries.reason_table([ledger_path]))
    md["source_files"] = dg.MetadataValue.json([str(f) for f in files])
    md.update(
        _common_metadata(
            config.seed,
            started,
            split_shares=list(cfg.split_shares),
            min_chars=config.min_chars,
            min_sentences=config.min_sentences,
            max_bad_share=config.max_bad_share,
            workers=workers,
        )
    )
    return dg.MaterializeResult(metadata=md, check_results=check_results("abstracts", store, snapshots, key))


@_asset(
    LINK_GRAPH_VERSION, ("abstracts",), kinds={"parquet", "duckdb"}, check_specs=check_specs("link_graph")
)
def link_graph(
    context: dg.AssetExecutionContext,
    config: LinkGraphAssetConfig,
    store: ArtifactStore,
    snapshots: SnapshotSource,
) -> dg.MaterializeResult:
    """Hyperlink edges a -> b between abstracts of the same split, with alias, sentence and bridge flag."""
    started = time.perf_counter()
    key = context.partition_key
    cfg = settings.link_graph_config(
        snapshots.config(key),
        in_degree_cap=config.in_degree_cap,
        titles=config.bridge_titles,
        titles_file=config.bridge_titles_file,
        bridge_top_k=config.bridge_top_k,
    )
    # Out of core (issue 36): the abstracts split files read a row group at a time, the edges spilled.
    path = store.path(key, "link_graph")
    build = build_link_graph_files(
        declared_inputs(context, store).files(key, "abstracts"),
        cfg,
        path,
        workers=config.workers or default_workers(),
        tmp_dir=str(store.root / key),
    )
    ledger_path = store.write_ledger(
        link_graph_ledger(key, PRODUCT, build.table, build.dropped), key, "link_graph"
    )

    md = output_metadata("link_graph", [path])
    md.update(funnel_metadata(summaries.funnel_rows(build.funnel)))
    md["bridges"] = len(build.bridge_ids)
    md["bridge_edges"] = summaries.bridge_edges(path)
    md["top_targets"] = dg.MetadataValue.md(summaries.top_targets_table(path, build.table.num_rows))
    md["ledger"] = dg.MetadataValue.path(str(ledger_path))
    md.update(
        _common_metadata(
            None,
            started,
            in_degree_cap=cfg.in_degree_cap,
            bridge_titles=len(cfg.bridge_titles),
            bridge_top_k=cfg.bridge_top_k,
        )
    )
    return dg.MaterializeResult(metadata=md, check_results=check_results("link_graph", store, snapshots, key))


@_asset(
    BRIDGE_PAIRS_VERSION,
    ("link_graph",),
    kinds={"parquet", "duckdb"},
    check_specs=check_specs("bridge_pairs"),
)
def bridge_pairs(
    context: dg.AssetExecutionContext,
    config: BridgePairsAssetConfig,
    store: ArtifactStore,
    snapshots: SnapshotSource,
) -> dg.MaterializeResult:
    """Seeded, reproducible (source a, bridge b) pairs drawn from the bridge edges of the link graph."""
    started = time.perf_counter()
    key = context.partition_key
    graph = declared_inputs(context, store).read(key, "link_graph")
    max_pairs = settings.pairs_drawn(config.max_pairs, snapshots.config(key))
    table, funnel, not_drawn = draw_bridge_pairs(
        graph, BridgePairsConfig(seed=config.seed, max_pairs=max_pairs)
    )
    path = store.write(table, key, "bridge_pairs")
    decisions = summaries.pairs_decisions(table, not_drawn)
    ledger_path = store.write_ledger(
        ledger_table(key, PRODUCT, "bridge_pairs", decisions), key, "bridge_pairs"
    )
    md = output_metadata("bridge_pairs", [path])
    md.update(funnel_metadata(summaries.funnel_rows(funnel)))
    md["distinct_bridges"] = len(set(table.column("b_id").to_pylist()))
    md["ledger"] = dg.MetadataValue.path(str(ledger_path))
    md.update(_common_metadata(config.seed, started, max_pairs=max_pairs))
    return dg.MaterializeResult(
        metadata=md, check_results=check_results("bridge_pairs", store, snapshots, key)
    )
