"""The three release steps as plain functions (the assets call them in this order).

1. ``build_release``: data files, decisions, lineage and a README header, built in a temp folder
   beside ``releases/<partition>`` and swapped into place.
2. ``write_card``: the generated card body and plots, written into the README.
3. ``write_manifests``: ``provenance/<config>/manifest.json`` and ``provenance/release.json``
   (last, so the index hashes the final README and plots).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.release import layout, provenance, stream
from ragsft_assets.release.card import render_card
from ragsft_assets.release.decisions import ledger_files, write_final_decisions
from ragsft_assets.release.lineage import IDS_FILE, LineageSources, write_lineage, write_product_ids
from ragsft_assets.release.manifest import (
    DECISIONS,
    LINEAGE,
    build_manifest,
    ledger_calls_by_stage,
    sha256_file,
    source_info,
    write_manifest,
    write_release_index,
    write_run_stats,
)
from ragsft_assets.sql import sql_literal
from ragsft_assets.storage import write_parquet

NOTES_FILE = "notes.json"  # provenance/notes.json: what the build skipped, read back by the card


@dataclass(slots=True)
class ReleaseBuild:
    folder: Path
    files: dict[str, dict[str, str]]
    notes: list[str]
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    decisions: int = 0
    lineage_rows: dict[str, int] = field(default_factory=dict)
    # SHA-256 of each data file hashed right after it was written: release_verifies compares the
    # manifests against these, so a file changed between the write and the check is caught.
    written_sha256: dict[str, str] = field(default_factory=dict)


VERDICTS_SOURCE = "provenance/verdicts.parquet"  # under a filtered config's asset folder


def verdicts_path(config: str) -> str:
    return f"{layout.PROVENANCE}/{config}/verdicts.parquet"


def lineage_path(config: str) -> str:
    return f"{layout.PROVENANCE}/{config}/{LINEAGE}"


def links_path(config: str) -> str:
    """``provenance/<config>/links.parquet``: a corpus config's hyperlinks, beside its five columns."""
    return f"{layout.PROVENANCE}/{config}/links.parquet"


def ids_path(config: str) -> str:
    """``provenance/<config>/ids.parquet``: the ids of a config whose rows ship without one."""
    return f"{layout.PROVENANCE}/{config}/{IDS_FILE}"


def write_links(con: Any, splits: Mapping[str, stream.SplitSource], path: Path) -> int:
    """Write a corpus config's ``(id, split, links)`` rows, split by split in file order (the
    upstream's id order): the card's five columns ship as data, the links stay in provenance.
    Returns the rows written (0, and no file, when the upstream has no ``links`` column)."""
    sources = [src for src in splits.values() if src.files]
    if not sources or "links" not in pq.read_schema(sources[0].files[0]).names:
        return 0
    links_type = pq.read_schema(sources[0].files[0]).field("links").type
    schema = pa.schema([("id", pa.string()), ("split", pa.string()), ("links", links_type)])

    def batches() -> Any:
        for name, src in splits.items():
            if not src.files:
                continue
            rows = src.select_sql(["id"], ["links", "_fidx", "_rn"])
            sql = f"SELECT id, {sql_literal(name)} AS split, links FROM ({rows}) ORDER BY _fidx, _rn"
            yield from con.sql(sql).to_arrow_reader(stream.PROVENANCE_GROUP_ROWS)

    return stream.write_batches(batches(), path, schema, stream.PROVENANCE_GROUP_ROWS)


def build_release(
    assets_root: Path,
    partition: str,
    target: Path,
    pretty_name: str = "",
    configs: Sequence[layout.ReleaseConfig] | None = None,
) -> ReleaseBuild:
    """Build the release folder of a partition from its materialized assets, atomically.

    Configs whose upstream asset is missing are skipped with a note. Raises ``FileNotFoundError``
    when no config at all can be built (nothing would load). Memory stays bounded whatever the
    partition's size: data files, decisions and lineage are DuckDB queries over the upstream
    Parquet files, streamed to their files (``stream.py``), never whole tables or Python rows.
    ``configs`` (default ``layout.RELEASE_CONFIGS``) name the configs (``layout.release_configs``);
    the names shipped go to ``provenance/configs.json``.
    """
    configs = tuple(configs or layout.RELEASE_CONFIGS)
    by_name = {c.name: c for c in configs}
    plan = stream.plan_configs(assets_root, partition, configs)
    notes = plan.notes
    if not plan.configs:
        raise FileNotFoundError(
            f"nothing to release for partition {partition!r} under {assets_root}: "
            + "; ".join(notes)
            + ". Materialize at least `abstracts` first."
        )
    staging = layout.staging_dir(target)
    try:
        # One DuckDB connection per step: each starts with its whole memory limit free.
        with stream.connect(spill_in=staging) as con:
            files = stream.write_data_files(con, staging, plan.configs)
        written = {rel: sha256_file(staging / rel) for splits in files.values() for rel in splits.values()}
        ledger = ledger_files(assets_root, partition)
        with stream.connect(spill_in=staging) as con:
            n_decisions = write_final_decisions(con, ledger, staging / layout.PROVENANCE / DECISIONS)
        src = LineageSources(assets_root, partition, ledger)
        lineage_rows = {}
        for config, splits in plan.configs.items():
            family = by_name[config].family
            with stream.connect(spill_in=staging) as con:
                src.register(con)
                lineage_rows[config] = write_lineage(
                    con, config, family, list(splits.values()), staging / lineage_path(config)
                )
            if family == "corpus":
                with stream.connect(spill_in=staging) as con:
                    write_links(con, splits, staging / links_path(config))
            elif family == "rag_sft":  # three fields shipped: the rows' ids go to provenance
                with stream.connect(spill_in=staging) as con:
                    write_product_ids(con, splits, staging / ids_path(config))
        for config in plan.configs:
            # A filtered config's asset keeps its filters' verdicts beside its split files.
            verdicts = assets_root / partition / by_name[config].asset / VERDICTS_SOURCE
            if verdicts.is_file():
                write_parquet(pq.read_table(verdicts), staging / verdicts_path(config))
        layout.write_configs(staging, [by_name[c] for c in plan.configs])
        (staging / layout.PROVENANCE / NOTES_FILE).write_bytes(
            orjson.dumps(notes, option=orjson.OPT_INDENT_2) + b"\n"
        )
        body = f"# ragsft release `{partition}`\n\nThe dataset card is written by the `dataset_card` asset.\n"
        layout.write_readme(staging, files, body, pretty_name or f"ragsft {partition}")
        layout.swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rows = {c: {s: src_.rows for s, src_ in splits.items()} for c, splits in plan.configs.items()}
    return ReleaseBuild(target, files, notes, rows, n_decisions, lineage_rows, written)


