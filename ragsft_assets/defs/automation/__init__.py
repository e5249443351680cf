"""Dagster wiring of the automation family: the new-snapshot sensor, the monthly schedule, failure reports.

Retry policies for LLM steps live in :mod:`ragsft_assets.defs.automation.policies`.
"""

import dagster as dg

from ragsft_assets.defs.automation.sensors import (
    monthly_snapshot_schedule,
    new_snapshot_sensor,
    run_failure_reporter,
)

defs = dg.Definitions(
    sensors=[new_snapshot_sensor, run_failure_reporter],
    schedules=[monthly_snapshot_schedule],
)
