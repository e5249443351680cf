"""The corpus assets' settings (Dagster-free): a value of the run config, else the snapshot's
``snapshot.json``, else the default; and the bridge titles from any of their three places."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragsft_assets.corpus.abstracts import DEFAULT_SPLIT_SHARES, AbstractsConfig, normalise_shares
from ragsft_assets.corpus.link_graph import DEFAULT_BRIDGE_TOP_K, DEFAULT_IN_DEGREE_CAP, LinkGraphConfig
from ragsft_assets.multihop.recipes import default_pairs_drawn


def setting(snapshot: Mapping[str, Any], name: str, value: Any, default: Any) -> Any:
    """``value`` when the run config sets it, else ``snapshot.json``'s ``name``, else ``default``."""
    return value if value is not None else snapshot.get(name, default)


def abstracts_config(
    lang: str,
    snapshot: Mapping[str, Any],
    *,
    seed: int,
    split_shares: Sequence[float] | None,
    min_chars: int,
    min_sentences: int,
) -> AbstractsConfig:
    """The abstracts' filters, seed and split shares (normalised) for a snapshot of ``lang``."""
    shares = normalise_shares(setting(snapshot, "split_shares", split_shares, DEFAULT_SPLIT_SHARES))
    return AbstractsConfig(
        lang=lang, min_chars=min_chars, min_sentences=min_sentences, seed=seed, split_shares=shares
    )


def bridge_titles(listed: Sequence[str], titles_file: str, snapshot: Mapping[str, Any]) -> tuple[str, ...]:
    """Bridge titles from the config list and the config file (one title per line), or else
    ``snapshot.json``'s ``bridge_titles``; sorted, once each."""
    titles = list(listed)
    if titles_file:
        path = Path(titles_file).expanduser()
        titles += [t.strip() for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    if not titles:
        titles = list(snapshot.get("bridge_titles", []))
    return tuple(sorted(set(titles)))


def link_graph_config(
    snapshot: Mapping[str, Any],
    *,
    in_degree_cap: int | None,
    titles: Sequence[str],
    titles_file: str,
    bridge_top_k: int | None,
) -> LinkGraphConfig:
    """The in-degree cap and the bridge rule of the link graph."""
    return LinkGraphConfig(
        in_degree_cap=int(setting(snapshot, "in_degree_cap", in_degree_cap, DEFAULT_IN_DEGREE_CAP)),
        bridge_titles=bridge_titles(titles, titles_file, snapshot),
        bridge_top_k=int(setting(snapshot, "bridge_top_k", bridge_top_k, DEFAULT_BRIDGE_TOP_K)),
    )


def pairs_drawn(max_pairs: int, snapshot: Mapping[str, Any]) -> int:
    """How many bridge pairs to draw: the card's draw ("200 000 paires ont été tirées", the recipe's
    ``pairs_drawn``) unless the run config or ``snapshot.json`` (the sample's quick demo) sets
    another; the draw is capped at what exists."""
    return max_pairs or snapshot.get("max_pairs") or default_pairs_drawn()
