"""Recall Rewrite's release (Dagster-free): ``releases/recall/``, a ``<model>-sft`` and a
``<model>-full`` config per base model whose ``rewrites`` are stored, with the card, the license
and each config's manifest (its recipe record)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import yaml

from ragsft_assets import recipes
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.recall import recipes as recall_recipes
from ragsft_assets.recall import release_files, stages
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA, sft_row
from ragsft_assets.recall.stored import SHARED_PARTITION, model_partition
from ragsft_assets.release import layout, manifest
from ragsft_assets.release.card import CARDS_DOC_LINE
from ragsft_assets.table_stats import markdown_table

if TYPE_CHECKING:
    from ragsft_assets.resources.store import ArtifactStore


def release_folder(store: ArtifactStore) -> Path:
    """``releases/recall/`` of the store's home."""
    return store.home_path / "releases" / "recall"


def card_body(
    stats_by_model: dict[str, dict[str, Any]],
    empty: Sequence[str] = (),
    *,
    recipe_lines: Sequence[str] = (),
    license_notice: str = recall_recipes.RECALL_OASST1.license_notice,
    ids_note: str = "",
) -> str:
    """The dataset card's body: what the configs are, the paper's statistics table per model, the
    recipe line of each model's build, which ids the models share, and the license."""
    names = list(next(iter(stats_by_model.values())).keys()) if stats_by_model else []
    table = markdown_table(
        ["statistic", *stats_by_model], [[n, *(s[n] for s in stats_by_model.values())] for n in names]
    )
    return (
        "# Recall Rewrite (knowledge-aligned SFT)\n\n"
        "OASST1 first turns whose gold responses keep only the claims each base model consistently "
        "recalls (unknown claims rewritten away, or the fixed refusal). `<model>-sft` is the training "
        "view; `<model>-full` carries every claim, probe, answer and label, so `ragsft recall rule` "
        "re-derives the set under other thresholds with no model call.\n\n"
        f"## Statistics\n\n{table}\n"
        + (f"\n{ids_note}\n" if ids_note else "")
        + (
            f"\nLeft out (every example dropped, nothing to load): {', '.join(f'`{k}`' for k in empty)}\n"
            if empty
            else ""
        )
        + ("\n## Recipe\n\n" + "\n".join(f"- {line}" for line in recipe_lines) + "\n" if recipe_lines else "")
        + f"\n## License\n\n{license_notice}\n"
        + f"\n{CARDS_DOC_LINE}\n"
    )


def ids_note(ids_by_model: dict[str, list[str]]) -> str:
    """The card's sentence on the example ids the base models share (the card's configs hold the same)."""
    if len(ids_by_model) < 2:
        return ""
    sets = {k: set(v) for k, v in ids_by_model.items()}
    common = set.intersection(*sets.values())
    if all(len(v) == len(common) for v in sets.values()):
        return f"Every base model's `-sft` holds the same {len(common)} example ids."
    extra = {k: len(v - common) for k, v in sets.items() if v - common}
    return (
        f"The base models share {len(common)} example ids; ids held by one model only (other runs"
        f" of the shared stages): {', '.join(f'`{k}` {n}' for k, n in sorted(extra.items()))}."
    )


