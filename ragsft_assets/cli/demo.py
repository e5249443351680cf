"""``ragsft demo``: materialize the whole graph on the bundled sample snapshot, in the shared instance."""

from __future__ import annotations

import os
import time

import click

from ragsft_assets.home import dagster_home, ragsft_home

SAMPLE_KEY = "sample.fr"


def ensure_instance_home() -> str:
    """Point DAGSTER_HOME at the project's instance (creating it) unless already set."""
    path = dagster_home()
    path.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DAGSTER_HOME", str(path))
    cfg = path / "dagster.yaml"
    if not cfg.exists():
        from ragsft_assets.cli.snapshots import write_instance_config

        write_instance_config(path)
    return str(path)


@click.command()
@click.option("--job", default="full_job", show_default=True, help="Which job to run.")
@click.option("--partition", default=SAMPLE_KEY, show_default=True, help="Snapshot partition key.")
@click.option("--max-pairs", type=int, default=None, help="Cap the bridge pairs (quick runs).")
def demo(job: str, partition: str, max_pairs: int | None) -> None:
    """Add the sample snapshot, run JOB on it with the embedded model, and say where things are."""
    import dagster as dg

    from ragsft_assets.cli.snapshots import add_snapshot

    ensure_instance_home()
    instance = dg.DagsterInstance.get()
    if partition == SAMPLE_KEY:
        add_snapshot(SAMPLE_KEY, sample=True, instance=instance, exist_ok=True)
    from ragsft_assets.definitions import defs

    job_def = defs.resolve_job_def(job)
    run_config = {}
    if max_pairs is not None:
        run_config = {"ops": {"bridge_pairs": {"config": {"max_pairs": max_pairs}}}}
    click.echo(f"ragsft demo: running {job} on partition {partition} (home {ragsft_home()})")
    t0 = time.monotonic()
    result = job_def.execute_in_process(partition_key=partition, instance=instance, run_config=run_config)
    took = time.monotonic() - t0
    status = "succeeded" if result.success else "FAILED"
    click.echo(f"ragsft demo: run {result.run_id} {status} in {took:.0f}s")
    home = ragsft_home()
    click.echo(f"  artifacts: {home / 'assets' / partition}")
    click.echo(f"  release:   {home / 'releases' / partition}")
    click.echo(f"  instance:  {os.environ['DAGSTER_HOME']}")
    click.echo("  open the UI: .venv/bin/dagster dev   (then http://127.0.0.1:3000)")
    if not result.success:
        raise SystemExit(1)
