"""``ragsft plan``: forecast a run's calls, tokens, wall time and release rows from a small sample."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import orjson

from ragsft_assets.cli.options import INPUT_FILE


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is written to stdout meanwhile to stderr: Python's ``sys.stdout`` and file
    descriptor 1 (the engines' native logs), restored afterwards."""
    sys.stdout.flush()
    saved = None
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptor 1 (an embedding host): Python's stdout only
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


@click.command()
@click.argument("key")
@click.option(
    "--sample",
    "sample",
    type=int,
    default=None,
    help="Input items of the sample run, kept as given (after a pilot of a quarter, from 20). Default:"
    " 50, grown until the plan's own 95% half-width is 15% (--target-error).",
)
@click.option("--job", default=None, help="The job to forecast (default: the partition kind's main job).")
@click.option(
    "--config", "config_path", type=INPUT_FILE, help="The run's config (YAML), as the launchpad takes it."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option(
    "--slots",
    type=int,
    help="Requests the fleet serves at once (default: the roles' per-URL concurrency x URLs).",
)
@click.option(
    "--gpus", type=int, default=0, help="GPUs of the fleet (replicas x GPUs per replica), for GPU-hours."
)
@click.option(
    "--budget-calls", type=int, help="Warn when the run would make more calls (default: the roles')."
)
@click.option(
    "--budget-tokens", type=int, help="Warn when the run would use more tokens (default: the roles')."
)
@click.option(
    "--target-error",
    type=float,
    help="Grow the sample until its own spread gives this 95% half-width (relative, e.g. 0.15)"
    " on the total calls and tokens and on each stage of 5% of the tokens. Default: 0.15 without"
    " --sample, none with it; 0: none.",
)
@click.option(
    "--max-sample",
    type=int,
    default=2000,
    show_default=True,
    help="The largest sample --target-error grows to.",
)
@click.option("--compare", "run_id", default=None, help="Show forecast against actual for a finished run.")
def plan(
    key: str,
    sample: int | None,
    job: str | None,
    config_path: Path | None,
    as_json: bool,
    slots: int | None,
    gpus: int,
    budget_calls: int | None,
    budget_tokens: int | None,
    target_error: float | None,
    max_sample: int,
    run_id: str | None,
) -> None:
    """Forecast the run of JOB on partition KEY (a snapshot, a qa_source or a base model).

    Runs the missing deterministic stages (a snapshot's corpus), then the job on a seeded sample of
    input items in a scratch home (its LLM calls go to the shared cache, so the real run reuses
    them), and extrapolates each stage through the funnel. Each figure has a 95% range from the
    spread between the sampled items, and the plan says its expected error and the sample a +/-15%
    forecast needs; by default the sample grows to it (from 50). Two samples of different sizes
    fit the fleet's load curve, from which the wall time is read at the run's load. The plan is
    saved in $RAGSFT_HOME/plans/KEY/plan.json; runs started by `ragsft` commands carry it in their
    tags.
    """
    import yaml

    from ragsft_assets.cli.demo import ensure_instance_home
    from ragsft_assets.cli.home_check import require_home
    from ragsft_assets.defs.plan import record

    require_home("plan")  # the partition's inputs are in the home: none there, no instance made
    ensure_instance_home()
    if run_id:
        rows = record.compare_run(key, run_id)
        if as_json:
            click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        else:
            from ragsft_assets.plan.report import compare_table

            click.echo(compare_table(rows))
        return
    run_config = yaml.safe_load(config_path.read_text()) if config_path else {}
    try:
        # everything but the plan goes to stderr (the engines' and Dagster's logs, C-level prints
        # included), so `--json` output is one JSON object alone on stdout
        with stdout_to_stderr():
            result = record.make_plan(
                key,
                job=job,
                sample=sample,
                run_config=run_config or {},
                slots=slots,
                gpus=gpus,
                budgets={"budget_calls": budget_calls, "budget_tokens": budget_tokens},
                target_error=target_error,
                max_sample=max_sample,
                log=lambda m: click.echo(m, err=True),
            )
    except (ValueError, RuntimeError) as exc:
        click.echo(f"ragsft plan: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        from ragsft_assets.plan.report import plan_table

        click.echo(plan_table(result))