def build_recall_release(store: ArtifactStore, target: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """Build ``releases/recall/`` from every base model whose ``rewrites`` are stored.

    Returns ``({config: rows}, released base-model keys, keys left out because every example was
    dropped)``; raises ``ValueError`` when no model has a row. Built in a staging folder beside the
    target and swapped in, so a reader never sees half a release. Each config's manifest holds the
    license and the recipe record of its ``rewrites`` (values and the fields the run changed).
    """
    keys = sorted(
        p.name[len(SHARED_PARTITION) + 1 :]
        for p in store.root.glob(f"{SHARED_PARTITION}-*")
        if store.path(p.name, "rewrites").is_file()
    )
    tables: dict[str, dict[str, pa.Table]] = {}
    stats: dict[str, dict[str, Any]] = {}
    records: dict[str, dict[str, Any]] = {}
    ids: dict[str, list[str]] = {}
    empty: list[str] = []
    for key in keys:
        full = store.read(model_partition(key), "rewrites").cast(FULL_SCHEMA).sort_by("id")
        if full.num_rows == 0:
            # Every example was dropped (e.g. no readable decomposition): an empty split does not
            # load with `datasets`, so the model is left out of the release and named on the card.
            empty.append(key)
            continue
        rows = full.to_pylist()
        tables[f"{key}-sft"] = {"train": pa.Table.from_pylist([sft_row(r) for r in rows], schema=SFT_SCHEMA)}
        tables[f"{key}-full"] = {"train": full.replace_schema_metadata(None)}
        stats[key] = stages.statistics(rows)
        ids[key] = [r["id"] for r in rows]
        records[key] = recipes.read_records(store.root / model_partition(key)).get(
            "rewrites", recipes.record(recall_recipes.RECALL_OASST1)
        )
    if not tables:
        raise ValueError(
            "nothing to release under releases/recall: "
            + (
                f"every example was dropped for {', '.join(empty)}"
                if empty
                else "no base model has `rewrites`"
            )
            + "; see each partition's rewrites/claims metadata for the reasons"
        )
    resolved = {k: recipes.apply_overrides(
        recipes.get(r["recipe"]), {f: v["run"] for f, v in r["changed"].items()}
    ) for k, r in records.items()}  # fmt: skip
    licenses = sorted({r.license for r in resolved.values()})
    notices = list(dict.fromkeys(r.license_notice for r in resolved.values()))
    staging = layout.staging_dir(target)
    # "Files are plain JSONL (gzip-compressed where large)": not Parquet (release_files.py)
    files = release_files.write_jsonl_files(staging, tables)
    body = card_body(
        stats,
        empty,
        recipe_lines=[f"`{k}`: {recipes.card_sentence(r)}" for k, r in records.items()],
        license_notice="\n\n".join(notices),
        ids_note=ids_note(ids),
    )
    layout.write_readme(staging, files, body, "ragsft recall")
    set_header_license(staging, licenses)
    prompts = {k: v for k, v in manifest.prompt_hashes().items() if k.startswith("recall_")}
    for config, splits in files.items():
        key = config.rsplit("-", 1)[0]
        doc = manifest.build_manifest(
            staging,
            config=config,
            asset="rewrites",
            partition=key,
            data_files={},  # JSON lines: their entries come from release_files below
            source={"dataset": resolved[key].dataset, "base_model_key": key},
            run_config={},
            llm_roles={},
            prompts=prompts,
            review_sample=0,  # the shared one reads Parquet: the same draw, from the rows, below
        )
        # the JSON-lines files' entries and review sample (the shared manifest reads Parquet footers)
        doc["files"] = release_files.file_entries(
            staging, splits, {s: t.num_rows for s, t in tables[config].items()}
        )
        doc["row_counts"] = {s: t.num_rows for s, t in tables[config].items()}
        doc["rows_total"] = sum(doc["row_counts"].values())
        sample = release_files.write_review_sample(staging, config, tables[config], DEFAULT_SEED)
        doc["review_sample"] = sample
        doc["provenance_files"][sample] = {"sha256": manifest.sha256_file(staging / sample)}
        doc["statistics"] = stats[key]
        doc["license"] = resolved[key].license
        doc["recipe"] = records[key]
        manifest.write_manifest(staging, doc)
    manifest.write_release_index(staging, list(files))
    layout.swap_into_place(staging, target)
    return {c: t["train"].num_rows for c, t in tables.items()}, [k for k in keys if k not in empty], empty


def set_header_license(folder: Path, licenses: Sequence[str]) -> None:
    """Put the configs' license(s) in the README's YAML header (one id, or the list of them)."""
    from ragsft_assets.storage import atomic_write_bytes

    readme = folder / layout.README
    text = readme.read_text(encoding="utf-8")
    value = licenses[0] if len(licenses) == 1 else list(licenses)
    _, header, body = text.split("---\n", 2)
    meta = yaml.safe_load(header)
    meta["license"] = value
    new = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body
    atomic_write_bytes(readme, new.encode("utf-8"))
