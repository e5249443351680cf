"""Release manifests: which bytes were shipped, and everything that made them.

``provenance/<config>/manifest.json`` (the content manifest) holds the snapshot key and source
revisions (an unpinned source says so), the project version and git commit, the run config, the
recipes, the prompt template hashes, the model ids and sampling parameters per LLM role, row
counts and the SHA-256 of every data file of the config, of its lineage file and of its review
sample (``review_sample.jsonl``: ``REVIEW_SAMPLE_SIZE`` rows drawn with the seed, one JSON object a
line, for a person to read). ``provenance/release.json`` closes the loop with the SHA-256 of the
README, the plots, the decisions table and each manifest; its own SHA-256 is the release's root
digest (``root_digest``), printed at build and recorded outside the folder, which is what makes
a self-consistent edit of the folder detectable.

Bytes are deterministic: keys sorted, two-space indent, no timestamps, nothing that depends on
the run's history; the same inputs give byte-identical manifests whether the run was resumed or
not. How the run got there (calls, cache hits, hosts, times) goes to ``provenance/run_stats.json``
(``write_run_stats``), which the root digest does not cover.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from ragsft_assets.corpus.hub_snapshot import snapshot_revision
from ragsft_assets.prompts import all_prompts
from ragsft_assets.release.layout import PLOTS, PROVENANCE, README
from ragsft_assets.release.provenance import GIT_COMMIT_ENV, git_commit, git_dirty, redact_settings
from ragsft_assets.storage import atomic_write_bytes

MANIFEST = "manifest.json"
RELEASE_INDEX = "release.json"
RUN_STATS = "run_stats.json"  # provenance/run_stats.json: the run's statistics, outside the root digest
REVIEW_SAMPLE = "review_sample.jsonl"
REVIEW_SAMPLE_SIZE = 200
DECISIONS = "decisions.parquet"
LINEAGE = "lineage.parquet"
FORMAT_VERSION = 1


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, streamed (release files can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def json_bytes(obj: Any) -> bytes:
    """The canonical bytes of a manifest: sorted keys, 2-space indent, trailing newline."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


@cache
def project_info() -> dict[str, Any]:
    """The installed project version and git commit (``RAGSFT_GIT_COMMIT``, else the checkout).

    With no commit found, ``git_commit`` is ``unknown`` and ``warning`` says why (in the manifest).
    """
    try:
        version = metadata.version("ragsft")
    except metadata.PackageNotFoundError:
        version = "unknown"
    commit, warning = git_commit()
    info: dict[str, Any] = {"name": "ragsft", "version": version, "git_commit": commit}
    if warning:
        info["warning"] = warning
    elif not os.environ.get(GIT_COMMIT_ENV):  # a checkout: say whether it held uncommitted changes
        info["git_dirty"] = git_dirty()
    return info


def prompt_hashes() -> dict[str, str]:
    """``{task.lang: version}`` of every prompt template the package ships."""
    return {p.name: p.version for p in all_prompts()}


def source_info(assets_root: Path, snapshots_root: Path | None, partition: str) -> dict[str, Any]:
    """The source of a partition: snapshot key, its dump files (names, sizes), origin and article revisions.

    Revisions come from the ``abstracts`` asset (``revision`` per document): their count, the
    highest, and a SHA-256 over the sorted ``id\\trevision`` lines, so two releases can be compared
    revision for revision without listing every article.
    """
    info: dict[str, Any] = {"snapshot": partition}
    if snapshots_root is not None:
        folder = snapshots_root / partition
        if folder.is_dir():
            info["files"] = {
                str(p.relative_to(folder)): p.stat().st_size
                for p in sorted(folder.rglob("*"))
                if p.is_file() and not p.name.startswith(".")
            }
            # Where the dump came from: the pinned hub dataset revision (hub.json), or "local";
            # a source exported from a snapshot (`sources add --from-snapshot`) names it instead.
            info["origin"] = exported_origin(folder) or snapshot_revision(folder)
    abstracts = assets_root / partition / "abstracts"
    files = sorted(abstracts.glob("*.parquet")) if abstracts.is_dir() else []
    if files:
        info["revisions"] = _revisions(files)
    return info


