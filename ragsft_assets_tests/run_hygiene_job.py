"""Test-only: a one-asset job in the ``gpu`` pool, run in a subprocess that the tests SIGKILL mid-step.

``python -m ragsft_assets_tests.run_hygiene_job MARKER HOLD_S`` executes the job in process on
``$DAGSTER_HOME``'s instance with the CLI's process tags; the step writes MARKER once it holds the
pool slot, then sleeps HOLD_S seconds (the parent kills it there).
"""

import sys
import time
from pathlib import Path

import dagster as dg


@dg.asset(pool="gpu", config_schema={"marker": str, "hold_s": float})
def gpu_step(context: dg.AssetExecutionContext) -> None:
    Path(context.op_config["marker"]).write_text(context.run_id, encoding="utf-8")
    time.sleep(context.op_config["hold_s"])


gpu_job = dg.define_asset_job("gpu_job", selection=[gpu_step])
defs = dg.Definitions(assets=[gpu_step], jobs=[gpu_job])


def run(instance: dg.DagsterInstance, marker: str, hold_s: float) -> dg.ExecuteInProcessResult:
    """Run the job in process with the CLI's process tags, after the CLI's dead-run clean-up."""
    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.defs.runs import process_tags

    clean_before_run()
    return defs.resolve_job_def("gpu_job").execute_in_process(
        instance=instance,
        run_config={"ops": {"gpu_step": {"config": {"marker": marker, "hold_s": hold_s}}}},
        tags=process_tags(),
    )


if __name__ == "__main__":
    with dg.DagsterInstance.get() as inst:
        result = run(inst, sys.argv[1], float(sys.argv[2]))
    sys.exit(0 if result.success else 1)
