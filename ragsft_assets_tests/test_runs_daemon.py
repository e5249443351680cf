"""Daemon-launched runs: run monitoring fails a run whose worker was SIGKILLed, and frees its slot.

The run is launched through the instance's run launcher (``PidCheckingRunLauncher`` of
``dagster.yaml``) into a code server the test's daemon workspace starts, the way ``ragsft ui`` runs
it. Then the code server and the run worker are SIGKILLed (``ragsft ui`` killed whole: nobody is left
to notice the worker died), and the two iterations the monitoring daemon runs each interval are run
against the real instance: the run must end FAILURE and its ``gpu`` slot be freed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

import dagster as dg
import psutil
import yaml
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.workspace.load_target import ModuleTarget
from dagster._daemon.monitoring.concurrency import execute_concurrency_slots_iteration
from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration

from ragsft_assets.defs import runs as hygiene
from ragsft_assets_tests import run_hygiene_job

REPO = Path(__file__).resolve().parents[1]
LOG = logging.getLogger("test_runs_daemon")


def _instance_yaml(tmp_path: Path) -> Path:
    """The project's dagster.yaml, with the monitoring intervals shortened to a second."""
    config = yaml.safe_load((REPO / "dagster.yaml").read_text(encoding="utf-8"))
    config["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return home


def _worker_pid(instance: dg.DagsterInstance, run_id: str) -> int:
    alive, reason = hygiene.worker_health(instance, instance.get_run_by_id(run_id))
    assert alive is True, reason
    return int(reason.split("pid ")[1].split()[0])


def _monitor(context) -> None:  # noqa: ANN001 - a WorkspaceProcessContext
    for error in execute_run_monitoring_iteration(context, LOG):
        assert error is None, error


def test_monitoring_fails_a_killed_daemon_launched_run_and_frees_its_slot(
    tmp_path: Path, monkeypatch
) -> None:
    assert not dg.DefaultRunLauncher().supports_check_run_worker_health  # dagster's own cannot see them
    marker = tmp_path / "holding"
    with dg.DagsterInstance.from_config(str(_instance_yaml(tmp_path))) as instance:
        assert isinstance(instance.run_launcher, hygiene.PidCheckingRunLauncher)
        target = ModuleTarget(
            module_name="ragsft_assets_tests.run_hygiene_job",
            attribute=None,
            working_directory=str(REPO),
            location_name="hygiene",
        )
        with create_test_daemon_workspace_context(target, instance) as context:
            workspace = context.create_request_context()
            repo = workspace.get_code_location("hygiene").get_repository("__repository__")
            remote_job = repo.get_full_job("gpu_job")
            run = instance.create_run_for_job(
                job_def=run_hygiene_job.defs.resolve_job_def("gpu_job"),
                run_config={"ops": {"gpu_step": {"config": {"marker": str(marker), "hold_s": 120.0}}}},
                remote_job_origin=remote_job.get_remote_origin(),
                job_code_origin=remote_job.get_python_origin(),
            )
            instance.launch_run(run.run_id, workspace)
            deadline = time.monotonic() + 90
            while not marker.exists():
                assert not instance.get_run_by_id(run.run_id).is_finished, "the run ended before the kill"
                assert time.monotonic() < deadline, "the run never took the gpu slot"
                time.sleep(0.2)
            assert list(hygiene.held_slots(instance)) == [run.run_id]

            _monitor(context)  # a live worker is left alone
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
            assert instance.get_run_by_id(run.run_id).tags.get(hygiene.TAG_WORKER_TICKS)

            # The wall clock stepped 30 s forward (NTP, a resumed VM): psutil's create_time moves
            # with the boot time, the worker's start in ticks since boot does not. Still alive.
            real_create_time = hygiene._create_time
            monkeypatch.setattr(hygiene, "_create_time", lambda pid: (real_create_time(pid) or 0) + 30.0)
            _monitor(context)
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
            monkeypatch.setattr(hygiene, "_create_time", real_create_time)

            worker = psutil.Process(_worker_pid(instance, run.run_id))
            server = worker.parent()  # the code server that spawned it: killed too, so nobody notices
            for proc in (server, worker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            psutil.wait_procs([worker], timeout=10)
            time.sleep(1.0)
            killed = instance.get_run_by_id(run.run_id)
            assert killed.status == dg.DagsterRunStatus.STARTED  # the stuck run ...
            assert list(hygiene.held_slots(instance)) == [run.run_id]  # ... holding the gpu slot

            _monitor(context)
            failed = instance.get_run_by_id(run.run_id)
            assert failed.status == dg.DagsterRunStatus.FAILURE
            time.sleep(1.5)  # free_slots_after_run_end_seconds
            for error in execute_concurrency_slots_iteration(context, LOG):
                assert error is None, error
            assert hygiene.held_slots(instance) == {}
            messages = [e.message for e in instance.all_logs(run.run_id)]
            assert any("run worker is gone" in (m or "") for m in messages), messages[-5:]
