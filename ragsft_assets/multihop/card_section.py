"""The multihop lines of a snapshot's dataset card: the card's funnel rows beside this run's, the
gold and distractor-only abstracts of each corpus config drawn from a question config, per split,
and each config's recipe.

Dagster-free: reads the stage tables under an assets root and the release folder's files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ragsft_assets import published_configs, recipes
from ragsft_assets.multihop.config_recipes import config_sentence
from ragsft_assets.multihop.funnel import build_funnel, card_rows
from ragsft_assets.multihop.recipes import RECIPES
from ragsft_assets.storage import SPLITS, asset_files
from ragsft_assets.table_stats import markdown_table

FUNNEL_STAGES = ("question_drafts", "question_checks", "distractors", "ablation_verdicts")


def _read(assets_root: Path, partition: str, asset: str) -> Any:
    files = asset_files(partition, asset, assets_root)
    return pq.ParquetDataset(files).read() if files else None


def funnel_lines(assets_root: Path, partition: str) -> list[str]:
    """The HotpotQA-fr card's funnel rows with this run's numbers beside the card's (none without
    the stage tables)."""
    tables = [_read(assets_root, partition, a) for a in FUNNEL_STAGES]
    if any(t is None for t in tables):
        return []
    funnel = build_funnel(*tables)
    rows = card_rows(funnel)
    return [
        "### `default`: the funnel, beside the HotpotQA-fr card's",
        "",
        "The near-duplicate removal and the caps (2 questions per bridge, 3 per source) run before "
        "the judge, as the card's arithmetic has it; the judge's cascade runs A+B, then B alone, then "
        "A alone, then no document.",
        "",
        markdown_table(["step", "this run", "the card"], rows),
        "",
        f"Judge calls per judged question: **{funnel['judge calls per judged question']:.2f}** "
        f"(the card: {funnel['card judge calls per judged question']:.2f}).",
        "",
    ]


def corpus_role_counts(questions: Sequence[Path], corpus: Sequence[Path]) -> dict[str, dict[str, int]]:
    """Per split: abstracts of the corpus that are a gold of some question (``gold``) and those that
    only stand as distractors (``distractor_only``). ``questions`` and ``corpus`` are split files
    named ``<split>-...parquet`` (the release's) or ``<split>.parquet``."""

    def split_of(p: Path) -> str:
        return p.name.split("-", 1)[0].split(".", 1)[0]

    golds: dict[str, set[str]] = {}
    for f in questions:
        facts = pq.read_table(f, columns=["supporting_facts"])["supporting_facts"].to_pylist()
        golds.setdefault(split_of(f), set()).update(t for sf in facts for t in sf["title"])
    out: dict[str, dict[str, int]] = {}
    for f in sorted(corpus, key=lambda p: SPLITS.index(split_of(p)) if split_of(p) in SPLITS else 9):
        titles = pq.read_table(f, columns=["title"])["title"].to_pylist()
        gold = sum(t in golds.get(split_of(f), set()) for t in titles)
        out[split_of(f)] = {"gold": gold, "distractor_only": len(titles) - gold}
    return out


def corpus_lines(folder: Path, files: Mapping[str, Mapping[str, str]], names: Mapping[str, str]) -> list[str]:
    """Gold vs distractor-only abstracts per split of each corpus config drawn from the contexts of
    a question config (its parent), as the card reports them."""
    lines: list[str] = []
    for config in published_configs.of_family("corpus"):
        corpus, questions = names.get(config.name), names.get(config.parent or "")
        if config.parent is None or corpus not in files or questions not in files:
            continue
        counts = corpus_role_counts(
            [folder / p for p in files[questions].values()], [folder / p for p in files[corpus].values()]
        )
        rows = [
            (s, c["gold"], c["distractor_only"], c["gold"] + c["distractor_only"]) for s, c in counts.items()
        ]
        lines += [
            f"### `{corpus}`: gold and distractor-only abstracts per split",
            "",
            markdown_table(["split", "gold", "distractor only", "abstracts"], rows),
            "",
        ]
    return lines


def recipe_lines(assets_root: Path, partition: str, names: Mapping[str, str]) -> list[str]:
    """One line per multihop config whose assets recorded a recipe: "as the card" or the differences
    of every asset that made it (``config_recipes``)."""
    records = recipes.read_records(assets_root / partition)
    lines = []
    for config in RECIPES:  # a config no asset makes (``corpus``: the abstracts) has no sentence
        sentence = config_sentence(records, config)
        if sentence is not None and config in names:
            lines.append(f"- `{names[config]}`: {sentence}")
    return ["### Recipes", "", *lines, ""] if lines else []


def card_section(
    assets_root: Path,
    partition: str,
    folder: Path,
    files: Mapping[str, Mapping[str, str]],
    names: Mapping[str, str],
) -> list[str]:
    """The multihop lines of the card (under Statistics): funnel, corpus configs' roles, recipes.

    Args:
        assets_root: the store's ``assets`` folder.
        partition: the snapshot key.
        folder: the release folder.
        files: ``{config: {split: rel path}}`` of the release.
        names: the card's config name -> the name it ships under (renamed configs).
    """
    names = {n: names.get(n, n) for n in RECIPES}
    return [
        *funnel_lines(assets_root, partition),
        *corpus_lines(folder, files, names),
        # a recipe line only for the configs this release ships (a skipped config has no rows to describe)
        *recipe_lines(assets_root, partition, {c: n for c, n in names.items() if n in files}),
    ]


def release_sections(assets_root: Path, partition: str, folder: Path) -> list[str]:
    """:func:`card_section` for a built release folder (its files and config names from the folder)."""
    from ragsft_assets.release.layout import default_name, read_configs, release_files

    names = {default_name(c): n for n, c in read_configs(folder).items()}
    return card_section(assets_root, partition, folder, release_files(folder), names)
