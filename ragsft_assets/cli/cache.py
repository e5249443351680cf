"""``ragsft cache``: look into the content-addressed LLM call cache."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ragsft_assets.home import describe_home, llm_cache_dir


def _open(cache_dir: str | None):  # type: ignore[no-untyped-def]
    from ragsft_assets.llm.cache import DB_NAME, LLMCache

    folder = Path(cache_dir) if cache_dir else llm_cache_dir()
    if not (folder / DB_NAME).exists():  # the home's: say which home and how it was found
        raise click.ClickException(
            f"no LLM cache at {folder}" + ("" if cache_dir else f" ({describe_home()})")
        )
    return LLMCache(folder)


_DIR = click.option(
    "--cache-dir", type=click.Path(file_okay=False), default=None, help="Default: $RAGSFT_HOME/llm_cache."
)


@click.group()
def cache() -> None:
    """Inspect the LLM call cache (requests and responses by content address)."""


@cache.command()
@click.argument("key")
@_DIR
def show(key: str, cache_dir: str | None) -> None:
    """Print the cached call KEY (a full key or a unique prefix): request and response as JSON."""
    try:
        entry = _open(cache_dir).show(key.strip().lower())
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if entry is None:
        raise click.ClickException(f"no cached call with key {key}")
    click.echo(json.dumps(entry, indent=2, ensure_ascii=False))


@cache.command()
@_DIR
def stats(cache_dir: str | None) -> None:
    """Entries and tokens per model (backend, weights) and prompt template version."""
    from ragsft_assets.llm.cache import DB_NAME

    folder = Path(cache_dir) if cache_dir else llm_cache_dir()
    # The home's cache on a fresh home: no model call made yet, nothing is wrong. A --cache-dir
    # without a cache is a wrong folder, which _open reports.
    if cache_dir is None and not (folder / DB_NAME).exists():
        click.echo(f"the LLM cache is empty: no call cached yet at {folder} ({describe_home()})")
        click.echo("total entries: 0")
        return
    rows = _open(cache_dir).stats()
    from ragsft_assets.llm.cache import STATS_COLUMNS

    cols = list(STATS_COLUMNS)
    table = [cols] + [[str(r[c] if r[c] is not None else "") for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    click.echo(f"total entries: {sum(r['entries'] for r in rows)}")
