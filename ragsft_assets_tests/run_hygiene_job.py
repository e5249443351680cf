"""Test-only: a one-asset job in the ``gpu`` pool, run in a subprocess that the tests SIGKILL mid-step.

``python -m ragsft_assets_tests.run_hygiene_job MARKER HOLD_S`` executes the job in process on
``$DAGSTER_HOME``'s instance with the CLI's process tags; the step writes MARKER once it holds the
pool slot, then sleeps HOLD_S seconds (the parent kills it there). A third argument (any) runs it
the way the CLI does: stoppable by SIGINT/SIGTERM, with the pool-wait WARNING.
"""

import logging
import sys
import time
from pathlib import Path

import dagster as dg


@dg.asset(pool="gpu", config_schema={"marker": str, "hold_s": float})
def gpu_step(context: dg.AssetExecutionContext) -> None:
    Path(context.op_config["marker"]).write_text(context.run_id, encoding="utf-8")
    # short slices, like a stage's LLM calls: an interrupt lands between two of them
    end = time.monotonic() + context.op_config["hold_s"]
    while time.monotonic() < end:
        time.sleep(0.1)


gpu_job = dg.define_asset_job("gpu_job", selection=[gpu_step])
defs = dg.Definitions(assets=[gpu_step], jobs=[gpu_job])


def run(
    instance: dg.DagsterInstance, marker: str, hold_s: float, stoppable: bool = False
) -> dg.ExecuteInProcessResult:
    """Run the job in process with the CLI's process tags, after the CLI's dead-run clean-up.

    ``stoppable`` runs it the way the CLI does (SIGINT/SIGTERM cancel it, pool-wait WARNING).
    """
    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.defs.runs import execute_in_process_stoppable, process_tags

    clean_before_run()
    job = defs.resolve_job_def("gpu_job")
    kwargs = {
        "run_config": {"ops": {"gpu_step": {"config": {"marker": marker, "hold_s": hold_s}}}},
        "tags": process_tags(),
    }
    if stoppable:
        return execute_in_process_stoppable(job, instance, pool_poll_s=0.5, **kwargs)
    return job.execute_in_process(instance=instance, **kwargs)


if __name__ == "__main__":
    from ragsft_assets.defs.runs import RunInterrupted

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with dg.DagsterInstance.get() as inst:
        try:
            result = run(inst, sys.argv[1], float(sys.argv[2]), stoppable=len(sys.argv) > 3)
        except RunInterrupted as exc:
            print(f"ragsft: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
    sys.exit(0 if result.success else 1)
