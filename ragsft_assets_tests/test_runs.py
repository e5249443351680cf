"""Run hygiene: dead runs (killed processes) are found, marked failed and their pool slots freed."""

from __future__ import annotations

import subprocess
import sys

import dagster as dg
import pytest
from click.testing import CliRunner
from dagster._core.test_utils import create_run_for_test

from ragsft_assets import leftovers
from ragsft_assets.defs import runs as hygiene


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        inst.event_log_storage.set_concurrency_slots("gpu", 1)
        yield inst


def _dead_pid_tags() -> dict[str, str]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tags = hygiene.process_tags(proc.pid)
    proc.kill()
    proc.wait()
    return tags


def _started_run(instance, tags, step="question_drafts"):
    run = create_run_for_test(instance, job_name="full_job", status=dg.DagsterRunStatus.STARTED, tags=tags)
    claim = instance.event_log_storage.claim_concurrency_slot("gpu", run.run_id, step)
    assert claim.is_claimed
    return run


def test_dead_run_marked_failed_and_slot_freed(instance):
    dead = _started_run(instance, _dead_pid_tags())
    found, ended = hygiene.clean_dead_runs(instance, dry_run=True)
    assert [s.run_id for s in found] == [dead.run_id] and ended == []
    assert found[0].slots == ("gpu:question_drafts",) and found[0].alive is False
    # dry run changes nothing
    assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.STARTED
    assert hygiene.held_slots(instance) == {dead.run_id: ["gpu:question_drafts"]}

    found, _ = hygiene.clean_dead_runs(instance)
    assert [s.run_id for s in found] == [dead.run_id]
    run = instance.get_run_by_id(dead.run_id)
    assert run.status == dg.DagsterRunStatus.FAILURE
    failure = [
        r for r in instance.all_logs(dead.run_id) if r.dagster_event and r.dagster_event.is_run_failure
    ]
    assert "killed" in failure[-1].dagster_event.message
    assert hygiene.held_slots(instance) == {}
    # the freed slot can be claimed by the next run
    nxt = create_run_for_test(instance, job_name="full_job", status=dg.DagsterRunStatus.STARTED)
    assert instance.event_log_storage.claim_concurrency_slot("gpu", nxt.run_id, "question_drafts").is_claimed


def test_live_and_foreign_runs_left_alone(instance):
    live = _started_run(instance, hygiene.process_tags())  # this test process: alive
    foreign = create_run_for_test(
        instance,
        job_name="full_job",
        status=dg.DagsterRunStatus.STARTED,
        tags={hygiene.TAG_HOST: "some-other-host", hygiene.TAG_PID: "1"},
    )
    untagged = create_run_for_test(instance, job_name="full_job", status=dg.DagsterRunStatus.STARTED)
    found, ended = hygiene.clean_dead_runs(instance)
    assert found == [] and ended == []
    for run in (live, foreign, untagged):
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    assert list(hygiene.held_slots(instance)) == [live.run_id]


def test_reused_pid_is_not_alive():
    tags = hygiene.process_tags()
    assert hygiene.process_alive(int(tags[hygiene.TAG_PID]), tags[hygiene.TAG_PID_START])
    assert not hygiene.process_alive(int(tags[hygiene.TAG_PID]), "12.00")


def test_ended_run_holding_slot_is_freed(instance):
    run = _started_run(instance, hygiene.process_tags())
    instance.report_run_failed(instance.get_run_by_id(run.run_id))
    found, ended = hygiene.clean_dead_runs(instance)
    assert found == [] and [s.run_id for s in ended] == [run.run_id]
    assert hygiene.held_slots(instance) == {}


