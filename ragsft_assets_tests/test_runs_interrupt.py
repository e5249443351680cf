"""Ctrl-C, SIGTERM, and Ctrl-C then ``kill -9`` within the grace period, each during an LLM stage run by
the real embedded model in a real subprocess; each time the next run proceeds with no manual step.

The stage (``question_drafts``, in the single-slot ``gpu`` pool) runs in a subprocess started in its
own session, like a CLI run in a terminal: Ctrl-C is SIGINT to its whole process group (the engine's
processes included), SIGTERM goes to the process alone (``kill PID``, a pod eviction's first
signal). The third case kills the group with SIGKILL as soon as the run is CANCELING, the window a
real Ctrl-C followed by ``kill -9`` (or an OOM kill during the grace period) lands in. The next run
executes in this process on the session's embedded engine, after the CLI's clean-up and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.defs import runs as hygiene
from ragsft_assets_tests.fault_runner import STAGE
from ragsft_assets_tests.test_fault_injection import (
    Reference,
    _cache_count,
    _calls,
    _env,
    _fresh_instance,
    _runner,
    reference,  # noqa: F401 - the module fixture: one uninterrupted oracle run of the chain
)

PAIRS = 3
DELAY_S = 3.0  # slept after each result the engine hands back: the stage is mid-batch for seconds


def _runs(dh: Path) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(dh)) as instance:
        return list(instance.get_runs())  # newest first


def _held(dh: Path) -> dict[str, list[str]]:
    with dg.DagsterInstance.from_config(str(dh)) as instance:
        return hygiene.held_slots(instance)


def _interrupt(home: Path, dh: Path, how: str) -> tuple[int | None, str, str]:
    """Start the stage, wait for a cached result, interrupt it ``how``; (exit code, status after, stderr)."""
    log = home.parent / f"{how}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            _runner(home, DELAY_S, "stage", PAIRS, "embedded"),
            env=_env(dh, home),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 900  # the engine's start: minutes on a loaded CPU machine
            while _cache_count(home) < 1:
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "no model result within 900 s"
                time.sleep(0.1)
            assert list(_held(dh).values()) == [[f"gpu:{STAGE}"]]  # the stage holds the gpu slot
            if how == "sigterm":
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
            if how == "ctrl-c+kill-9":
                deadline = time.monotonic() + 30
                while _runs(dh)[0].status != dg.DagsterRunStatus.CANCELING:
                    assert time.monotonic() < deadline, "the run never became CANCELING"
                    time.sleep(0.02)
                os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group (engine processes)
            proc.wait()
    return code, _runs(dh)[0].status.value, log.read_text(errors="replace")


@pytest.mark.integration
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "ctrl-c+kill-9"])
def test_interrupted_embedded_stage_leaves_nothing_that_blocks_the_next_run(
    reference: Reference,  # noqa: F811 - the fixture imported above
    embedded_model: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    from ragsft_assets_tests import fault_runner

    home, dh = tmp_path / "home", _fresh_instance(tmp_path)
    shutil.copytree(
        reference.home,
        home,
        ignore=shutil.ignore_patterns("llm_cache", STAGE, f"{STAGE}.parquet", "releases", "catalog.duckdb"),
    )
    code, status, err = _interrupt(home, dh, how)
    killed_id = _runs(dh)[0].run_id
    if how == "ctrl-c":
        assert code == 130 and status == "CANCELED", (code, status, err[-2000:])
        assert _held(dh) == {}  # freed by the run itself
    elif how == "sigterm":
        assert code == 143 and status == "CANCELED", (code, status, err[-2000:])
        assert _held(dh) == {}
    else:
        # killed in the window: the run is left CANCELING, holding the gpu slot
        assert code == -signal.SIGKILL and status == "CANCELING", (code, status, err[-2000:])
        assert list(_held(dh)) == [killed_id]
    before = _cache_count(home)
    assert 0 < before < PAIRS  # interrupted mid-batch; finished calls stay in the cache

    # the next run: no manual step (the CLI's clean-up runs first, as in every run command)
    monkeypatch.setenv("DAGSTER_HOME", str(dh))
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    monkeypatch.setenv("RAGSFT_GIT_COMMIT", "test")
    assert fault_runner.run(home, 0.0, PAIRS, "stage", "embedded")  # a slot still held would block here
    out = capsys.readouterr().out
    assert _calls(out) == PAIRS - before  # only the missing calls
    assert _cache_count(home) == PAIRS
    if how == "ctrl-c+kill-9":
        assert "marked canceled (killed)" in out, out[-2000:]
    runs = _runs(dh)
    assert runs[0].status == dg.DagsterRunStatus.SUCCESS
    assert [r.status for r in runs if r.run_id == killed_id] == [dg.DagsterRunStatus.CANCELED]
    assert _held(dh) == {}
