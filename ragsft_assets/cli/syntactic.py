"""``ragsft syntactic FILE``: the long-context family's syntactic questions for your own passages."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from ragsft_assets.cli.jsonl import json_objects
from ragsft_assets.cli.options import INPUT_FILE, OUTPUT_FILE
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.long_context.syntactic import generate


def read_passages(path: Path) -> list[tuple[str, str]]:
    """``(id, passage)`` per JSON line of ``path``; blank lines skipped.

    Raises:
        click.ClickException: naming the file, the line and the field, on a bad line.
    """
    out: list[tuple[str, str]] = []
    for n, row in json_objects(path, 'a JSON object {"id", "passage"}'):
        for field in ("id", "passage"):
            if not isinstance(row.get(field), str):
                raise click.ClickException(f"{path}:{n}: field {field!r} is missing or not a string")
        out.append((row["id"], row["passage"]))
    return out


@click.command("syntactic")
@click.argument("file", type=INPUT_FILE)
@click.option(
    "--out", "out_path", type=OUTPUT_FILE, help="Write the JSON lines here instead of standard output."
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="The draws' seed.")
def syntactic(file: Path, out_path: Path | None, seed: int) -> None:
    """Five exact questions per passage (word/phrase occurs, counts, position).

    FILE holds JSON lines {"id", "passage"}; each output line is
    {"id", "type", "question", "answer", "target"}. Words are maximal runs of letters or digits
    (str.isalnum), compared lower-cased; phrases are word 4-grams counted with overlaps.
    """
    try:
        qas, skipped = generate(read_passages(file), seed=seed)
    except ValueError as exc:
        raise click.ClickException(f"{file}: {exc}") from None
    data = b"".join(orjson.dumps(q.to_dict()) + b"\n" for q in qas)
    if out_path is None:
        sys.stdout.buffer.write(data)
    else:
        tmp = out_path.with_name(out_path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(out_path)
    summary = ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "none"
    click.echo(f"syntactic: {len(qas)} questions; skipped: {summary}", err=True)
