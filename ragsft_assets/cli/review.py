"""``ragsft review sample``: a blind JSONL sample of a filtered configuration and its key file."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pyarrow.parquet as pq

from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.multihop import review
from ragsft_assets.multihop.recipes import RECIPES
from ragsft_assets.release.layout import CONFIGS_BY_NAME
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.storage import SPLITS

VERDICTS_FILE = "provenance/verdicts.parquet"  # beside a filtered config's split files (defs/multihop)


@click.group()
def review_group() -> None:
    """Blind samples to validate a filter by hand or with the annotator role."""


def _rows(store: ArtifactStore, partition: str, config: str) -> list[dict]:
    asset = CONFIGS_BY_NAME[config].asset
    files = [f for f in store.files(partition, asset) if f.stem in SPLITS]
    if not files:
        raise click.ClickException(
            f"config {config!r} (asset {asset!r}) is not materialized for partition {partition!r}"
        )
    rows = []
    for f in files:
        for r in store.read(partition, asset, f.stem).to_pylist():
            rows.append({**r, "split": f.stem})
    return rows


def _judged_rejected(store: ArtifactStore, partition: str, config: str) -> set[str]:
    """The ids the config's own filters judged and rejected, from its verdicts file (provenance)."""
    path = store.root / partition / CONFIGS_BY_NAME[config].asset / VERDICTS_FILE
    if not path.is_file():
        raise click.ClickException(f"{path} is missing: re-materialize {CONFIGS_BY_NAME[config].asset}")
    verdicts = pq.read_table(path, columns=["id", "filter", "verdict", "kept"]).to_pylist()
    return review.judged_rejected(verdicts, RECIPES[config].filters)


@review_group.command("sample")
@click.option("--partition", required=True, help="Snapshot partition key, e.g. 20260301.fr.")
@click.option("--config", "config", required=True, type=click.Choice(sorted(review.PARENTS)))
@click.option("--n", "n", default=120, show_default=True, type=int, help="Questions to draw.")
@click.option("--design", type=click.Choice(review.DESIGNS), default="balanced", show_default=True)
@click.option(
    "--seed", default=DEFAULT_SEED, show_default=True, type=int, help="The project seed by default."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for sample.jsonl and key.jsonl (default $RAGSFT_HOME/reviews/<partition>/<config>-<design>-n<N>).",
)
def sample(partition: str, config: str, n: int, design: str, seed: int, out: str | None) -> None:
    """Write a shuffled, blind sample.jsonl (no verdicts) and a separate key.jsonl {"id", "group"}.

    ``balanced``: half among the config's questions, half among those its filters judged and
    rejected (never one left not_annotated or unreadable); ``random``: from the parent.
    """
    store = ArtifactStore()
    parent = _rows(store, partition, review.PARENTS[config])
    kept = [r["id"] for r in _rows(store, partition, config)]
    try:
        rejected = _judged_rejected(store, partition, config) if design == "balanced" else None
        rows, key = review.draw_sample(parent, kept, n, design, seed, rejected)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    folder = Path(out) if out else store.home_path / "reviews" / partition / f"{config}-{design}-n{n}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sample.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    (folder / "key.jsonl").write_bytes(b"".join(orjson.dumps(k) + b"\n" for k in key))
    groups = {g: sum(k["group"] == g for k in key) for g in (review.KEPT, review.REJECTED)}
    click.echo(
        f"{len(rows)} questions ({groups[review.KEPT]} kept, {groups[review.REJECTED]} rejected) -> "
        f"{folder / 'sample.jsonl'}; key: {folder / 'key.jsonl'}"
    )
