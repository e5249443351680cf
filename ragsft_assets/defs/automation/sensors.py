"""New-snapshot sensor, monthly schedule and run-failure reporter."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import dagster as dg

from ragsft_assets.automation.discovery import Listing, plan_tick, read_waiting, scan_snapshots
from ragsft_assets.automation.notify import WEBHOOK_ENV, FailureReport, send_report
from ragsft_assets.defs.jobs import full_job
from ragsft_assets.defs.partitions import SNAPSHOT_PARTITIONS_NAME, snapshot_partitions
from ragsft_assets.release.diff import publish_tags  # RAGSFT_PUBLISH=review: promoted after review

# Runs of the full job are long (LLM steps): a few per tick is plenty, the rest come next tick.
DEFAULT_MAX_RUNS_PER_TICK = 4
MAX_RUNS_ENV = "RAGSFT_SENSOR_MAX_RUNS_PER_TICK"
UI_URL_ENV = "RAGSFT_UI_URL"


def max_runs_per_tick() -> int:
    return int(os.environ.get(MAX_RUNS_ENV, DEFAULT_MAX_RUNS_PER_TICK))


def list_available_snapshots(seen: Mapping[str, str]) -> Listing:
    """The ready snapshot keys the source offers now (one cheap listing, no data read), and the
    fingerprints of the folders still being copied.

    Local folders are those under ``$RAGSFT_HOME/snapshots`` that ``snapshots add`` completed (its
    manifest, written last) or whose files are unchanged since the previous tick (``seen``, from the
    cursor); names that are not snapshot keys are left out. With ``RAGSFT_SNAPSHOT_SOURCE=hub`` the
    hub's configs for ``RAGSFT_HUB_LANGUAGES`` are added.
    """
    from ragsft_assets.resources.snapshots import SnapshotSource

    return scan_snapshots(SnapshotSource().root, seen)


def run_key(key: str) -> str:
    """One run per snapshot and sensor: a repeated tick with the same key starts nothing."""
    return f"snapshot:{key}"


def build_new_snapshot_sensor(
    lister: Callable[[Mapping[str, str]], Listing] = list_available_snapshots,
    name: str = "new_snapshot_sensor",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that adds each new snapshot as a partition and requests ``full_job`` for it."""

    @dg.sensor(
        name=name,
        job=full_job,
        minimum_interval_seconds=15 * 60,
        default_status=default_status,
        description=(
            "Lists the snapshots the source offers; for each one that is not yet a partition, adds the "
            f"partition and requests full_job (at most ${MAX_RUNS_ENV} or {DEFAULT_MAX_RUNS_PER_TICK} "
            "per tick). The cursor holds the keys already handled."
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        partitions = context.instance.get_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME)
        ready, waiting = lister(read_waiting(context.cursor))  # a hand copy: unchanged over two ticks
        plan = plan_tick(ready, partitions, context.cursor, max_runs_per_tick(), waiting)
        if waiting:
            context.log.info(
                f"still being copied (or first seen), taken once unchanged: {', '.join(waiting)}"
            )
        if plan.already_partitions:
            context.log.info(f"already partitions, not requested: {', '.join(plan.already_partitions)}")
        if not plan.to_request:
            return dg.SensorResult(skip_reason=dg.SkipReason("no new snapshot"), cursor=plan.cursor)
        if plan.remaining:
            context.log.info(f"{plan.remaining} more new snapshot(s) wait for the next tick")
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=run_key(key), partition_key=key, tags={"ragsft/trigger": name, **publish_tags()}
                )
                for key in plan.to_request
            ],
            dynamic_partitions_requests=[snapshot_partitions.build_add_request(plan.to_request)],
            cursor=plan.cursor,
        )

    return _sensor


def build_monthly_schedule(
    lister: Callable[[Mapping[str, str]], Listing] = list_available_snapshots,
    name: str = "monthly_snapshot_schedule",
    cron_schedule: str = "0 4 2 * *",
) -> dg.ScheduleDefinition:
    """The same check on a calendar (the 2nd of each month, 04:00), off by default.

    A schedule cannot return partition requests, so it adds the new partitions itself before
    returning the run requests; "not yet a partition" is its memory, and ``run_key`` guards repeats.
    """

    @dg.schedule(
        name=name,
        job=full_job,
        cron_schedule=cron_schedule,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Monthly: add every new snapshot as a partition and request full_job for it.",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        partitions = context.instance.get_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME)
        # no cursor: folders `snapshots add` completed (its manifest) and hub configs only
        plan = plan_tick(lister({})[0], partitions, None, max_runs_per_tick())
        if not plan.to_request:
            return dg.SkipReason("no new snapshot")
        context.instance.add_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME, plan.to_request)
        context.log.info(f"added partitions {', '.join(plan.to_request)}")
        return [
            dg.RunRequest(
                run_key=run_key(key), partition_key=key, tags={"ragsft/trigger": name, **publish_tags()}
            )
            for key in plan.to_request
        ]

    return _schedule


def failure_report(context: dg.RunFailureSensorContext) -> FailureReport:
    """The report of a failed run: job, run id, partition, message and failed steps."""
    run = context.dagster_run
    ui = os.environ.get(UI_URL_ENV)
    return FailureReport(
        job=run.job_name,
        run_id=run.run_id,
        partition=run.tags.get("dagster/partition"),
        message=(context.failure_event.message or "")[:2000],
        failed_steps=sorted({e.step_key for e in context.get_step_failure_events() if e.step_key}),
        ui_url=f"{ui.rstrip('/')}/runs/{run.run_id}" if ui else None,
    )


@dg.run_failure_sensor(
    name="run_failure_reporter",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=f"Logs every failed run and POSTs a JSON report to ${WEBHOOK_ENV} when it is set.",
)
def run_failure_reporter(context: dg.RunFailureSensorContext) -> None:
    report = failure_report(context)
    context.log.error(report.text())
    url = os.environ.get(WEBHOOK_ENV)
    if not url:
        return
    # A broken webhook must not make the sensor fail and replay every failure: log and go on. The
    # line shows the hook masked (a Slack-style hook's path is its secret).
    delivered, line = send_report(url, report)
    (context.log.info if delivered else context.log.error)(line)


new_snapshot_sensor = build_new_snapshot_sensor()
monthly_snapshot_schedule = build_monthly_schedule()
