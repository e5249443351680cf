"""The CLI's side of :func:`ragsft_assets.home.existing_home`: a command that reads the home stops
with its message (exit 1) instead of creating an empty home where it runs."""

from __future__ import annotations

from pathlib import Path

import click

from ragsft_assets.home import HomeNotFoundError, existing_home


def require_home(doing: str) -> Path:
    """The existing home, or a ``ClickException`` that says which home is missing and what to do."""
    try:
        return existing_home(doing)
    except HomeNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