def exported_origin(folder: Path) -> dict[str, Any] | None:
    """The ``origin`` that ``sources add --from-snapshot`` wrote in a source's ``source.json``."""
    import json

    from ragsft_assets.sources.read import SOURCE_CONFIG

    path = folder / SOURCE_CONFIG
    origin = json.loads(path.read_text(encoding="utf-8")).get("origin") if path.is_file() else None
    return origin if isinstance(origin, dict) else None


def _revisions(files: list[Path]) -> dict[str, Any]:
    """Count, highest and digest of the ``id\\trevision`` lines sorted by id, computed by DuckDB.

    The lines stream out in batches into the hash (the ids of a full snapshot never become one
    Python list); ties on id keep file order, as a stable sort of the files' rows does.
    """
    import duckdb

    from ragsft_assets.sql import sql_list

    lst = sql_list(files)
    scan = (
        f"(SELECT id, revision, list_position({lst}, filename) AS _fidx, file_row_number AS _rn "
        f"FROM read_parquet({lst}, union_by_name=true, filename=true, file_row_number=true))"
    )
    con = duckdb.connect()
    try:
        n, with_rev, max_rev = con.execute(
            f"SELECT count(*), count(revision), max(revision) FROM {scan}"
        ).fetchall()[0]
        digest = hashlib.sha256()
        lines = con.sql(
            "SELECT coalesce(CAST(id AS VARCHAR), 'None') || chr(9) || coalesce(CAST(revision AS VARCHAR), '')"
            f" || chr(10) AS line FROM {scan} ORDER BY id NULLS LAST, _fidx, _rn"
        ).to_arrow_reader(65_536)
        for batch in lines:
            digest.update("".join(batch.column(0).to_pylist()).encode())
    finally:
        con.close()
    return {
        "articles": int(n),
        "with_revision": int(with_rev),
        "max_revision": int(max_rev) if max_rev is not None else None,
        "digest_sha256": digest.hexdigest(),
    }


def _signature(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    req = (entry or {}).get("request") or {}
    if not entry:
        return {"missing": True}
    return {
        "model": req.get("model"),
        "params": req.get("params"),
        "template_version": req.get("template_version"),
    }


def _calls_by_stage(counts: Any, lookup: Any) -> dict[str, list[dict[str, Any]]]:
    """``(stage, cache key, occurrences)`` triples -> per stage, its distinct call signatures and counts."""
    out: dict[str, dict[bytes, dict[str, Any]]] = {}
    for stage, key, n in counts:
        sig = _signature(lookup(key) if lookup is not None else None)
        slot = out.setdefault(stage, {}).setdefault(json_bytes(sig), {**sig, "calls": 0})
        slot["calls"] += int(n)
    return {stage: [v for _, v in sorted(sigs.items())] for stage, sigs in sorted(out.items())}


def llm_calls_by_stage(ledger_rows: list[dict[str, Any]], lookup: Any) -> dict[str, list[dict[str, Any]]]:
    """Per deciding stage, the distinct (model identity, sampling params, template version) of its calls.

    Read from the cached requests behind the ledger's cache keys (``lookup(key)`` returns the
    LLM cache's ``{"request": {...}}`` entry or None), so the manifest says which model and which
    parameters really produced the data, with the number of calls each. Keys not in the cache
    are counted under ``missing``.
    """
    return _calls_by_stage(
        ((row["stage"], key, 1) for row in ledger_rows for key in row.get("cache_keys") or []), lookup
    )


def ledger_calls_by_stage(files: list[Path], lookup: Any) -> dict[str, list[dict[str, Any]]]:
    """``llm_calls_by_stage`` over the ledger files, counted by DuckDB (one lookup per stage and key).

    The ledger of a full snapshot never becomes Python rows: DuckDB counts each (stage, key) and
    the counts stream out in batches.
    """
    if not files:
        return {}
    import duckdb

    from ragsft_assets.sql import sql_list

    con = duckdb.connect()
    try:
        reader = con.sql(
            "SELECT stage, key, count(*) AS n FROM (SELECT stage, unnest(cache_keys) AS key "
            f"FROM read_parquet({sql_list(files)}, union_by_name=true)) GROUP BY 1, 2 ORDER BY 1, 2"
        ).to_arrow_reader(65_536)

        def triples() -> Any:
            for batch in reader:
                yield from zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True)

        return _calls_by_stage(triples(), lookup)
    finally:
        con.close()


