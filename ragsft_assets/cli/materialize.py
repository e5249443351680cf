"""``ragsft materialize``: materialize a selection of assets for one partition, in the project's instance.

What ``dagster asset materialize`` does, without having to set ``DAGSTER_HOME``: the run lands in
the instance that ``ragsft ui`` and ``ragsft demo`` use, dead runs of this host are cleaned first,
Ctrl-C cancels the run and frees its pool slots, and the run carries the partition's plan digest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import orjson

from ragsft_assets.cli.options import INPUT_FILE, verbose_option


def _run_config(config_json: str | None, config_files: tuple[Path, ...]) -> dict[str, Any]:
    """The run config: every ``--config`` file (YAML or JSON) merged in order, then ``--config-json``."""
    import yaml

    merged: dict[str, Any] = {}
    for path in config_files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise click.BadParameter(f"{path}: not YAML or JSON ({exc})", param_hint="--config") from None
        if not isinstance(data, dict):
            raise click.BadParameter(f"{path}: expected a mapping", param_hint="--config")
        _merge(merged, data)
    if config_json:
        try:
            data = orjson.loads(config_json)
        except orjson.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON ({exc})", param_hint="--config-json") from None
        if not isinstance(data, dict):
            raise click.BadParameter("expected a JSON object", param_hint="--config-json")
        _merge(merged, data)
    return merged


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    """Deep-merge ``new`` into ``into`` (a later source wins on the same leaf)."""
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def resolve_selection(selection: str) -> tuple[Any, list[Any]]:
    """The implicit job holding the assets SELECTION names, and their keys.

    SELECTION is Dagster's asset selection, comma-separated: ``'*qa/release'`` (the asset and
    everything upstream), ``'release,dataset_card'``, ``'+rag_sft'``.

    Raises:
        click.UsageError: when the selection names no asset, or assets of different partition sets.
    """
    import dagster as dg

    from ragsft_assets.definitions import defs

    repo = defs.get_repository_def()
    try:
        keys = sorted(dg.AssetSelection.from_coercible(selection.split(",")).resolve(repo.asset_graph))
    except Exception as exc:  # dagster raises several kinds for an unknown key or a bad clause
        raise click.UsageError(f"selection {selection!r}: {exc}") from None
    if not keys:
        raise click.UsageError(f"selection {selection!r} names no asset")
    job = repo.get_implicit_job_def_for_assets(keys)
    partition_sets = {repo.asset_graph.get(k).partitions_def for k in keys} - {None}
    if job is None or len(partition_sets) > 1:
        raise click.UsageError(
            f"selection {selection!r} mixes assets of different partition sets; select one family's"
            " assets (e.g. '*qa/release' for a qa_source key, '*release' for a snapshot)"
        )
    return job, keys


def _partition_set(job: Any, keys: list[Any]) -> Any:
    """The partitions definition of the selected assets (None when none is partitioned)."""
    for key in keys:
        pdef = job.asset_layer.get(key).partitions_def
        if pdef is not None:
            return pdef
    return None


@click.command()
@click.argument("selection")
@click.option("--partition", "partition", default=None, metavar="KEY", help="Partition key, e.g. sample.fr.")
@click.option("--config-json", default=None, metavar="JSON", help="Run config as a JSON object.")
@click.option(
    "--config",
    "config_files",
    multiple=True,
    type=INPUT_FILE,
    help="Run config file, YAML or JSON (repeatable; --config-json wins).",
)
@verbose_option
def materialize(
    selection: str,
    partition: str | None,
    config_json: str | None,
    config_files: tuple[Path, ...],
    verbose: bool,
) -> None:
    """Materialize the assets SELECTION names for partition KEY, in the project's instance.

    SELECTION is Dagster's asset selection: '*qa/release' builds qa/release and everything
    upstream of it, 'release,dataset_card' those two. The run is in the same instance as
    `ragsft ui` (no DAGSTER_HOME to set) and shows in its Runs list. The console shows one line per
    asset step; the run's page in the UI has every event (--verbose prints them here too).
    """
    from ragsft_assets.cli.console import quiet_third_party

    if not verbose:
        quiet_third_party()  # before any library of a model is imported
    import dagster as dg

    from ragsft_assets.cli.console import run_command_job
    from ragsft_assets.cli.instance import ensure_instance_home
    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.home import describe_home

    run_config = _run_config(config_json, config_files)
    if partition and "DAGSTER_HOME" not in os.environ:
        # a partition is registered in the home's instance: where there is no home, none is
        from ragsft_assets.cli.home_check import require_home

        require_home(f"materialize on {partition}")
    ensure_instance_home()
    job, keys = resolve_selection(selection)
    instance = dg.DagsterInstance.get()
    pdef = _partition_set(job, keys)
    if pdef is None and partition:
        raise click.UsageError(f"--partition {partition}: none of the selected assets is partitioned")
    if pdef is not None:
        if not partition:
            raise click.UsageError("the selected assets are partitioned: give --partition KEY")
        name = getattr(pdef, "name", None)
        if name and not instance.has_dynamic_partition(name, partition):
            hint = {
                "snapshot": "ragsft snapshots add",
                "qa_source": "ragsft sources add",
                "base_model": "ragsft base-models add",
            }.get(name, "")
            raise click.UsageError(
                f"{partition!r} is not a {name} partition of this instance ({instance.root_directory})"
                + (f"; add it with `{hint} {partition} ...`" if hint else "")
            )
    clean_before_run()  # a run killed earlier would hold its pool slot and block this one
    names = ", ".join(k.to_user_string() for k in keys)
    click.echo(
        f"ragsft materialize: {len(keys)} assets ({names}) on {partition or 'no partition'}"
        f" ({describe_home()})"
    )
    result = run_command_job(
        "materialize",
        job,
        instance,
        partition,
        verbose,
        run_config,
        asset_selection=keys,
        raise_on_error=False,
    )
    if verbose:  # the stage lines were not printed: the assets and what their rows are
        from ragsft_assets.cli.summary import UNITS

        width = max(len(k.to_user_string()) for k in keys)
        for event in result.get_asset_materialization_events():
            name = event.asset_key.to_user_string()
            rows = event.materialization.metadata.get("dagster/row_count")
            count = f"{rows.value:,} {UNITS.get(name, 'rows')}" if rows else "-"
            click.echo(f"  {name:{width}s}  {count}")
    if not result.success:
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
                click.echo(
                    f"  {event.step_key} failed: {event.step_failure_data.error.message.strip()}", err=True
                )
        raise SystemExit(1)
