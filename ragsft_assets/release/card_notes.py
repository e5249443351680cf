"""The card's notes on what a release left out, said once per config, and its corpus link counts.

The build notes every empty split of every config it skips (``release.stream``): on a run where no
question survives, 24 lines for six configs. A config that is skipped needs one line, and the
skipped configs of one cause share it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np

from ragsft_assets.sql import sql_literal

_EMPTY_SPLIT = re.compile(r"^config '(?P<config>[^']+)': split '(?P<split>[^']+)' is empty and left out$")
_SKIPPED = re.compile(r"^config '(?P<config>[^']+)' skipped: asset '(?P<asset>[^']+)' (?P<why>.+)$")


def condense_notes(notes: Sequence[str]) -> list[str]:
    """One line per cause of skipped configs; empty-split notes only for the configs that ship."""
    skipped: dict[str, list[tuple[str, str]]] = {}
    empty: list[tuple[str, str]] = []
    other: list[str] = []
    for note in notes:
        if m := _SKIPPED.match(note):
            skipped.setdefault(m["why"], []).append((m["config"], m["asset"]))
        elif m := _EMPTY_SPLIT.match(note):
            empty.append((m["config"], m["split"]))
        else:
            other.append(note)
    gone = {config for pairs in skipped.values() for config, _ in pairs}
    out = []
    for why, pairs in skipped.items():
        names = ", ".join(f"`{config}` ({asset})" for config, asset in pairs)
        out.append(f"configs skipped, their asset {why}: {names}")
    shipped_empty: dict[str, list[str]] = {}
    for config, split in empty:
        if config not in gone:
            shipped_empty.setdefault(config, []).append(split)
    for config, splits in shipped_empty.items():
        out.append(f"config `{config}`: empty split(s) left out: {', '.join(splits)}")
    return out + other


def provenance_link_counts(provenance: Path, fallback: np.ndarray) -> np.ndarray:
    """Links per abstract of a corpus config whose links ship in ``provenance/<config>/links.parquet``.

    The config's own files hold five columns (the card's), so counting a ``links`` column there
    gives 0 for every abstract; ``fallback`` is returned when the provenance file is absent.
    """
    path = provenance / "links.parquet"
    if not path.is_file():
        return fallback
    query = f"SELECT coalesce(len(links), 0) AS n FROM read_parquet({sql_literal(str(path))}) ORDER BY id"
    with duckdb.connect() as con:
        return con.sql(query).to_arrow_table()["n"].to_numpy()
