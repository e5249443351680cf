"""``ragsft recall``: the Recall Rewrite family's commands.

``rule`` re-derives a ``-full`` config under other thresholds (no model call); ``run`` builds the
family headless, one base model after the other, in the project's Dagster instance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import orjson

from ragsft_assets.cli.jsonl import json_objects
from ragsft_assets.cli.options import INPUT_FILE, OUTPUT_FILE
from ragsft_assets.recall.rule import RuleCounts, Thresholds, rederive

FULL_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz")  # data files (a release's manifests are .json)


def _suffix(path: Path) -> str:
    return ".jsonl.gz" if path.name.endswith(".jsonl.gz") else path.suffix


def _config_files(folder: Path, config: str) -> list[Path]:
    """The data files of ``config`` in a release folder: its README header's, else ``<config>/``."""
    from ragsft_assets.release import layout

    files: list[Path] = []
    if (folder / layout.README).is_file():
        try:
            splits = layout.release_files(folder).get(config, {})
        except (ValueError, KeyError, TypeError):  # a README without our header: look at the folders
            splits = {}
        for rel in splits.values():
            files += sorted(p for p in folder.glob(rel) if p.is_file())  # the Hub's paths may be globs
    if not files:
        files = sorted(
            p
            for p in folder.rglob("*")
            if p.is_file() and _suffix(p) in FULL_SUFFIXES and config in p.relative_to(folder).parts
        )
    if not files:
        raise click.ClickException(f"{folder}: no data file of config {config!r}")
    return files


def _full_files(path: Path, config: str | None = None) -> list[Path]:
    """The ``-full`` data files: the file itself; under a folder, those of ``config`` when given,
    else those whose path names ``full`` (a release folder or the published dataset's own tree)."""
    if path.is_file():
        if config:
            raise click.ClickException("--config names a config of a release folder, not of a file")
        return [path]
    if config:
        return _config_files(path, config)
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and _suffix(p) in FULL_SUFFIXES
        and "full" in str(p.relative_to(path))
        and "provenance" not in p.relative_to(path).parts  # a release's review samples, lineage
    )
    if not files:
        raise click.ClickException(f"{path}: no -full Parquet or JSON-lines file under this folder")
    return files


def _json_lines(f: Path) -> Iterator[dict[str, Any]]:
    expected = "a -full record with a claims list"
    for n, row in json_objects(f, expected):
        if not isinstance(row.get("claims"), list):
            raise click.ClickException(f"{f}:{n}: expected {expected}")
        yield row


def read_full(path: Path, config: str | None = None) -> list[dict[str, Any]]:
    """Records of a ``-full`` config: a release folder (``config`` picks one), Parquet, JSON lines
    or gzipped JSON lines (the published dataset's ``.jsonl.gz``).

    Raises:
        click.ClickException: naming the file and line, on a bad line or an unknown suffix.
    """
    rows: list[dict[str, Any]] = []
    for f in _full_files(path, config):
        if _suffix(f) == ".parquet":
            import pyarrow.parquet as pq

            rows.extend(pq.read_table(f).to_pylist())
        elif _suffix(f) in (".jsonl", ".jsonl.gz", ".json"):  # a file given by name may be .json
            rows.extend(_json_lines(f))
        else:
            raise click.ClickException(f"{f}: expected .parquet, .jsonl or .jsonl.gz")
    return rows


@click.group("recall")
def recall() -> None:
    """Recall Rewrite (knowledge-aligned SFT): build it headless, re-derive it offline."""


def _counts_line(label: str, t: Thresholds, c: RuleCounts) -> str:
    return (
        f"{label}thresholds {t}: {c.records} records, {c.claims} claims, "
        f"{c.knowledge_dependent} knowledge-dependent, {c.known} known, {c.unknown} unknown, "
        f"{c.rewrite_stale} rewrite stale"
    )


