"""JSON-lines files the commands read (answers, passages, published ``-full`` records)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ragsft_assets.json_lines import parse_json_lines


def json_objects(path: Path, expected: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` per non-blank line of ``path`` (gzipped when its name ends in ``.gz``).

    Raises:
        click.ClickException: naming the file and line, on a line that is not valid JSON or not a
            JSON object (the message then says it ``expected`` that).
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        for n, row in parse_json_lines(fh, path, click.ClickException):
            if not isinstance(row, dict):
                raise click.ClickException(f"{path}:{n}: expected {expected}")
            yield n, row
