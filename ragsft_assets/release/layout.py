"""The release folder: a Hugging Face dataset repository that ``datasets.load_dataset`` reads offline.

Layout of ``$RAGSFT_HOME/releases/<partition>/``::

    README.md                                  YAML header (configs + data files) + the dataset card
    <config>/<split>-00000-of-00001.parquet    one file per non-empty split
    provenance/decisions.parquet               final decision per candidate (all products)
    provenance/<config>/manifest.json          SHA-256 of every data file, config, models... (manifest.py)
    provenance/<config>/lineage.parquet        id -> origin chain (lineage.py)
    provenance/<config>/verdicts.parquet       filtered configs: verdict of every filter per question
    provenance/configs.json                    each shipped config's asset, family and description
    provenance/release.json                    SHA-256 of the README, plots, decisions and manifests
    plots/*.png                                histograms (card.py)

``datasets.load_dataset(folder, CONFIG)`` finds the configs in the README's ``configs:`` header; the
features come from the Parquet schemas, which keep the upstream Arrow types.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import yaml

from ragsft_assets import published_configs
from ragsft_assets.leftovers import recover  # noqa: F401 - re-exported; the clean-up of killed builds: leftovers knows their names
from ragsft_assets.storage import staging_folder, swap_folder, write_parquet

log = logging.getLogger(__name__)

README = "README.md"
PROVENANCE = "provenance"
PLOTS = "plots"
LICENSE = "cc-by-sa-4.0"


@dataclass(frozen=True, slots=True)
class ReleaseConfig:
    """One product of the release: a Hugging Face config built from one upstream asset."""

    name: str
    asset: str
    family: str
    description: str
    columns: tuple[str, ...] = ()  # the shipped columns, in order; () ships every column of the asset
    # (asset column, shipped name): the asset keeps its name, the data file the card's
    renames: tuple[tuple[str, str], ...] = ()

    def published_name(self, column: str) -> str:
        """The name ``column`` of the asset ships under."""
        return dict(self.renames).get(column, column)


# The HotpotQA-fr card's corpus columns (its recipes hold them); url, revision and links stay in
# provenance/<config>/lineage.parquet and the abstracts asset.
CORPUS_COLUMNS = ("id", "title", "text", "sentences", "qid")
# The Luciole RAG card: "Each row has three fields" (messages, supporting_facts_titles,
# chunks_total); the rows' ids and twin pairs stay in provenance/<config>/ids.parquet and the lineage.
RAG_SFT_COLUMNS = ("messages", "supporting_facts_titles", "chunks_total")
# The HotpotQA-fr card's Schéma, its fields in its order: "_id string identifiant hexadécimal de 24
# caractères", question, answer, supporting_facts, context, type, level. The question assets keep
# `id` (every stage, the lineage and `ragsft explain` read it); the published file names it `_id`.
HOTPOTQA_COLUMNS = ("id", "question", "answer", "supporting_facts", "context", "type", "level")
HOTPOTQA_RENAMES = (("id", "_id"),)
# What each family ships: the shipped columns in order, and the (asset column, shipped name) renames.
FAMILY_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "multihop": (HOTPOTQA_COLUMNS, HOTPOTQA_RENAMES),
    "corpus": (CORPUS_COLUMNS, ()),
    "rag_sft": (RAG_SFT_COLUMNS, ()),
}
# One per published config, in its order: the first present config is the one
# `load_dataset(folder)` opens without a name.
RELEASE_CONFIGS: tuple[ReleaseConfig, ...] = tuple(
    ReleaseConfig(c.name, c.asset, c.family, c.description, *FAMILY_COLUMNS[c.family])
    for c in published_configs.configs()
)
CONFIGS_BY_NAME = {c.name: c for c in RELEASE_CONFIGS}
CONFIGS_FILE = "configs.json"  # provenance/configs.json: the configs as this release named them
# A Hub config name: it is also a folder name of the release and a word of `load_dataset(folder, NAME)`.
_CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def release_configs(names: Mapping[str, str] | None = None) -> tuple[ReleaseConfig, ...]:
    """The release's configs, some renamed: ``names`` maps a config's default name (the card's) to
    the name it ships under. Order and assets stay; descriptions name the configs as renamed.

    Raises:
        ValueError: a name of ``names`` that is no config, a new name that is no valid config name
            (letters, digits, ``_ . -``), or two configs under one name.
    """
    names = dict(names or {})
    unknown = sorted(set(names) - set(CONFIGS_BY_NAME))
    if unknown:
        raise ValueError(
            f"no release config named {unknown}: the configs are {[c.name for c in RELEASE_CONFIGS]}"
        )
    for old, new in names.items():
        if not isinstance(new, str) or not _CONFIG_NAME.fullmatch(new):
            raise ValueError(f"config {old!r}: {new!r} is not a config name (letters, digits, _ . -)")
    out = []
    for c in RELEASE_CONFIGS:
        desc = c.description
        for old, new in names.items():  # backquoted config names in the description follow the renames
            desc = desc.replace(f"`{old}`", f"`{new}`")
        out.append(ReleaseConfig(names.get(c.name, c.name), c.asset, c.family, desc, c.columns, c.renames))
    taken = [c.name for c in out]
    twice = sorted({n for n in taken if taken.count(n) > 1})
    if twice:
        raise ValueError(f"two release configs would be named {twice}")
    return tuple(out)


def default_name(config: ReleaseConfig) -> str:
    """The card's name of a (possibly renamed) config, from its asset."""
    return next((c.name for c in RELEASE_CONFIGS if c.asset == config.asset), config.name)


def write_configs(folder: Path, configs: Sequence[ReleaseConfig]) -> Path:
    """``provenance/configs.json``: the configs this release ships, so the card, the manifests and
    ``ragsft explain`` read the names it was built with (``{name: {asset, family, description}}``)."""
    from ragsft_assets.storage import atomic_write_bytes

    doc = {c.name: {"asset": c.asset, "family": c.family, "description": c.description} for c in configs}
    return atomic_write_bytes(
        folder / PROVENANCE / CONFIGS_FILE, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    )


def read_configs(folder: Path) -> dict[str, ReleaseConfig]:
    """The configs of a built release by name: its ``provenance/configs.json``, else the defaults
    (a release built before the file existed)."""
    path = folder / PROVENANCE / CONFIGS_FILE
    if not path.is_file():
        return dict(CONFIGS_BY_NAME)
    defaults = {c.asset: (c.columns, c.renames) for c in RELEASE_CONFIGS}
    return {
        n: ReleaseConfig(n, d["asset"], d["family"], d["description"], *defaults.get(d["asset"], ((), ())))
        for n, d in orjson.loads(path.read_bytes()).items()
    }


def data_file(config: str, split: str) -> str:
    """Relative path of a config's split file, in the Hub's shard naming."""
    return f"{config}/{split}-00000-of-00001.parquet"


def readme_header(files: Mapping[str, Mapping[str, str]], pretty_name: str = "ragsft") -> str:
    """The README's YAML front matter: license, pretty name and one ``configs`` entry per config.

    Args:
        files: ``{config: {split: relative data file}}`` in config order.
        pretty_name: the dataset's display name.
    """
    configs = []
    for i, (name, splits) in enumerate(files.items()):
        entry: dict[str, object] = {"config_name": name}
        if i == 0:
            entry["default"] = True
        entry["data_files"] = [{"split": s, "path": p} for s, p in splits.items()]
        configs.append(entry)
    header = {
        "license": LICENSE,
        "pretty_name": pretty_name,
        "task_categories": ["question-answering", "text-generation"],
        "configs": configs,
    }
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"


def write_readme(folder: Path, files: Mapping[str, Mapping[str, str]], body: str, pretty_name: str) -> Path:
    """(Re)write README.md: YAML header + markdown body, atomically."""
    from ragsft_assets.storage import atomic_write_bytes

    text = readme_header(files, pretty_name) + "\n" + body.rstrip("\n") + "\n"
    return atomic_write_bytes(folder / README, text.encode("utf-8"))


def write_data_files(folder: Path, tables: Mapping[str, Mapping[str, pa.Table]]) -> dict[str, dict[str, str]]:
    """Write every config's split files under ``folder``; returns ``{config: {split: rel path}}``."""
    files: dict[str, dict[str, str]] = {}
    for config, splits in tables.items():
        files[config] = {}
        for split, table in splits.items():
            rel = data_file(config, split)
            write_parquet(table, folder / rel)
            files[config][split] = rel
    return files


def release_files(folder: Path) -> dict[str, dict[str, str]]:
    """The data files of a built release, from its README header: ``{config: {split: rel path}}``."""
    text = (folder / README).read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise ValueError(f"{folder / README} has no YAML header")
    header = yaml.safe_load(text.split("---\n", 2)[1]) or {}
    out: dict[str, dict[str, str]] = {}
    for entry in header.get("configs", []):
        out[entry["config_name"]] = {d["split"]: d["path"] for d in entry.get("data_files", [])}
    return out


def swap_into_place(built: Path, target: Path) -> Path:
    """Replace ``target`` by the fully built folder ``built`` (same parent), never leaving a half folder.

    The old release is renamed aside, the new one renamed in, then the old one deleted: a reader
    sees either the old or the new folder. A process killed in between leaves the old one aside
    under its pid, and the next build puts it back (:func:`recover`). (``storage.swap_folder``.)
    """
    return swap_folder(built, target)


def staging_dir(target: Path) -> Path:
    """A fresh temp folder beside ``target`` (same filesystem, so the final rename is atomic).

    Named after this process (``.<name>.build-<host>-<pid>-<start>-XXXX``), so that a build killed
    while writing leaves a folder the next build recognizes as dead and removes (:func:`recover`).
    Its mode follows the umask (``storage.staging_folder``), as the release's files do.
    """
    return staging_folder(target)
