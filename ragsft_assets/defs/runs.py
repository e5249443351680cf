"""Run hygiene: find runs whose process died (SIGKILL, OOM, a closed laptop) and free what they hold.

A run killed mid-step stays ``STARTED`` in the instance and keeps its pool slots: with the single-slot
``gpu`` pool every later GPU step then waits forever. Runs the CLI executes in process carry their host
and pid (and the process start time, so a reused pid is not mistaken for the run) in run tags; this
module finds the ``STARTED`` ones whose process is gone on this host, marks them failed with a message
saying they were killed, and frees their concurrency slots (``free_concurrency_slots_for_run`` of the
event log storage, dagster 1.13). It also frees slots still held by runs that already ended.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

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


POOL_WAIT_WARN_ENV = "RAGSFT_POOL_WAIT_WARN_S"
POOL_WAIT_WARN_DEFAULT_S = 60.0
_log = logging.getLogger("ragsft.runs")


def pool_wait_warn_s() -> float:
    """Seconds a step may wait on a pool before the WARNING (``$RAGSFT_POOL_WAIT_WARN_S``, default 60)."""
    raw = os.environ.get(POOL_WAIT_WARN_ENV)
    if not raw:
        return POOL_WAIT_WARN_DEFAULT_S
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{POOL_WAIT_WARN_ENV}={raw!r} is not a number of seconds") from exc


def pool_wait_warnings(
    instance: dg.DagsterInstance, run_id: str, threshold_s: float, now: float | None = None
) -> list[tuple[str, str]]:
    """Steps of ``run_id`` waiting on a pool longer than ``threshold_s``, with the message to log.

    Args:
        instance: The Dagster instance.
        run_id: The run whose waiting steps are looked at.
        threshold_s: Seconds of waiting before a step is reported.
        now: The current POSIX time (``time.time()`` when omitted).

    Returns:
        ``(pool:step, message)`` pairs; the message names the runs holding the pool's slots, whether
        their processes are alive, and the command that frees them.
    """
    now = time.time() if now is None else now
    storage = instance.event_log_storage
    out = []
    for pool in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(pool)
        for pending in info.pending_steps:
            if pending.run_id != run_id or pending.assigned_timestamp is not None:
                continue
            waited = now - pending.enqueued_timestamp.timestamp()
            if waited < threshold_s:
                continue
            holders = []
            for holder_id in sorted({s.run_id for s in info.claimed_slots}):
                run = instance.get_run_by_id(holder_id)
                holders.append(
                    run_state(instance, run, {holder_id: [pool]}).describe()
                    if run is not None
                    else f"run {holder_id} (deleted)"
                )
            message = (
                f"step {pending.step_key} has waited {waited:.0f}s on pool {pool!r} "
                f"({info.slot_count} slot(s)); held by: {'; '.join(holders) or 'nobody (slots being freed)'}. "
                f"If a holder's process is gone, free its slots with `{CLEAN_COMMAND}` "
                f"(`{CLEAN_COMMAND} --dry-run` lists them)."
            )
            out.append((f"{pool}:{pending.step_key}", message))
    return out


class _PoolWaitWatcher(threading.Thread):
    """Background thread: logs each step's pool-wait WARNING once (stderr and the run's event log)."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, threshold_s: float, poll_s: float):
        super().__init__(name="ragsft-pool-wait", daemon=True)
        self.instance, self.run_id, self.threshold_s, self.poll_s = instance, run_id, threshold_s, poll_s
        self.stop = threading.Event()
        self.warned: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                warnings = pool_wait_warnings(self.instance, self.run_id, self.threshold_s)
            except Exception as exc:  # a storage hiccup must not kill the run; say it and retry
                _log.debug("pool-wait check failed: %s", exc)
                continue
            for key, message in warnings:
                if key in self.warned:
                    continue
                self.warned.add(key)
                _log.warning("ragsft: %s", message)
                run = self.instance.get_run_by_id(self.run_id)
                if run is not None:
                    self.instance.report_engine_event(f"WARNING: {message}", run)


