"""JSON lines: one value per non-blank line, numbered from 1 (the one definition; Dagster-free)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson


def parse_json_lines(
    lines: Iterable[bytes | str], where: Path | str, error: Callable[[str], Exception] = ValueError
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line; blank lines keep their number.

    Raises:
        error: ``"<where>:<n>: not valid JSON (<why>)"`` on the first line that is not JSON (the
            caller's exception class, e.g. ``click.ClickException`` for a command).
    """
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise error(f"{where}:{n}: not valid JSON ({exc})") from None
            yield n, value