def read_notes(folder: Path) -> list[str]:
    path = folder / layout.PROVENANCE / NOTES_FILE
    return orjson.loads(path.read_bytes()) if path.is_file() else []


def write_card(
    folder: Path,
    partition: str,
    limitations: Mapping[str, Any] | None = None,
    pretty_name: str = "",
    sections: Sequence[str] = (),
    license_lines: Sequence[str] | None = None,
) -> tuple[str, list[str]]:
    """Render the dataset card from the built release and write it as the README body.

    ``sections`` are markdown lines a family adds under Statistics, ``license_lines`` the License
    section of a release not built from Wikipedia abstracts (see ``card.render_card``).
    """
    files = layout.release_files(folder)
    # The funnel's columns only: details and cache keys of every candidate stay on disk.
    decisions = pq.read_table(
        folder / layout.PROVENANCE / DECISIONS, columns=["product", "stage", "verdict", "reason"]
    )
    # Plots of an earlier card are removed first so the folder holds only what this card shows.
    shutil.rmtree(folder / layout.PLOTS, ignore_errors=True)
    body, plots = render_card(
        folder,
        partition,
        files,
        decisions,
        limitations=limitations,
        notes=read_notes(folder),
        sections=sections,
        license_lines=license_lines,
    )
    layout.write_readme(folder, files, body, pretty_name or f"ragsft {partition}")
    return body, plots


def write_manifests(
    folder: Path,
    partition: str,
    assets_root: Path,
    snapshots_root: Path | None = None,
    run_config: Mapping[str, Any] | None = None,
    llm_roles: Mapping[str, Any] | None = None,
    cache_lookup: Any = "default",
    upstream_metadata: Mapping[str, Mapping[str, Any]] | None = None,
    resources: Mapping[str, Any] | None = None,
    statistics: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write every config's manifest, the release index and the run statistics; returns ``{config: manifest}``.

    ``cache_lookup`` (key -> cached call or None) reads the model and sampling parameters of the
    calls behind the ledger; by default the LLM cache of the home above ``assets_root``. With
    ``upstream_metadata`` (``{asset: metadata}``), ``llm_roles`` is derived from it and those
    calls (``provenance.llm_roles``), and its calls and cache hits (``provenance.llm_stats``) go
    with ``statistics`` (hosts, runs, times) to ``provenance/run_stats.json``, outside the root
    digest. ``resources`` are recorded with credentials masked, their paths (``home``,
    ``cache_dir``: where, not what) in the statistics; the recipe records the
    partition's assets wrote (``recipes.read_records``) go into every manifest.
    """
    from ragsft_assets import recipes
    from ragsft_assets.release.explain import default_cache_lookup

    files = layout.release_files(folder)
    source = source_info(assets_root, snapshots_root, partition)
    if cache_lookup == "default":
        cache_lookup = default_cache_lookup(assets_root.parent)
    calls = ledger_calls_by_stage(ledger_files(assets_root, partition), cache_lookup)
    stats: dict[str, Any] = dict(statistics or {})
    if upstream_metadata is not None:
        llm_roles = provenance.llm_roles(upstream_metadata, calls)
        stats["llm_stats"] = provenance.llm_stats(upstream_metadata)
    records = recipes.read_records(assets_root / partition)
    resources, locations = provenance.split_locations(resources or {})
    if locations:
        stats["resource_locations"] = locations
    manifests = {}
    shipped = layout.read_configs(folder)
    for config, splits in files.items():
        cfg = shipped.get(config)
        extra = {"lineage": lineage_path(config)} if (folder / lineage_path(config)).is_file() else {}
        if (folder / verdicts_path(config)).is_file():
            extra["verdicts"] = verdicts_path(config)
        if (folder / links_path(config)).is_file():
            extra["links"] = links_path(config)
        if (folder / ids_path(config)).is_file():
            extra["ids"] = ids_path(config)
        asset = cfg.asset if cfg else config
        seed = ((run_config or {}).get(asset.rsplit("/", 1)[-1]) or {}).get("seed")
        m = build_manifest(
            folder,
            config=config,
            asset=asset,
            partition=partition,
            data_files=splits,
            source=source,
            run_config=run_config or {},
            llm_roles=llm_roles or {},
            extra_files=extra,
            llm_calls=calls,
            resources=resources,
            recipes=records,
            seed=seed if isinstance(seed, int) else None,
        )
        write_manifest(folder, m)
        manifests[config] = m
    write_release_index(folder, list(files))
    write_run_stats(folder, stats)
    return manifests
