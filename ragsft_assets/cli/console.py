"""The console of a run that ``ragsft demo`` or ``ragsft materialize`` starts: one line per stage.

By default Dagster's console logger is set to ERROR through the run config (``loggers.console``),
so its DEBUG event log no longer fills the terminal; every event and log message still goes to
the instance, and the run's page in the UI shows them all. ``--verbose`` leaves the logger as
Dagster sets it. The lines here come from the instance's own event listener: each asset step
prints one line when it ends (rows, LLM calls, seconds), and on a terminal the line of the running
step shows its calls and ETA as they advance. Warnings are counted per stage and named once at the
end; a failed check or step is printed when it happens.

The third-party noise of an embedded model's start (vLLM's INFO and WARNING lines, among them one
"Attempted to load weight" per tensor, torch's NUMA notice, progress bars of the weight
conversion, FutureWarnings) is quieted by logging levels and environment variables set before the
model is imported, never by dropping what the run itself logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TextIO

# Set only where the user has not set them: a user's own value always wins.
QUIET_ENV: dict[str, str] = {
    "VLLM_LOGGING_LEVEL": "ERROR",  # vLLM's start-up INFO/WARNING lines ("Attempted to load weight" ...)
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # torch's C++ warnings ("NUMA binding: Using MEMBIND policy ...")
    "TQDM_DISABLE": "1",  # the GGUF conversion's progress bars (tqdm's own switch)
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",  # the tokenizers fork warning
}

# Library loggers whose WARNING lines say nothing a user acts on in a demo run.
QUIET_LOGGERS = ("vllm", "torch", "transformers", "huggingface_hub", "filelock")


def quiet_third_party(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Quiet the libraries' console noise before they are imported; returns the variables it set."""
    env = os.environ if environ is None else environ
    applied = {k: v for k, v in QUIET_ENV.items() if k not in env}
    env.update(applied)
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    # No filter of Dagster's Preview/Beta notices: the definitions use no preview API, so nothing
    # triggers one (test_lineage_checks loads them with every warning an error); a new one shows.
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    return applied


def console_run_config(run_config: dict[str, Any], verbose: bool) -> dict[str, Any]:
    """``run_config`` with Dagster's console logger at ERROR, unless verbose or the user set loggers."""
    if verbose or "loggers" in run_config:
        return run_config
    return {**run_config, "loggers": {"console": {"config": {"log_level": "ERROR"}}}}


_CALLS = re.compile(r"(?P<done>\d+)/(?P<total>\d+) (?P<unit>calls|texts)\b.*?(?P<eta>ETA (?:n/a|\d+s))")


@dataclass
class _Stage:
    name: str
    started: float
    calls: int = 0
    rows: dict[str, int | None] = field(default_factory=dict)  # asset -> row count (None: not a table)
    progress: str = ""


@dataclass
class StageLines:
    """The console lines of one run, from its events (Dagster-free; :func:`listen` feeds it).

    Args:
        echo: writes one finished line.
        live: a terminal: the running stage's line is rewritten in place as its calls advance.
        stream: where live lines are rewritten (default stdout).
        units: what one row of an asset is ("abstracts", "edges", "dropped candidates"...), so that
            every number on a line says what it counts.
    """

    echo: Callable[[str], None]
    live: bool = False
    stream: TextIO | None = None
    units: dict[str, str] = field(default_factory=dict)
    width: int = 26
    stages: dict[str, _Stage] = field(default_factory=dict)
    warnings: Counter = field(default_factory=Counter)
    first_warning: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    warned_checks: dict[str, list[str]] = field(default_factory=dict)  # asset -> checks that warned
    done: int = 0

    def step_started(self, step: str, at: float) -> None:
        self.stages[step] = stage = _Stage(step, at, progress="running")
        self._live(stage)  # on a terminal: which stage runs, before its first progress line

    def log(self, step: str | None, level: int, message: str) -> None:
        if step is None:
            return
        stage = self.stages.get(step)
        if level >= logging.WARNING:
            self.warnings[step] += 1
            self.first_warning.setdefault(step, message.strip().splitlines()[0][:160] if message else "")
            return
        m = _CALLS.search(message)
        if stage is not None and m:
            stage.progress = f"{m['done']}/{m['total']} {m['unit']} {m['eta']}"
            if m["done"] == m["total"] and m["unit"] == "calls":
                stage.calls += int(m["total"])
            self._live(stage)

    def materialized(self, step: str, asset: str, rows: int | None) -> None:
        stage = self.stages.setdefault(step, _Stage(step, time.monotonic()))
        stage.rows[asset] = rows

    def check_failed(self, step: str, check: str, asset: str, severity: str, partition: str | None) -> None:
        """A failed ERROR check is printed at once (it blocks what follows); a WARN one is named
        with the others of its asset at the end."""
        if severity == "WARN":
            self.warned_checks.setdefault(asset, []).append(check)
            return
        where = f" [{partition}]" if partition else ""
        self._clear_live()
        self.echo(f"  ! check {check} on {asset}{where} failed ({severity})")

    def step_ended(self, step: str, ok: bool, duration_s: float | None, error: str = "") -> None:
        stage = self.stages.get(step)
        if stage is None:
            return
        if not stage.rows and ok:
            return  # an asset check's step: its failures are printed when they happen
        self.done += 1
        took = duration_s if duration_s is not None else 0.0
        parts = [f"{n:,} {self.units.get(a, 'rows')}" for a, n in stage.rows.items() if n is not None]
        if stage.calls:
            parts.append(f"{stage.calls} LLM calls")
        if self.warnings.get(step):
            parts.append(f"{self.warnings[step]} warning(s)")
        status = f"{took:5.0f}s" if ok else "FAILED"
        name = ", ".join(stage.rows) or step
        self._clear_live()
        self.echo(f"  {name:<{self.width}} {status}  {'; '.join(parts)}".rstrip())
        if not ok:
            self.failed.append(step)
            if error:
                self.echo(f"    {error.strip().splitlines()[0][:300]}")

    def warning_lines(self) -> list[str]:
        """One line per stage that logged warnings: how many and the first one."""
        lines = [
            f"  {step}: {n} warning(s), first: {self.first_warning.get(step, '')}"
            for step, n in sorted(self.warnings.items())
        ]
        lines += [
            f"  {asset}: {len(checks)} check(s) warn: {', '.join(checks)}"
            for asset, checks in sorted(self.warned_checks.items())
        ]
        return lines

    def _live(self, stage: _Stage) -> None:
        if not self.live:
            return
        out = self.stream or sys.stdout
        out.write(f"\r  {stage.name:<{self.width}} ... {stage.progress}\x1b[K")
        out.flush()

    def _clear_live(self) -> None:
        if self.live:
            out = self.stream or sys.stdout
            out.write("\r\x1b[K")
            out.flush()