def review_sample_rows(
    folder: Path, data_files: Mapping[str, str], config: str, seed: int, size: int = REVIEW_SAMPLE_SIZE
) -> list[dict[str, Any]]:
    """``size`` rows of a config drawn with the seed: the rows whose ``sha256(seed, config, id)`` is lowest.

    The draw depends on the seed, the config name and each row's ``id`` (its position in its
    split file when the config has no ``id`` column), never on file order or batching; each row
    comes with its ``split``. Sorted by that hash, so the file reads in a stable order.
    """
    import heapq

    import pyarrow as pa

    def ranked() -> Any:
        # streamed id batches into a heap of ``size``: memory stays flat at full Wikipedia scale
        for split, rel in sorted(data_files.items()):
            pf = pq.ParquetFile(folder / rel)
            i = 0
            key = next((k for k in ("id", "_id") if k in pf.schema_arrow.names), None)  # _id: HotpotQA-fr
            if key is not None:
                batches = (b.column(0).to_pylist() for b in pf.iter_batches(batch_size=65_536, columns=[key]))
            else:
                batches = iter([range(pf.metadata.num_rows)])
            for ids in batches:
                for rid in ids:
                    digest = hashlib.sha256(f"{seed}\x1f{config}\x1f{split}\x1f{rid}".encode()).digest()
                    yield digest, split, i
                    i += 1

    chosen = heapq.nsmallest(size, ranked())
    rows: list[dict[str, Any]] = []
    by_split: dict[str, list[int]] = {}
    for _, split, i in chosen:
        by_split.setdefault(split, []).append(i)
    picked: dict[tuple[str, int], dict[str, Any]] = {}
    for split, idx in by_split.items():
        # only the row groups that hold a drawn row are read (a corpus split is never loaded whole)
        pf = pq.ParquetFile(folder / data_files[split])
        wanted, start = sorted(idx), 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            local = [i - start for i in wanted if start <= i < start + n]
            if local:
                taken = pf.read_row_group(g).take(pa.array(local, pa.int64())).to_pylist()
                for i, row in zip(local, taken, strict=True):
                    picked[(split, start + i)] = row
            start += n
    for _, split, i in chosen:
        rows.append({"split": split, "row": picked[(split, i)]})
    return rows


def write_review_sample(
    folder: Path, config: str, data_files: Mapping[str, str], seed: int, size: int = REVIEW_SAMPLE_SIZE
) -> str:
    """Write ``provenance/<config>/review_sample.jsonl`` (``review_sample_rows``); returns its relative path."""
    rel = f"{PROVENANCE}/{config}/{REVIEW_SAMPLE}"
    lines = [
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
        for r in review_sample_rows(folder, data_files, config, seed, size)
    ]
    atomic_write_bytes(folder / rel, b"".join(line + b"\n" for line in lines))
    return rel


