"""``ragsft runs``: dead runs (killed mid-step) found and cleaned, so they never block the next run."""

from __future__ import annotations

import click


def clean_before_run(echo=click.echo) -> None:
    """Clean dead runs of this host before an in-process run starts, and say what was cleaned."""
    import dagster as dg

    from ragsft_assets.defs.runs import clean_dead_runs, report_lines

    dead, ended = clean_dead_runs(dg.DagsterInstance.get())
    for line in report_lines(dead, ended):
        echo(f"ragsft: {line}")


@click.group()
def runs() -> None:
    """Runs of the project's instance."""


@runs.command()
@click.option("--dry-run", is_flag=True, help="List what would be cleaned; change nothing.")
def clean(dry_run: bool) -> None:
    """Mark unfinished runs whose process is known to be gone failed (canceled if CANCELING), free their slots and those of ended runs.

    Also removes the temporary files and folders that dead processes of this host left under the
    project home (a release set aside by a killed swap is put back where its folder is missing).
    """
    import os

    import dagster as dg

    from ragsft_assets import leftovers
    from ragsft_assets.cli.instance import ensure_instance_home
    from ragsft_assets.defs.runs import clean_dead_runs, report_lines
    from ragsft_assets.home import ragsft_home

    if "DAGSTER_HOME" not in os.environ:  # the instance is the home's: none there, none made
        from ragsft_assets.cli.home_check import require_home

        require_home("clean")
    ensure_instance_home()
    dead, ended = clean_dead_runs(dg.DagsterInstance.get(), dry_run=dry_run)
    lines = report_lines(dead, ended, dry_run=dry_run)
    for line in lines:
        click.echo(line)
    if not lines:
        click.echo("no dead runs and no slots held by ended runs")
    files = leftovers.sweep(ragsft_home(), dry_run=dry_run)
    for line in files:
        click.echo(line)
    if not files:
        click.echo(f"no temporary files of dead processes under {ragsft_home()}")
