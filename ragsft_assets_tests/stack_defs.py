"""A small code location for test_stack: the project's ``full_job`` and new-snapshot sensor over one
cheap asset in the ``gpu`` pool, served by a real ``ragsft stack`` (PostgreSQL, daemon, webserver).

``probe`` records when it starts and ends under ``$RAGSFT_HOME/stack_probe/`` and, while the file
``hold`` is there, waits: the test decides when a run may finish (to see the pool and the queue hold
other runs back, or to kill a worker mid-step).
"""

import os
import time
from pathlib import Path

import dagster as dg

from ragsft_assets.defs.automation.sensors import build_new_snapshot_sensor
from ragsft_assets.defs.jobs import full_job
from ragsft_assets.defs.partitions import snapshot_partitions


def probe_dir() -> Path:
    return Path(os.environ["RAGSFT_HOME"]) / "stack_probe"


@dg.asset(partitions_def=snapshot_partitions, group_name="corpus", pool="gpu")
def probe(context: dg.AssetExecutionContext) -> None:
    """Writes <run_id>.start, waits while ``hold`` exists (at most 120 s), writes <run_id>.end."""
    folder = probe_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{context.run_id}.start").write_text(f"{time.time()} {os.getpid()}\n")
    deadline = time.monotonic() + 120
    while (folder / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    (folder / f"{context.run_id}.end").write_text(f"{time.time()}\n")


_real = build_new_snapshot_sensor()
# The project's sensor function (same listing, cursor and requests), ticking every 2 s instead of
# 15 min so that a copied-in snapshot is seen within the test; off until `ragsft stack up` starts it.
new_snapshot_sensor = dg.SensorDefinition(
    name=_real.name,
    evaluation_fn=_real._raw_fn,
    minimum_interval_seconds=2,
    job=full_job,
    default_status=dg.DefaultSensorStatus.STOPPED,
)

# In process: one process per run (its worker), not one more per step: the tests start many runs.
defs = dg.Definitions(
    assets=[probe], jobs=[full_job], sensors=[new_snapshot_sensor], executor=dg.in_process_executor
)