class RunInterrupted(Exception):
    """The run was stopped by SIGINT/SIGTERM; it is marked canceled and its slots are freed.

    Attributes:
        signum: The signal received.
        run_id: The canceled run.
    """

    def __init__(self, signum: int, run_id: str):
        super().__init__(f"run {run_id} canceled by {signal.Signals(signum).name}")
        self.signum, self.run_id = signum, run_id

    @property
    def exit_code(self) -> int:
        """The shell convention for death by signal: 128 + signal number."""
        return 128 + self.signum


def _raise_in_thread(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    # CPython's documented PyThreadState_SetAsyncExc: the exception is raised in the worker at its
    # next bytecode, which reaches dagster's own interrupt handling (step failed as INTERRUPT, run
    # CANCELED since we set CANCELING first, slots released by its concurrency context).
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def execute_in_process_stoppable(
    job_def: dg.JobDefinition,
    instance: dg.DagsterInstance,
    grace_s: float = 30.0,
    pool_wait_s: float | None = None,
    pool_poll_s: float = 5.0,
    **kwargs: Any,
) -> dg.ExecuteInProcessResult:
    """``job_def.execute_in_process`` that SIGINT/SIGTERM stop cleanly, with the pool-wait WARNING.

    Dagster's in-process execution captures SIGINT/SIGTERM and only acts on them inside step code,
    so a step blocked on a pool ignores them. Here the job runs in a worker thread (dagster then
    leaves the signal handlers alone) and the main thread handles the signals: it marks the run
    CANCELING, raises KeyboardInterrupt in the worker, waits up to ``grace_s`` for dagster to wind
    down, then makes sure the run is CANCELED and its pool slots are free. Finished LLM calls are
    committed to the cache one by one, so they stay there. A second signal skips the grace period.

    Args:
        job_def: The job.
        instance: The Dagster instance.
        grace_s: Seconds to let dagster end the run after the signal.
        pool_wait_s: Seconds a step may wait on a pool before the WARNING; ``pool_wait_warn_s()``
            when omitted.
        pool_poll_s: How often the pool wait is looked at.
        **kwargs: Passed on to ``execute_in_process`` (tags, run_config, partition_key, ...).

    Returns:
        The result of the run.

    Raises:
        RunInterrupted: On SIGINT/SIGTERM, after the run is canceled and its slots freed.
    """
    from dagster._core.utils import make_new_run_id

    run_id = kwargs.pop("run_id", None) or make_new_run_id()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = job_def.execute_in_process(instance=instance, run_id=run_id, **kwargs)
        except BaseException as exc:  # handed to the main thread, which decides
            box["error"] = exc

    worker = threading.Thread(target=work, name="ragsft-run", daemon=True)
    watcher = _PoolWaitWatcher(
        instance, run_id, pool_wait_warn_s() if pool_wait_s is None else pool_wait_s, pool_poll_s
    )
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("execute_in_process_stoppable must be called from the main thread")
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker.start()
        watcher.start()
        while worker.is_alive() and not received:
            worker.join(0.2)
        if received:
            _stop_run(instance, run_id, worker, received, grace_s)
            raise RunInterrupted(received[0], run_id)
    finally:
        watcher.stop.set()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if "error" in box:
        raise box["error"]
    return box["result"]


def _stop_run(
    instance: dg.DagsterInstance, run_id: str, worker: threading.Thread, received: list[int], grace_s: float
) -> None:
    name = signal.Signals(received[0]).name
    _log.warning("ragsft: %s received: canceling run %s", name, run_id)
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished:
        instance.report_run_canceling(run, message=f"ragsft: {name} received, canceling the run")
    if worker.is_alive():
        _raise_in_thread(worker, KeyboardInterrupt)
    deadline = time.monotonic() + grace_s
    n = len(received)
    while worker.is_alive() and time.monotonic() < deadline and len(received) == n:
        worker.join(0.2)
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished:
        # dagster did not get to end it (a long C call, or a second signal): end it from outside.
        instance.report_run_canceled(run, message=f"ragsft: run canceled by {name}; pool slots freed")
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)
