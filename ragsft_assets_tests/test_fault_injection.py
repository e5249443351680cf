"""Fault injection with real subprocesses: SIGKILL (whole process group) in the middle of a stage, rerun.

Case (a), an LLM stage mid-batch with the test double: ``question_drafts`` is killed once the cache
holds some but not all of its calls (polled from the parent in the cache's SQLite file). The rerun
must finish with no manual step, make exactly the missing calls, leave no partial or temporary file,
and write outputs byte-identical to an uninterrupted run (one reference run shared by the cases).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets_tests.fault_runner import KEY, STAGE

PAIRS = 6
TEMP_MARKERS = (".tmp", ".part", "~", ".partial")
POOLS_YAML = "concurrency:\n  pools:\n    default_limit: 1\n    granularity: op\n"


def _runner(home: Path, dagster_home: Path, delay_s: float, stage_only: bool) -> list[str]:
    args = [sys.executable, "-m", "ragsft_assets_tests.fault_runner", str(home), str(delay_s), str(PAIRS)]
    return args + (["stage-only"] if stage_only else [])


def _env(dagster_home: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(dagster_home), "RAGSFT_HOME": str(home)}


def _cache_count(home: Path) -> int:
    db = home / "llm_cache" / "calls.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:  # schema not created yet, or locked for a moment
        return 0


def _files(home: Path) -> dict[str, bytes]:
    """Every file of the home's assets, by relative path (the inputs and the cache are elsewhere)."""
    root = home / "assets"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _calls(stdout: str) -> int:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("backend calls: ")]
    assert lines, stdout[-2000:]
    return int(lines[-1].split(": ")[1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the stage and its upstream: the bytes every case must reproduce."""
    home = tmp_path_factory.mktemp("reference")
    dh = tmp_path_factory.mktemp("reference_dagster")
    done = subprocess.run(
        _runner(home, dh, 0.0, stage_only=False),
        env=_env(dh, home),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _calls(done.stdout) == PAIRS == _cache_count(home)
    return home


def test_llm_stage_killed_mid_batch_reruns_only_missing_calls(reference: Path, tmp_path: Path) -> None:
    home, dh = tmp_path / "home", tmp_path / "dagster"
    dh.mkdir()
    # the project's single-slot pools: a killed run's `gpu` slot would block the rerun forever
    (dh / "dagster.yaml").write_text(POOLS_YAML, encoding="utf-8")
    # the upstream as the reference built it; the stage itself is what gets killed
    shutil.copytree(reference, home, ignore=shutil.ignore_patterns("llm_cache", STAGE, f"{STAGE}.parquet"))
    assert not (home / "assets" / KEY / STAGE).exists()

    proc = subprocess.Popen(
        _runner(home, dh, 0.5, stage_only=True),
        env=_env(dh, home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # killed as a whole process group, like an OOM kill of the CLI
    )
    try:
        deadline = time.monotonic() + 120
        while _cache_count(home) < PAIRS // 2:
            assert proc.poll() is None, "runner exited before the kill"
            assert time.monotonic() < deadline, "the stage never got halfway"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = _cache_count(home)
    assert 0 < before < PAIRS, before  # killed mid-batch
    assert not (home / "assets" / KEY / STAGE).exists()

    rerun = subprocess.run(
        _runner(home, dh, 0.0, stage_only=True),
        env=_env(dh, home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]  # no manual step: the dead run is cleaned by the rerun
    assert "marked failed (killed)" in rerun.stdout + rerun.stderr
    assert _calls(rerun.stdout) == PAIRS - before  # only the missing calls
    assert _cache_count(home) == PAIRS

    files = _files(home)
    assert not [f for f in files if any(m in f for m in TEMP_MARKERS) or Path(f).name.startswith(".")]
    ref = _files(reference)
    assert sorted(files) == sorted(ref)  # nothing extra, nothing missing
    for name, data in ref.items():
        assert files[name] == data, f"{name} differs from the uninterrupted run"
    with dg.DagsterInstance.from_config(str(dh)) as instance:
        statuses = sorted(r.status.value for r in instance.get_runs())
    assert statuses == ["FAILURE", "SUCCESS"]  # the killed run ended as failed, the rerun succeeded
