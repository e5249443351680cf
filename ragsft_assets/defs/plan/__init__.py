"""The plan family: ``plan_forecast`` writes ``ragsft plan``'s forecast as metadata on a snapshot
partition, so a user sees calls, tokens, wall time and release rows before launching a run."""

import dagster as dg

from ragsft_assets.defs.partitions import snapshot_partitions


class PlanConfig(dg.Config):
    """The sample run of the forecast."""

    # input items (bridge pairs) of the sample run, as given; 0: the default, 50 grown to target_error
    sample: int = 0
    job: str = "full_job"  # the job to forecast
    gpus: int = 0  # replicas x GPUs per replica, for GPU-hours (0: not shown)
    slots: int = 0  # requests the fleet serves at once (0: from the roles' concurrency x URLs)
    # grow the sample until its spread gives this relative 95% half-width (-1: the default, 0.15
    # without a sample, none with one; 0: none)
    target_error: float = -1.0


@dg.asset(
    group_name="plan",
    partitions_def=snapshot_partitions,
    code_version="1",
    kinds={"json"},
    description=(
        "The cost forecast of a run on this snapshot: the corpus stage when missing, then the job "
        "on a seeded sample in a scratch home, extrapolated through the funnel (ragsft plan)."
    ),
)
def plan_forecast(context: dg.AssetExecutionContext, config: PlanConfig) -> dg.MaterializeResult:
    from ragsft_assets.defs.plan import record
    from ragsft_assets.plan.report import plan_table

    plan = record.make_plan(
        context.partition_key,
        job=config.job,
        sample=config.sample or None,
        slots=config.slots or None,
        gpus=config.gpus,
        target_error=None if config.target_error < 0 else config.target_error,
        log=context.log.info,
    )
    total = plan["total"]
    for warning in plan["warnings"]:
        context.log.warning(warning)
    return dg.MaterializeResult(
        metadata={
            "plan": dg.MetadataValue.json(plan),
            "table": dg.MetadataValue.md("```\n" + plan_table(plan) + "\n```"),
            "calls": int(total["calls"]),
            "tokens": int(total["prompt_tokens"] + total["completion_tokens"]),
            "wall_h": round(total["wall_s"] / 3600, 2),
            "digest": plan["digest"],
        }
    )


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.STARTED,
    monitor_all_code_locations=False,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Tags each started run of a partition that has a plan with that plan's digest "
    "(ragsft/plan), so `ragsft plan KEY --compare RUN_ID` compares the run with its forecast.",
)
def plan_tagger(context: dg.RunStatusSensorContext) -> None:
    from ragsft_assets.defs.plan import record

    run = context.dagster_run
    key = run.tags.get("dagster/partition")
    if not key or record.PLAN_TAG in run.tags or run.job_name == "plan_job":
        return
    tags = record.plan_tags(key)
    if tags:
        context.instance.add_run_tags(run.run_id, tags)
        context.log.info(f"run {run.run_id} of {key}: plan {tags[record.PLAN_TAG]}")


plan_job = dg.define_asset_job(
    "plan_job",
    selection=dg.AssetSelection.groups("plan"),  # snapshot-partitioned: inferred from plan_forecast
    description="Forecast a run before launching it (ragsft plan): writes the plan as metadata.",
)

defs = dg.Definitions(assets=[plan_forecast], jobs=[plan_job], sensors=[plan_tagger])