def build_manifest(
    folder: Path,
    *,
    config: str,
    asset: str,
    partition: str,
    data_files: Mapping[str, str],
    source: Mapping[str, Any],
    run_config: Mapping[str, Any],
    llm_roles: Mapping[str, Any],
    extra_files: Mapping[str, str] | None = None,
    llm_calls: Mapping[str, Any] | None = None,
    prompts: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    recipes: Mapping[str, Any] | None = None,
    review_sample: int = REVIEW_SAMPLE_SIZE,
    seed: int | None = None,
) -> dict[str, Any]:
    """The content manifest of one config, hashing its files as they lie in ``folder``.

    Writes the config's review sample first (``write_review_sample``, unless ``review_sample`` is
    0), so the manifest lists and hashes it with the lineage.

    Args:
        folder: the release folder.
        config: the config name (``default``, ``corpus``...: an entry of ``published_configs.py``).
        asset: the upstream asset it ships.
        partition: the snapshot key.
        data_files: ``{split: relative path}`` of the config's data files.
        source: see ``source_info``.
        run_config: per upstream asset, its op's effective config, defaults included.
        llm_roles: per LLM stage, per role: backend, model, weights_id, sampling
            (``provenance.llm_roles``); call counts and cache hits are dropped here (they belong to
            the run statistics, ``write_run_stats``).
        llm_calls: per ledger stage, the model identities and sampling parameters of the cached
            calls behind its decisions (``llm_calls_by_stage``).
        extra_files: ``{name: relative path}`` of provenance files to hash too (lineage).
        prompts: template hashes (default: every template shipped).
        project: version and git commit (default: ``project_info()``).
        resources: the resources' settings; credentials are masked here (``redact_settings``).
        recipes: ``{asset: recipe record}`` (``recipes.read_records``); ``{}`` when none was written.
        review_sample: rows in the review sample (0: none written).
        seed: the seed of the review sample's draw (default: the project's).
    """
    from ragsft_assets.ids import DEFAULT_SEED

    files: dict[str, dict[str, Any]] = {}
    rows: dict[str, int] = {}
    for split, rel in data_files.items():
        path = folder / rel
        n = pq.ParquetFile(path).metadata.num_rows
        rows[split] = n
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size, "rows": n, "split": split}
    extra = dict(extra_files or {})
    if review_sample > 0 and data_files:
        extra["review_sample"] = write_review_sample(
            folder, config, data_files, DEFAULT_SEED if seed is None else seed, review_sample
        )
    provenance = {rel: {"sha256": sha256_file(folder / rel)} for rel in extra.values()}
    roles = {
        stage: {
            role: {k: v for k, v in info.items() if k not in ("calls", "cache_hits")}
            for role, info in r.items()
        }
        for stage, r in llm_roles.items()
    }
    return {
        "format_version": FORMAT_VERSION,
        "config": config,
        "asset": asset,
        "snapshot": partition,
        "source": dict(source),
        "project": dict(project or project_info()),
        "run_config": dict(run_config),
        "recipes": dict(recipes or {}),
        "prompt_templates": dict(prompts if prompts is not None else prompt_hashes()),
        "resources": redact_settings(dict(resources or {})),
        "llm_roles": roles,
        "llm_calls": dict(llm_calls or {}),
        "row_counts": rows,
        "rows_total": sum(rows.values()),
        "files": files,
        "provenance_files": provenance,
        "review_sample": extra.get("review_sample"),
    }


def manifest_path(config: str) -> str:
    return f"{PROVENANCE}/{config}/{MANIFEST}"


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``provenance/<config>/manifest.json`` atomically."""
    return atomic_write_bytes(folder / manifest_path(manifest["config"]), json_bytes(manifest))


def build_release_index(folder: Path, configs: list[str]) -> dict[str, Any]:
    """``provenance/release.json``: SHA-256 of the README, plots, decisions and each config's manifest."""
    rels = [README]
    if (folder / PLOTS).is_dir():
        rels += sorted(str(p.relative_to(folder)) for p in (folder / PLOTS).glob("*.png"))
    if (folder / PROVENANCE / DECISIONS).is_file():
        rels.append(f"{PROVENANCE}/{DECISIONS}")
    if (folder / PROVENANCE / "notes.json").is_file():
        rels.append(f"{PROVENANCE}/notes.json")
    if (folder / PROVENANCE / "configs.json").is_file():  # layout.CONFIGS_FILE: the shipped names
        rels.append(f"{PROVENANCE}/configs.json")
    rels += [manifest_path(c) for c in configs]
    return {
        "format_version": FORMAT_VERSION,
        "configs": sorted(configs),
        "files": {rel: {"sha256": sha256_file(folder / rel)} for rel in rels if (folder / rel).is_file()},
    }


def write_release_index(folder: Path, configs: list[str]) -> Path:
    return atomic_write_bytes(
        folder / PROVENANCE / RELEASE_INDEX, json_bytes(build_release_index(folder, configs))
    )


def root_digest(folder: Path) -> str:
    """The release's root digest: the SHA-256 of ``provenance/release.json``.

    The index hashes every manifest, which hash every file: one value names the whole content.
    Recorded outside the folder (the run's metadata, the catalog's digest log), it is what
    ``ragsft verify --digest`` checks, since a folder can always be made consistent with itself.
    """
    return sha256_file(folder / PROVENANCE / RELEASE_INDEX)


def write_run_stats(folder: Path, stats: Mapping[str, Any]) -> Path:
    """Write ``provenance/run_stats.json``: the run's statistics (calls, cache hits, hosts, times).

    Not listed in ``release.json``: two runs that made the same data (one resumed) have other
    statistics and the same root digest. ``verify`` checks it is a regular JSON file, nothing more.
    """
    return atomic_write_bytes(
        folder / PROVENANCE / RUN_STATS, json_bytes({"format_version": FORMAT_VERSION, **stats})
    )
