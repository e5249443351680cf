"""``ragsft demo``: materialize the whole graph on the bundled sample snapshot, in the shared instance."""

from __future__ import annotations

import logging
import time

import click

from ragsft_assets.cli.instance import ensure_instance_home
from ragsft_assets.home import dagster_home, ragsft_home

SAMPLE_KEY = "sample.fr"


@click.command()
@click.option("--job", default="full_job", show_default=True, help="Which job to run.")
@click.option("--partition", default=SAMPLE_KEY, show_default=True, help="Snapshot partition key.")
@click.option("--max-pairs", type=int, default=None, help="Bridge pairs sent to question generation.")
def demo(job: str, partition: str, max_pairs: int | None) -> None:
    """Add the sample snapshot, run JOB on it with the configured models, and say where things are.

    With the default resources the models are the embedded CPU model (SmolLM2-135M-Instruct):
    the run completes anywhere, but expect few surviving questions from so small a model.
    """
    import dagster as dg

    from ragsft_assets.cli.snapshots import install_snapshot, register_partition, sample_folder

    ensure_instance_home()
    if partition == SAMPLE_KEY:
        install_snapshot(SAMPLE_KEY, sample_folder())
    register_partition(partition)
    instance = dg.DagsterInstance.get()

    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.defs.runs import RunInterrupted, execute_in_process_stoppable, process_tags

    # A run killed earlier (SIGKILL, OOM) would still hold its pool slot and block this one forever.
    clean_before_run()

    from ragsft_assets.definitions import defs
    from ragsft_assets.defs.plan.record import plan_tags

    job_def = defs.resolve_job_def(job)
    run_config: dict = {}
    if max_pairs is not None:
        run_config = {"ops": {"question_drafts": {"config": {"max_pairs": max_pairs}}}}
    click.echo(f"ragsft demo: running {job} on partition {partition} (RAGSFT_HOME={ragsft_home()})")
    t0 = time.monotonic()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the pool-wait WARNING on stderr
    try:
        # SIGINT/SIGTERM cancel the run and free its slots (dagster alone ignores them on a pool wait)
        result = execute_in_process_stoppable(
            job_def,
            instance,
            partition_key=partition,
            run_config=run_config,
            tags={**process_tags(), **plan_tags(partition)},  # the plan this run was forecast by
        )
    except RunInterrupted as exc:
        click.echo(f"ragsft demo: {exc}; its slots are freed, finished LLM calls stay in the cache", err=True)
        raise SystemExit(exc.exit_code) from None
    took = time.monotonic() - t0
    click.echo(
        f"ragsft demo: run {result.run_id} {'succeeded' if result.success else 'FAILED'} in {took:.0f}s"
    )
    for event in result.get_asset_materialization_events():
        md = event.materialization.metadata
        rows = md.get("dagster/row_count")
        click.echo(f"  {event.asset_key.to_user_string():20s} rows={rows.value if rows else '-'}")
    digests = [
        e.materialization.metadata["root_digest"].value
        for e in result.get_asset_materialization_events()
        if "root_digest" in e.materialization.metadata
    ]
    home = ragsft_home()
    click.echo(f"  artifacts: {home / 'assets' / partition}")
    for digest in digests:  # what `ragsft verify --digest` checks the release against later
        click.echo(f"  release root digest: {digest}")
    click.echo(f"  release:   {home / 'releases' / partition}")
    click.echo(f"  instance:  {dagster_home()}")
    click.echo("  open the UI on the same instance: .venv/bin/ragsft ui   (http://127.0.0.1:3000)")
    click.echo(f"  why is a row there: .venv/bin/ragsft explain ID --partition {partition}")
    if not result.success:
        raise SystemExit(1)
