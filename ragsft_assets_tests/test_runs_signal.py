"""SIGTERM stops an in-process CLI run cleanly, also while it is blocked on a pool (real subprocesses).

Run A holds the single ``gpu`` slot; run B waits on it. B logs the pool-wait WARNING naming A (alive)
and the clean command; SIGTERM to B (blocked on the pool, where dagster alone ignores it) and then to A
(inside its step) cancel each run, free its slots and exit 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dagster as dg

from ragsft_assets.defs import runs as hygiene


def _start(tmp_path, name: str, env: dict[str, str]) -> tuple[subprocess.Popen, object]:
    marker = tmp_path / name
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragsft_assets_tests.run_hygiene_job", str(marker), "120", "stoppable"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, marker


def _wait_for(cond, what: str, procs, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for p in procs:
            assert p.poll() is None, f"runner exited early while waiting for {what}: {p.stderr.read()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sigterm_cancels_running_and_pool_blocked_runs(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    env = {**os.environ, "DAGSTER_HOME": str(home), hygiene.POOL_WAIT_WARN_ENV: "2"}
    a, a_marker = _start(tmp_path, "a", env)
    b = None
    try:
        _wait_for(a_marker.exists, "run A to take the slot", [a])
        a_id = a_marker.read_text(encoding="utf-8")
        b, b_marker = _start(tmp_path, "b", env)
        with dg.DagsterInstance.get() as instance:

            def b_pending() -> list[str]:
                info = instance.event_log_storage.get_concurrency_info("gpu")
                return [p.run_id for p in info.pending_steps if p.run_id != a_id]

            _wait_for(lambda: b_pending(), "run B to wait on the pool", [a, b])
            b_id = b_pending()[0]
            time.sleep(4)  # past the 2 s pool-wait threshold and a watcher poll

            t0 = time.monotonic()
            b.send_signal(signal.SIGTERM)
            b_err = b.communicate(timeout=60)[1]
            assert b.returncode == 143, b_err
            assert time.monotonic() - t0 < 45
            assert not b_marker.exists()  # it never got the slot
            assert instance.get_run_by_id(b_id).status == dg.DagsterRunStatus.CANCELED
            # the pool-wait WARNING: the waiting step, the holder with its live process, the command
            assert "has waited" in b_err and "pool 'gpu'" in b_err, b_err
            assert f"run {a_id} (gpu_job, STARTED, pid {a.pid}" in b_err and "alive" in b_err, b_err
            assert hygiene.CLEAN_COMMAND in b_err
            assert b_id not in [
                p.run_id for p in instance.event_log_storage.get_concurrency_info("gpu").pending_steps
            ]

            a.send_signal(signal.SIGTERM)
            a_err = a.communicate(timeout=60)[1]
            assert a.returncode == 143, a_err
            assert instance.get_run_by_id(a_id).status == dg.DagsterRunStatus.CANCELED
            assert hygiene.held_slots(instance) == {}
            assert instance.event_log_storage.get_concurrency_info("gpu").pending_steps == []
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
