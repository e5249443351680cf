"""Run hygiene: find runs whose process died (SIGKILL, OOM, a closed laptop) and free what they hold.

A run killed mid-step stays ``STARTED`` in the instance and keeps its pool slots: with the single-slot
``gpu`` pool every later GPU step then waits forever. Runs the CLI executes in process carry their host
and pid (and the process start time, so a reused pid is not mistaken for the run) in run tags; this
module finds the ``STARTED`` ones whose process is gone on this host, marks them failed with a message
saying they were killed, and frees their concurrency slots (``free_concurrency_slots_for_run`` of the
event log storage, dagster 1.13). It also frees slots still held by runs that already ended.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import dagster as dg
import psutil

TAG_HOST = "ragsft/host"
TAG_PID = "ragsft/pid"
TAG_PID_START = "ragsft/pid_start"  # process create time: a pid reused by another process is not "alive"

CLEAN_COMMAND = "ragsft runs clean"


def this_host() -> str:
    """The host name recorded in run tags and compared when looking for dead runs."""
    return socket.gethostname()


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def process_tags(pid: int | None = None) -> dict[str, str]:
    """Run tags naming the process that executes a run (the current one by default).

    Args:
        pid: The process id; ``os.getpid()`` when omitted.

    Returns:
        Tags for host, pid and the process's start time.
    """
    pid = os.getpid() if pid is None else pid
    created = _create_time(pid)
    tags = {TAG_HOST: this_host(), TAG_PID: str(pid)}
    if created is not None:
        tags[TAG_PID_START] = f"{created:.2f}"
    return tags


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether ``pid`` is a live process on this host, and the same one as when it was tagged.

    Args:
        pid: The process id from the run's tags.
        started: The tagged process start time, when known; a different start time means the pid
            was reused by another process after the run's one died.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        created = proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    if started is not None:
        try:
            return abs(float(started) - created) < 1.0
        except ValueError:
            return True
    return True


@dataclass(frozen=True)
class RunState:
    """One run seen by the cleaner.

    Attributes:
        run_id: The Dagster run id.
        job_name: Its job.
        status: Its status in the instance.
        host: The tagged host, or None for runs without process tags.
        pid: The tagged pid, or None.
        alive: Whether its process is alive (None: unknown, not on this host or not tagged).
        slots: The pool slots it holds, as ``pool:step`` strings.
    """

    run_id: str
    job_name: str
    status: str
    host: str | None
    pid: int | None
    alive: bool | None
    slots: tuple[str, ...]

    def describe(self) -> str:
        """One line for the user."""
        proc = (
            f"pid {self.pid} on {self.host} {'alive' if self.alive else 'gone' if self.alive is False else '?'}"
            if self.pid is not None
            else "no process tags"
        )
        slots = ", ".join(self.slots) if self.slots else "no slots"
        return f"run {self.run_id} ({self.job_name}, {self.status}, {proc}) holding {slots}"


def held_slots(instance: dg.DagsterInstance) -> dict[str, list[str]]:
    """Claimed pool slots by run id, as ``pool:step`` strings."""
    storage = instance.event_log_storage
    out: dict[str, list[str]] = {}
    for key in sorted(storage.get_concurrency_keys()):
        for slot in storage.get_concurrency_info(key).claimed_slots:
            out.setdefault(slot.run_id, []).append(f"{key}:{slot.step_key}")
    return out


def run_state(instance: dg.DagsterInstance, run: dg.DagsterRun, slots: dict[str, list[str]]) -> RunState:
    """What the cleaner knows about one run: its tagged process and whether it lives."""
    host = run.tags.get(TAG_HOST)
    pid_tag = run.tags.get(TAG_PID)
    pid = int(pid_tag) if pid_tag and pid_tag.isdigit() else None
    alive: bool | None = None
    if pid is not None and host == this_host():
        alive = process_alive(pid, run.tags.get(TAG_PID_START))
    return RunState(
        run_id=run.run_id,
        job_name=run.job_name,
        status=run.status.value,
        host=host,
        pid=pid,
        alive=alive,
        slots=tuple(slots.get(run.run_id, ())),
    )


def find_dead_runs(instance: dg.DagsterInstance) -> tuple[list[RunState], list[RunState]]:
    """Runs to clean: STARTED runs whose process is gone on this host, and ended runs holding slots.

    Returns:
        ``(dead, ended_holding)``: the first are to be marked failed and freed, the second only freed.
    """
    slots = held_slots(instance)
    dead = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        state = run_state(instance, run, slots)
        if state.alive is False:
            dead.append(state)
    dead_ids = {s.run_id for s in dead}
    ended = []
    for run_id in sorted(set(slots) - dead_ids):
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            ended.append(
                run_state(instance, run, slots)
                if run is not None
                else RunState(run_id, "?", "DELETED", None, None, None, tuple(slots[run_id]))
            )
    return dead, ended


def clean_dead_runs(
    instance: dg.DagsterInstance, dry_run: bool = False
) -> tuple[list[RunState], list[RunState]]:
    """Mark dead runs failed and free the slots of dead and ended runs.

    Args:
        instance: The Dagster instance.
        dry_run: Only find them; change nothing.

    Returns:
        ``(dead, ended_holding)`` as found by :func:`find_dead_runs`.
    """
    dead, ended = find_dead_runs(instance)
    if dry_run:
        return dead, ended
    for state in dead:
        run = instance.get_run_by_id(state.run_id)
        if run is None or run.status != dg.DagsterRunStatus.STARTED:
            continue  # it moved on between the look and now
        instance.report_run_failed(
            run,
            message=(
                f"ragsft: run killed (process {state.pid} on {state.host} is gone while the run was "
                f"STARTED); marked failed and its pool slots freed by {CLEAN_COMMAND}"
            ),
        )
    for state in [*dead, *ended]:
        instance.event_log_storage.free_concurrency_slots_for_run(state.run_id)
    return dead, ended


def report_lines(dead: list[RunState], ended: list[RunState], dry_run: bool = False) -> list[str]:
    """What the cleaner did (or would do), one line each."""
    verb_fail = "would mark failed" if dry_run else "marked failed (killed)"
    verb_free = "would free slots of" if dry_run else "freed slots of"
    lines = [f"{verb_fail}: {s.describe()}" for s in dead]
    lines += [f"{verb_free} ended {s.describe()}" for s in ended]
    return lines
