"""``ragsft bench NAME``: benchmark scripts; each ends with one ``bench=NAME key=value ...`` line."""

from __future__ import annotations

import importlib

import click

# name -> (module in ragsft_assets.bench with run(size=, workdir=, **options) -> dict, options)
BENCHES: dict[str, tuple[str, dict[str, object]]] = {
    "corpus": ("corpus", {}),
    "diff": ("diff", {}),  # ragsft diff of two generated releases (issue 39)
    "distractors": ("distractors", {}),
    "embeddings": ("embeddings", {}),
    "fleet": ("fleet", {}),
    "llm": ("llm", {}),
    "plan": ("plan", {}),
    "release": ("release", {}),
    "serve": ("serve", {}),
    # The release with every upstream file unsorted: each data file goes through stream.write_sorted.
    "release_unsorted": ("release", {"upstream_sorted": False}),
}


def format_line(name: str, values: dict[str, object]) -> str:
    """The closing line: ``bench=NAME k=v ...`` (floats to 3 significant decimals, bools lowercase)."""
    parts = [f"bench={name}"]
    for k, v in values.items():
        if isinstance(v, bool):
            v = str(v).lower()
        elif isinstance(v, float):
            v = f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:.0f}"
        parts.append(f"{k}={v}")
    return " ".join(parts)


@click.command()
@click.argument("name", type=click.Choice(sorted(BENCHES) or ["none"]))
@click.option(
    "--size", "--n", "size", type=int, default=None, help="Problem size (benchmark-specific default)."
)
@click.option("--workdir", type=click.Path(), default=None, help="Scratch folder (default: a temp dir).")
@click.option(
    "--pairs", type=int, default=None, help="bench fleet / plan: bridge pairs of the generated snapshot."
)
@click.option("--sample", type=int, default=None, help="bench plan: input items of the plan's sample run.")
@click.option(
    "--regime",
    type=click.Choice(["under", "equal", "over"]),
    default=None,
    help="bench fleet: the client's per-URL limit half, equal to or twice each replica's slots.",
)
@click.option(
    "--data",
    type=click.Choice(["clustered", "hard"]),
    default=None,
    help="bench embeddings: the default clustered vectors, or overlapping anisotropic clusters (hard).",
)
def bench(
    name: str,
    size: int | None,
    workdir: str | None,
    pairs: int | None,
    sample: int | None,
    regime: str | None,
    data: str | None,
) -> None:
    """Run benchmark NAME and print its key=value closing line."""
    module_name, options = BENCHES[name]
    module = importlib.import_module(f"ragsft_assets.bench.{module_name}")
    if pairs is not None:
        options = {**options, "pairs": pairs}
    if sample is not None:
        options = {**options, "sample": sample}
    if regime is not None:
        options = {**options, "regime": regime}
    if data is not None:
        if name != "embeddings":
            raise click.UsageError("--data is an option of `ragsft bench embeddings` only")
        options = {**options, "data": data}
    values = module.run(size=size, workdir=workdir, **options)
    click.echo(format_line(name, values))