def test_cli_runs_clean(tmp_path, monkeypatch):
    from ragsft_assets.cli import main

    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    runner = CliRunner()
    out = runner.invoke(main, ["runs", "clean", "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "no dead runs" in out.output
    with dg.DagsterInstance.get() as inst:
        inst.event_log_storage.set_concurrency_slots("gpu", 1)
        dead = _started_run(inst, _dead_pid_tags())
    # a temporary file of the killed process, beside an output it was writing
    gone = int(dead.tags[hygiene.TAG_PID])
    start = int(float(dead.tags[hygiene.TAG_PID_START]))
    tmp = tmp_path / "assets" / "sample.fr" / f".train.parquet.{leftovers._host()}-{gone}-{start}-x1.tmp"
    tmp.parent.mkdir(parents=True)
    tmp.write_bytes(b"half")
    out = runner.invoke(main, ["runs", "clean", "--dry-run"])
    assert out.exit_code == 0 and f"would mark failed: run {dead.run_id}" in out.output, out.output
    assert f"would remove {tmp}" in out.output and tmp.exists()
    out = runner.invoke(main, ["runs", "clean"])
    assert f"marked failed (killed): run {dead.run_id}" in out.output, out.output
    assert f"removed {tmp}" in out.output and not tmp.exists()
    with dg.DagsterInstance.get() as inst:
        assert inst.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert hygiene.held_slots(inst) == {}


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.STARTING])
def test_dead_run_in_any_unfinished_status_is_cleaned(instance, status):
    """Ctrl-C then ``kill -9`` within the grace period leaves the run CANCELING; a kill at start, STARTING."""
    run = create_run_for_test(instance, job_name="full_job", status=status, tags=_dead_pid_tags())
    assert instance.event_log_storage.claim_concurrency_slot("gpu", run.run_id, "question_drafts").is_claimed
    found, ended = hygiene.clean_dead_runs(instance)
    assert [s.run_id for s in found] == [run.run_id] and ended == []
    want = (
        dg.DagsterRunStatus.CANCELED
        if status == dg.DagsterRunStatus.CANCELING
        else dg.DagsterRunStatus.FAILURE
    )
    assert instance.get_run_by_id(run.run_id).status == want
    assert hygiene.held_slots(instance) == {}
    line = hygiene.report_lines(found, ended)[0]
    assert line.startswith(
        "marked canceled (killed)" if want == dg.DagsterRunStatus.CANCELED else "marked failed"
    )


def test_access_denied_counts_as_alive(monkeypatch):
    """The process exists but belongs to someone else: alive, here as in leftovers."""
    import psutil

    class Denied:
        def __init__(self, pid):
            raise psutil.AccessDenied(pid)

    monkeypatch.setattr(hygiene.psutil, "Process", Denied)
    assert hygiene.process_alive(12345, "1.00") is True
    monkeypatch.setattr(leftovers.psutil, "Process", Denied)
    assert leftovers.Owner(leftovers._host(), 12345, 7).alive() is True


@pytest.mark.parametrize(
    "tag, value",
    [(hygiene.TAG_BOOT_ID, "another-boot"), (hygiene.TAG_PID_NS, "pid:[1]"), (hygiene.TAG_BOOT_ID, None)],
)
def test_owner_in_another_boot_or_pid_namespace_is_never_marked_dead(instance, tag, value):
    """Same host name, dead pid here, but another boot or pid namespace (or not recorded): unknown."""
    tags = _dead_pid_tags()
    assert tags.get(hygiene.TAG_BOOT_ID) and tags.get(hygiene.TAG_PID_NS)  # recorded where readable
    if value is None:
        del tags[tag]
    else:
        tags[tag] = value
    run = _started_run(instance, tags)
    found, ended = hygiene.clean_dead_runs(instance)
    assert found == [] and ended == []
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    state = hygiene.run_state(instance, instance.get_run_by_id(run.run_id), {})
    assert state.alive is None and "?" in state.describe()


def test_leftovers_of_another_pid_namespace_are_left_alone(tmp_path):
    """Two containers with one host name share a home: the other's temporary files are not ours to remove."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = leftovers._host()
    assert "+" in host and host.endswith(leftovers.scope_id())
    other = host.split("+")[0] + "+00000000"
    mine, theirs = tmp_path / f".x.{host}-{proc.pid}-1-a", tmp_path / f".x.{other}-{proc.pid}-1-b"
    for p in (mine, theirs):
        p.write_bytes(b"")
    assert leftovers.remove_stale(tmp_path, ".x.") == [mine]
    assert [s.path for s in leftovers.find_stale(tmp_path)] == [] and theirs.exists()