def listen(instance: Any, run_id: str, lines: StageLines) -> None:
    """Feed ``lines`` from the events the instance stores for ``run_id`` (its event listener)."""

    def on_event(entry: Any) -> None:
        # the console must never break the run: the UI has every event anyway
        with contextlib.suppress(Exception):
            _dispatch(entry, lines)

    instance.add_event_listener(run_id, on_event)


def _dispatch(entry: Any, lines: StageLines) -> None:
    event = entry.dagster_event
    if event is None:
        lines.log(entry.step_key, entry.level, entry.user_message or "")
        return
    kind = event.event_type_value
    step = event.step_key or entry.step_key
    data = event.event_specific_data
    if kind == "STEP_START":
        lines.step_started(step, entry.timestamp)
    elif kind == "ASSET_MATERIALIZATION":
        mat = data.materialization
        rows = mat.metadata.get("dagster/row_count")
        lines.materialized(step, mat.asset_key.to_user_string(), rows.value if rows is not None else None)
    elif kind == "ASSET_CHECK_EVALUATION" and not data.passed:
        lines.check_failed(
            step,
            data.check_name,
            data.asset_key.to_user_string(),
            getattr(data.severity, "value", str(data.severity)),
            check_partition(data),
        )
    elif kind == "STEP_SUCCESS":
        lines.step_ended(step, True, data.duration_ms / 1000 if data.duration_ms else None)
    elif kind == "STEP_FAILURE":
        error = data.error.message if data and data.error else ""
        lines.step_ended(step, False, None, error)


def check_partition(evaluation: Any) -> str | None:
    """The partition a check evaluation checked: Dagster's own field where it is set (a partitioned
    check, a preview feature the project does not use), else the ``partition`` our results carry
    in their metadata (``defs.check_results``)."""
    if getattr(evaluation, "partition", None):
        return evaluation.partition
    value = (getattr(evaluation, "metadata", None) or {}).get("partition")
    return getattr(value, "value", value)


def execute_with_console(
    job_def: Any, instance: Any, *, verbose: bool, run_config: dict[str, Any], **kwargs: Any
):  # noqa: ANN201 - a dg.ExecuteInProcessResult
    """Run ``job_def`` in process (Ctrl-C stops it, see ``execute_in_process_stoppable``), printing
    one line per stage unless ``verbose``, where Dagster's own console log is left as it is.

    Returns:
        (the run's result, the :class:`StageLines` that printed its stages).
    """
    import click
    from dagster._core.utils import make_new_run_id

    from ragsft_assets.cli.summary import UNITS
    from ragsft_assets.defs.runs import execute_in_process_stoppable

    run_id = make_new_run_id()
    lines = StageLines(echo=click.echo, live=sys.stdout.isatty() and not verbose, units=UNITS)
    if not verbose:
        listen(instance, run_id, lines)
    result = execute_in_process_stoppable(
        job_def, instance, run_id=run_id, run_config=console_run_config(run_config, verbose), **kwargs
    )
    return result, lines


def run_command_job(
    command: str,
    job_def: Any,
    instance: Any,
    partition: str | None,
    verbose: bool,
    run_config: dict[str, Any],
    **kwargs: Any,
):  # noqa: ANN201 - a dg.ExecuteInProcessResult
    """``execute_with_console`` as ``ragsft <command>`` runs a job on ``partition``: the run is
    tagged with this process and the plan it was forecast by, then prints its outcome
    (``ragsft <command>: run <id> succeeded|FAILED in <s>s``) and its warning lines.

    Raises:
        SystemExit: the run was interrupted (SIGINT/SIGTERM cancel it and free its slots, which
            Dagster alone ignores on a pool wait); its exit code, after a line saying so.
    """
    import click

    from ragsft_assets.defs.plan.record import plan_tags
    from ragsft_assets.defs.runs import RunInterrupted, process_tags

    tags = {**process_tags(), **(plan_tags(partition) if partition else {})}
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the pool-wait WARNING on stderr
    t0 = time.monotonic()
    try:
        result, lines = execute_with_console(
            job_def,
            instance,
            verbose=verbose,
            run_config=run_config,
            partition_key=partition,
            tags=tags,
            **kwargs,
        )
    except RunInterrupted as exc:
        click.echo(
            f"ragsft {command}: {exc}; its slots are freed, finished LLM calls stay in the cache", err=True
        )
        raise SystemExit(exc.exit_code) from None
    took = time.monotonic() - t0
    click.echo(
        f"ragsft {command}: run {result.run_id} {'succeeded' if result.success else 'FAILED'} in {took:.0f}s"
    )
    for line in lines.warning_lines():
        click.echo(line)
    return result
