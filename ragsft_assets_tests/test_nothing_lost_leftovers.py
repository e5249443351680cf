"""Issue 34: a live build's staging folder is never taken for a dead build's, whatever the wall clock does.

psutil's ``create_time()`` is the start in ticks plus the current boot time (``btime``), and
``btime`` moves whenever the wall clock is stepped (NTP, a VM paused and resumed, a laptop resumed).
Owners are therefore named by boot id, pid namespace, pid and start in ticks since boot; here the
boot time is shifted by 30 s both ways while the owners live, and nothing of theirs is removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ragsft_assets import leftovers
from ragsft_assets.release import layout


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen]:
    """A live process of this host, the owner of the entries a test names after it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _entry(parent: Path, prefix: str, pid: int) -> Path:
    start = leftovers.start_ticks(pid)
    assert start, "the start of a live process of this host is readable"
    path = parent / f"{prefix}{leftovers._host()}-{pid}-{start}-abc_1"
    path.mkdir()
    (path / "part.parquet").write_bytes(b"half")
    return path


def _step_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The wall clock stepped by ``seconds``: psutil's boot time and every create_time move with it."""
    boot, create = psutil.boot_time, psutil.Process.create_time
    monkeypatch.setattr(psutil, "boot_time", lambda: boot() + seconds)
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: create(self) + seconds)


@pytest.mark.parametrize("shift", [-30.0, 30.0])
def test_live_owners_keep_their_entries_when_the_clock_steps(
    tmp_path: Path, sleeper: subprocess.Popen, monkeypatch: pytest.MonkeyPatch, shift: float
) -> None:
    target = tmp_path / "sample.fr"
    prefix = leftovers.sibling_prefix(target, "build")
    theirs = _entry(tmp_path, prefix, sleeper.pid)  # another live build of the same release
    mine = layout.staging_dir(target)  # this process's own build
    (mine / "README.md").write_text("new\n", encoding="utf-8")
    _step_clock(monkeypatch, shift)
    assert leftovers.stale_entries(tmp_path, prefix) == []
    assert leftovers.recover(target) == [] and leftovers.find_stale(tmp_path) == []
    layout.swap_into_place(mine, target)  # calls recover(): the other build's folder stays
    assert (target / "README.md").read_text(encoding="utf-8") == "new\n"
    assert theirs.is_dir() and (theirs / "part.parquet").is_file()


def test_a_process_never_removes_its_own_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / (leftovers.owned(".x.") + "abc_1")
    own.mkdir()
    # whatever reading the start would give now (unreadable, another value), its own tag is its own
    monkeypatch.setattr(leftovers, "start_ticks", lambda pid: 12345)
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: 1.0)
    assert leftovers.remove_stale(tmp_path, ".x.") == [] and own.is_dir()


def test_leftovers_of_a_dead_owner_are_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    target = tmp_path / "sample.fr"
    try:
        for _ in range(100):  # the child's start is readable once it runs
            if leftovers.start_ticks(proc.pid):
                break
            time.sleep(0.01)
        built = _entry(tmp_path, leftovers.sibling_prefix(target, "build"), proc.pid)
        old = _entry(tmp_path, leftovers.sibling_prefix(target, "old"), proc.pid)
        assert leftovers.recover(target) == []  # alive: nothing touched
    finally:
        proc.kill()
        proc.wait()
    _step_clock(monkeypatch, 30.0)
    done = leftovers.recover(target)
    assert [line.split(",")[0] for line in done] == [
        f"restored {target} from {old.name}",
        f"removed {built}",
    ]
    assert (target / "part.parquet").is_file() and not built.exists()


def test_start_is_read_in_ticks_since_boot() -> None:
    """Field 22 of /proc/PID/stat, even when the command name holds spaces and parentheses."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("no /proc here: the pid alone decides")
    ticks = leftovers.start_ticks(os.getpid())
    assert isinstance(ticks, int) and ticks > 0
    hz = os.sysconf("SC_CLK_TCK")
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert 0 <= since_boot - ticks / hz < 24 * 3600  # this process started after boot, ticks in CLK_TCK
    assert leftovers.start_ticks(2**22 + 12345) is None  # no such pid


@pytest.mark.parametrize("shift", [-30.0, 30.0])
def test_runs_clean_never_takes_a_live_run_for_dead_when_the_clock_steps(
    tmp_path: Path, sleeper: subprocess.Popen, monkeypatch: pytest.MonkeyPatch, shift: float
) -> None:
    """`ragsft runs clean` judges a run's process by its tagged start ticks, not its create time."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from ragsft_assets.defs import runs as hygiene

    tags = hygiene.process_tags(sleeper.pid)
    assert tags[hygiene.TAG_PID_TICKS] == str(leftovers.start_ticks(sleeper.pid))
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        run = create_run_for_test(
            instance, job_name="full_job", status=dg.DagsterRunStatus.STARTED, tags=tags
        )
        _step_clock(monkeypatch, shift)
        found, _ = hygiene.clean_dead_runs(instance)
        assert found == [] and instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
        # a pid reused by another process (other start ticks) is still not the run's
        assert not hygiene.process_alive(sleeper.pid, None, str(int(tags[hygiene.TAG_PID_TICKS]) + 1))