@recall.command("rule")
@click.argument("full", type=click.Path(exists=True, path_type=Path))
@click.option("--thresholds", default="2/1/2/1", show_default=True, help="j_e/k_e/j_c/k_c")
@click.option("--config", "config", default=None, help="the -full config of a release folder to read")
@click.option("--out", type=OUTPUT_FILE, help="write JSON lines here")
def rule(full: Path, thresholds: str, config: str | None, out: Path | None) -> None:
    """Re-apply the known-claim rule to a -full config under THRESHOLDS, with no model call.

    FULL is a release folder (all its -full configs, or the one --config names), a Parquet file or
    JSON lines (.jsonl, .jsonl.gz). Records of several base models are counted per base model.
    Prints the known/unknown counts; the last line is one JSON object with them (totals, and
    per base model under "base_models"). Records whose removed claims changed get
    rewrite_stale: true (their rewrite needs the rewriter again).
    """
    try:
        t = Thresholds.parse(thresholds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--thresholds") from None
    counts = RuleCounts()
    per_model: dict[str, RuleCounts] = {}
    records = []
    for r in read_full(full, config):
        model = str(r.get("base_model") or "")
        records.append(rederive(r, t, per_model.setdefault(model, RuleCounts())))
        rederive(r, t, counts)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("wb") as fh:
            for r in records:
                fh.write(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n")
        click.echo(f"wrote {len(records)} records to {out}")
    if len(per_model) > 1:
        for model, c in sorted(per_model.items()):
            click.echo(_counts_line(f"{model or '(no base_model)'}: ", t, c))
    click.echo(_counts_line("", t, counts))
    summary = {
        "thresholds": str(t),
        **counts.as_dict(),
        "base_models": {m: c.as_dict() for m, c in sorted(per_model.items())},
    }
    click.echo(orjson.dumps(summary).decode())


@recall.command("run")
@click.argument("keys", nargs=-1, required=True)
@click.option(
    "--trees",
    type=INPUT_FILE,
    default=None,
    help="a JSON-lines export of OASST1 message trees (else --hub)",
)
@click.option("--hub", is_flag=True, help="read OpenAssistant/oasst1 through `datasets`")
@click.option("--max-examples", type=int, default=0, show_default=True, help="0 = every kept pair")
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="a field of the recipe, e.g. --override j_e=3 (repeatable; values are JSON)",
)
def run(
    keys: tuple[str, ...], trees: Path | None, hub: bool, max_examples: int, overrides: tuple[str, ...]
) -> None:
    """Build Recall Rewrite headless for each base model KEY (registered with `ragsft base-models
    add`), in the project's instance; then releases/recall/ holds a -sft and a -full config per key.

    The model-independent stages (claims, audit, probes) are computed once: later keys find them
    in the LLM cache.
    """
    if (trees is None) == (not hub):
        raise click.UsageError("give exactly one of --trees FILE or --hub")
    fields: dict[str, Any] = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected FIELD=VALUE", param_hint="--override")
        try:
            fields[name] = orjson.loads(value)
        except orjson.JSONDecodeError:
            fields[name] = value  # a bare word: a string
    from ragsft_assets.recall import recipes as recall_recipes

    try:
        recall_recipes.resolve(None, fields)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--override") from None
    run_recall(list(keys), trees, hub, max_examples, fields)


def run_config(trees: Path | None, hub: bool, max_examples: int, overrides: dict[str, Any]) -> dict:
    """The recall_job run config of a headless run (every stage gets the recipe overrides)."""
    from ragsft_assets.defs.recall.assets import STAGES

    source = {"trees_path": str(trees) if trees else "", "hub": hub, "max_examples": max_examples}
    ops: dict[str, Any] = {"oasst_pairs": {"config": source}}
    for stage in STAGES:
        ops[stage.name] = {"config": {"overrides": overrides}}
    return {"ops": ops}


def run_recall(
    keys: list[str], trees: Path | None, hub: bool, max_examples: int, overrides: dict[str, Any]
) -> None:
    """Run recall_job once per key in the project's instance; exits 1 when a run fails."""
    import dagster as dg

    from ragsft_assets.cli.base_models import register_partition
    from ragsft_assets.cli.demo import ensure_instance_home
    from ragsft_assets.definitions import defs
    from ragsft_assets.defs.runs import RunInterrupted, execute_in_process_stoppable, process_tags
    from ragsft_assets.home import ragsft_home
    from ragsft_assets.recall import registry

    ensure_instance_home()
    for key in keys:
        try:
            registry.check_key(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEYS") from None
        register_partition(key)
    instance = dg.DagsterInstance.get()
    job = defs.resolve_job_def("recall_job")
    config = run_config(trees, hub, max_examples, overrides)
    for key in keys:
        click.echo(f"ragsft recall run: {key} (RAGSFT_HOME={ragsft_home()})")
        try:
            result = execute_in_process_stoppable(
                job, instance, partition_key=key, run_config=config, tags=process_tags()
            )
        except RunInterrupted as exc:
            click.echo(f"ragsft recall run: {exc}; finished LLM calls stay in the cache", err=True)
            raise SystemExit(exc.exit_code) from None
        for event in result.get_asset_materialization_events():
            rows = event.materialization.metadata.get("dagster/row_count")
            click.echo(f"  {event.asset_key.to_user_string():16s} rows={rows.value if rows else '-'}")
        if not result.success:
            click.echo(f"ragsft recall run: {key} FAILED (run {result.run_id})", err=True)
            raise SystemExit(1)
    click.echo(f"release: {ragsft_home() / 'releases' / 'recall'}")
