"""A real subprocess run SIGKILLed while it holds the ``gpu`` slot does not block the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dagster as dg

from ragsft_assets.defs import runs as hygiene
from ragsft_assets_tests import run_hygiene_job


def test_sigkilled_run_is_cleaned_and_next_run_gets_the_slot(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    marker = tmp_path / "holding"
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragsft_assets_tests.run_hygiene_job", str(marker), "120"],
        env=env,
        start_new_session=True,  # its own process group: killed whole, like the reproduction
    )
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert proc.poll() is None, "runner exited early"
            assert time.monotonic() < deadline, "runner never took the slot"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_id = marker.read_text(encoding="utf-8")

    with dg.DagsterInstance.get() as instance:
        killed = instance.get_run_by_id(killed_id)
        assert killed.status == dg.DagsterRunStatus.STARTED  # what the issue saw: stuck STARTED
        assert list(hygiene.held_slots(instance)) == [killed_id]  # ... and holding the gpu slot
        assert killed.tags[hygiene.TAG_PID] == str(proc.pid)

        # cleaned first (fails fast instead of hanging if the clean-up breaks: the next run would block)
        from ragsft_assets.cli.runs import clean_before_run

        clean_before_run()
        assert hygiene.held_slots(instance) == {}
        t0 = time.monotonic()
        result = run_hygiene_job.run(instance, str(tmp_path / "second"), 0.0)
        assert result.success
        assert time.monotonic() - t0 < 60
        assert instance.get_run_by_id(killed_id).status == dg.DagsterRunStatus.FAILURE
        assert hygiene.held_slots(instance) == {}
