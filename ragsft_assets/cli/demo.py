"""``ragsft demo``: materialize the whole graph on the bundled sample snapshot, in the shared instance."""

from __future__ import annotations

import os
from typing import Any

import click

from ragsft_assets.cli.instance import ensure_instance_home
from ragsft_assets.cli.options import verbose_option
from ragsft_assets.cli.summary import read_summary, summary_lines
from ragsft_assets.home import assets_dir, dagster_home, describe_home, ragsft_home
from ragsft_assets.release import layout

SAMPLE_KEY = "sample.fr"


def _generator_is_embedded() -> bool:
    """Whether the generator role is the default embedded 135M model (no RAGSFT_GENERATOR_* set)."""
    backend = os.environ.get("RAGSFT_GENERATOR_BACKEND", "embedded")
    return backend == "embedded" and not os.environ.get("RAGSFT_GENERATOR_MODEL")


def demo_run_config(job_def: Any, max_pairs: int | None) -> dict[str, Any]:
    """The run config of ``--max-pairs N``: N pairs drawn by ``bridge_pairs`` and N drafted, for
    the stages of the two that ``job_def`` runs (the sample's snapshot.json draws only 24)."""
    if max_pairs is None:
        return {}
    ops = [name for name in ("bridge_pairs", "question_drafts") if name in job_def.graph.node_dict]
    return {"ops": {name: {"config": {"max_pairs": max_pairs}} for name in ops}}


@click.command()
@click.option("--job", default="full_job", show_default=True, help="Which job to run.")
@click.option("--partition", default=SAMPLE_KEY, show_default=True, help="Snapshot partition key.")
@click.option(
    "--max-pairs", type=int, help="Bridge pairs drawn and sent to question generation (the sample draws 24)."
)
@verbose_option
def demo(job: str, partition: str, max_pairs: int | None, verbose: bool) -> None:
    """Add the sample snapshot, run JOB on it with the configured models, and say where things are.

    With the default resources the models are the embedded CPU model (SmolLM2-135M-Instruct):
    the run completes anywhere, but expect few surviving questions from so small a model.
    The console shows one line per stage and a closing funnel; every event and log line of the
    run is in its page of the UI (`ragsft ui`), and --verbose prints them here too.
    """
    from ragsft_assets.cli.console import quiet_third_party

    if not verbose:
        quiet_third_party()  # before any library of the model is imported
    import dagster as dg

    from ragsft_assets.cli.snapshots import install_snapshot, register_partition, sample_folder

    ensure_instance_home()
    if partition == SAMPLE_KEY:
        install_snapshot(SAMPLE_KEY, sample_folder())
    register_partition(partition)
    instance = dg.DagsterInstance.get()

    from ragsft_assets.cli.console import run_command_job
    from ragsft_assets.cli.runs import clean_before_run

    # A run killed earlier (SIGKILL, OOM) would still hold its pool slot and block this one forever.
    clean_before_run()

    from ragsft_assets.definitions import defs

    job_def = defs.resolve_job_def(job)
    run_config = demo_run_config(job_def, max_pairs)
    click.echo(f"ragsft demo: running {job} on partition {partition} ({describe_home()})")
    result = run_command_job("demo", job_def, instance, partition, verbose, run_config)
    home = ragsft_home()
    released = sorted(layout.read_configs(home / "releases" / partition)) if result.success else []
    summary = read_summary(assets_dir(home), partition, released)
    for line in summary_lines(summary, small_model=_generator_is_embedded(), cli=".venv/bin/ragsft"):
        click.echo(line)
    digests = [
        e.materialization.metadata["root_digest"].value
        for e in result.get_asset_materialization_events()
        if "root_digest" in e.materialization.metadata
    ]
    click.echo(f"  artifacts: {home / 'assets' / partition}")
    for digest in digests:  # what `ragsft verify --digest` checks the release against later
        click.echo(f"  release root digest: {digest}")
    click.echo(f"  release:   {home / 'releases' / partition}  (configs: {', '.join(released) or 'none'})")
    click.echo(f"  instance:  {dagster_home()}")
    click.echo(
        f"  open the UI on the same instance: .venv/bin/ragsft ui   (http://127.0.0.1:3000, run {result.run_id[:8]})"
    )
    if not result.success:
        raise SystemExit(1)
