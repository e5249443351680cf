"""The deployed instance settings, once: the Helm values and the stack's ``dagster.yaml`` follow them.

``DEPLOYED`` is the single table. ``helm_daemon_values`` and ``helm_pools`` turn it into the shapes of
``deploy/helm/values.yaml`` (``dagsterDaemon``) and ``deploy/chart/values.yaml`` (``pools``);
``test_stack`` checks that those files hold exactly that, so a change in one place without the other
fails. ``instance_config`` renders the same table as the ``dagster.yaml`` of ``ragsft stack``, with
PostgreSQL for runs, events and schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

# ours: the values the Helm chart has carried since deploy/ was written (no card states them).
DEPLOYED: dict[str, Any] = {
    # The run queue: at most 4 runs at once, one run per snapshot partition (they write the same files).
    "max_concurrent_runs": 4,
    "tag_concurrency_limits": [
        {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    ],
    "run_monitoring": {
        "start_timeout_seconds": 600,
        "poll_interval_seconds": 60,
        # Free the `gpu` slot of a run that died mid-step, or a pool of 1 deadlocks.
        "free_slots_after_run_end_seconds": 60,
    },
    # Retry a run whose worker crashed; failed steps have their own retry policy (LLM_RETRY_POLICY).
    "run_retries": {"max_retries": 1, "retry_on_asset_or_op_failure": False},
    # Pool limits, set with `dagster instance concurrency set` (the chart's hook Job, `ragsft stack up`).
    "pools": {"gpu": 1, "duckdb": 1},
    # SQLAlchemy 2.1 (constraints.txt) maps a bare `postgresql://` to psycopg 3, which dagster-postgres
    # does not install (it brings psycopg2-binary): name the driver, or no instance opens.
    "postgres_scheme": "postgresql+psycopg2",
}

PASSWORD_ENV = "RAGSFT_STACK_PG_PASSWORD"  # dagster.yaml names the variable, never the password
PG_USER = "ragsft"
PG_DB = "dagster"
LOCATION = "ragsft"  # the code location's name in the stack's workspace (as in workspace.yaml)
DEFAULT_MODULE = "ragsft_assets.definitions"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def helm_daemon_values(table: dict[str, Any] = DEPLOYED) -> dict[str, Any]:
    """The official chart's ``dagsterDaemon`` values for ``table`` (deploy/helm/values.yaml)."""
    return {
        "enabled": True,
        "runCoordinator": {
            "enabled": True,
            "type": "QueuedRunCoordinator",
            "config": {
                "queuedRunCoordinator": {
                    "maxConcurrentRuns": table["max_concurrent_runs"],
                    "tagConcurrencyLimits": table["tag_concurrency_limits"],
                }
            },
        },
        "runMonitoring": {"enabled": True, **{_camel(k): v for k, v in table["run_monitoring"].items()}},
        "runRetries": {"enabled": True, **{_camel(k): v for k, v in table["run_retries"].items()}},
    }


def helm_postgres_scheme(table: dict[str, Any] = DEPLOYED) -> str:
    """The official chart's ``postgresql.postgresqlScheme`` (deploy/helm/values.yaml)."""
    return table["postgres_scheme"]


def helm_pools(table: dict[str, Any] = DEPLOYED) -> dict[str, int]:
    """The pool limits the wrapper chart's hook Job sets (deploy/chart/values.yaml ``pools``)."""
    return dict(table["pools"])


@dataclass(frozen=True)
class Intervals:
    """How often the daemon looks. The deployed values by default; ``--poll-seconds`` shortens them
    for a rehearsal or a test (a killed worker is then failed within seconds, not minutes)."""

    poll_interval_seconds: int = DEPLOYED["run_monitoring"]["poll_interval_seconds"]
    free_slots_after_run_end_seconds: int = DEPLOYED["run_monitoring"]["free_slots_after_run_end_seconds"]
    dequeue_interval_seconds: int = 5  # dagster's default for the queued run coordinator

    @classmethod
    def every(cls, seconds: int) -> Intervals:
        """All intervals set to ``seconds`` (at least 1)."""
        s = max(1, int(seconds))
        return replace(
            cls(), poll_interval_seconds=s, free_slots_after_run_end_seconds=s, dequeue_interval_seconds=s
        )


def instance_config(
    pg_port: int,
    intervals: Intervals = Intervals(),
    table: dict[str, Any] = DEPLOYED,
    pg_host: str = "127.0.0.1",
) -> dict:
    """The stack's ``dagster.yaml``: PostgreSQL storage on 127.0.0.1, the queue, run monitoring and
    retries of ``table``, and the project's pid-checking launcher (as in the repository's
    ``dagster.yaml``: the only local launcher whose dead workers run monitoring can see)."""
    monitoring = dict(table["run_monitoring"])
    monitoring["poll_interval_seconds"] = intervals.poll_interval_seconds
    monitoring["free_slots_after_run_end_seconds"] = intervals.free_slots_after_run_end_seconds
    return {
        "storage": {
            "postgres": {
                "postgres_db": {
                    "username": PG_USER,
                    "password": {"env": PASSWORD_ENV},
                    "hostname": pg_host,
                    "db_name": PG_DB,
                    "port": pg_port,
                    "scheme": table["postgres_scheme"],
                }
            }
        },
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {
                "max_concurrent_runs": table["max_concurrent_runs"],
                "tag_concurrency_limits": table["tag_concurrency_limits"],
                "dequeue_interval_seconds": intervals.dequeue_interval_seconds,
            },
        },
        "run_launcher": {"module": "ragsft_assets.defs.runs", "class": "PidCheckingRunLauncher"},
        "run_monitoring": {"enabled": True, **monitoring},
        "run_retries": {"enabled": True, **table["run_retries"]},
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }


def workspace_config(module: str = DEFAULT_MODULE, working_directory: Path | None = None) -> dict:
    """The stack's ``workspace.yaml``: one code location, ``ragsft``, from ``module``."""
    entry: dict[str, Any] = {"module_name": module, "location_name": LOCATION}
    if working_directory is not None:
        entry["working_directory"] = str(working_directory)
    return {"load_from": [{"python_module": entry}]}


def dump(config: dict, header: str) -> str:
    """YAML text with a comment header (stable key order: the table's)."""
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(config, sort_keys=False)
