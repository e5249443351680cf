"""``ragsft recall``: the Recall Rewrite family's offline tools (no model call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from ragsft_assets.recall.rule import RuleCounts, Thresholds, rederive


def _full_files(path: Path) -> list[Path]:
    """The ``-full`` config's data files: the file itself, or under a folder those whose path names
    ``full`` (a release folder or the published dataset's own tree)."""
    if path.is_file():
        return [path]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and p.suffix in (".parquet", ".jsonl") and "full" in str(p.relative_to(path))
    )
    if not files:
        raise click.ClickException(f"{path}: no -full Parquet or JSON-lines file under this folder")
    return files


def read_full(path: Path) -> list[dict[str, Any]]:
    """Records of a ``-full`` config: a release folder, Parquet, or JSON lines.

    Raises:
        click.ClickException: naming the file and line, on a bad line or an unknown suffix.
    """
    rows: list[dict[str, Any]] = []
    for f in _full_files(path):
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows.extend(pq.read_table(f).to_pylist())
        elif f.suffix in (".jsonl", ".json"):
            with f.open("rb") as fh:
                for n, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        row = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise click.ClickException(f"{f}:{n}: not valid JSON ({exc})") from None
                    if not isinstance(row, dict) or not isinstance(row.get("claims"), list):
                        raise click.ClickException(f"{f}:{n}: expected a -full record with a claims list")
                    rows.append(row)
        else:
            raise click.ClickException(f"{f}: expected .parquet or .jsonl")
    return rows


@click.group("recall")
def recall() -> None:
    """Recall Rewrite (knowledge-aligned SFT): offline tools."""


@recall.command("rule")
@click.argument("full", type=click.Path(exists=True, path_type=Path))
@click.option("--thresholds", default="2/1/2/1", show_default=True, help="j_e/k_e/j_c/k_c")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="write JSON lines here")
def rule(full: Path, thresholds: str, out: Path | None) -> None:
    """Re-apply the known-claim rule to a -full config under THRESHOLDS, with no model call.

    Prints the known/unknown counts; the last line is one JSON object with them. Records whose
    removed claims changed get rewrite_stale: true (their rewrite needs the rewriter again).
    """
    try:
        t = Thresholds.parse(thresholds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--thresholds") from None
    counts = RuleCounts()
    records = [rederive(r, t, counts) for r in read_full(full)]
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("wb") as fh:
            for r in records:
                fh.write(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n")
        click.echo(f"wrote {len(records)} records to {out}")
    click.echo(
        f"thresholds {t}: {counts.records} records, {counts.claims} claims, "
        f"{counts.knowledge_dependent} knowledge-dependent, {counts.known} known, {counts.unknown} unknown, "
        f"{counts.rewrite_stale} rewrite stale"
    )
    click.echo(orjson.dumps({"thresholds": str(t), **counts.as_dict()}).decode())
