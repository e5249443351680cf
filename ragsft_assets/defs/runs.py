"""Run hygiene: find runs whose process died (SIGKILL, OOM, a closed laptop) and free what they hold.

A run killed mid-step stays ``STARTED`` (or ``STARTING``, or ``CANCELING`` when the kill came within
the grace period after a Ctrl-C) in the instance and keeps its pool slots: with the single-slot ``gpu``
pool every later GPU step then waits forever. Runs the CLI executes in process carry their owner in run
tags: host, boot id, pid namespace, pid and the process start time (so a reused pid, a rebooted host or
a container with the same host name is not mistaken for the run). This module finds the unfinished
runs whose owner is known to be gone, marks them failed (canceled when they were being canceled) with
a message saying they were killed, and frees their concurrency slots
(``free_concurrency_slots_for_run`` of the event log storage, dagster 1.13). It also frees slots still
held by runs that already ended. Where the owner cannot be looked up from here, a run is never marked
dead; a process that exists but may not be inspected (``AccessDenied``) is alive.

Runs the daemon launches (``ragsft ui``, the sensor, the schedule) go through the instance's run
launcher. Dagster's ``DefaultRunLauncher`` cannot check its workers (``supports_check_run_worker_health``
is False in dagster 1.13), so run monitoring never fails a dead one: only the code server that spawned
the worker notices its death, and nobody does when the code server died with it (``ragsft ui``'s whole
process group killed). :class:`PidCheckingRunLauncher` (named in ``dagster.yaml``) is the default
launcher plus that check, from the pid dagster itself records: run monitoring then marks a dead run
failed, and the monitoring daemon frees its slots ``free_slots_after_run_end_seconds`` later.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

import dagster as dg
import psutil
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.dagster_run import FINISHED_STATUSES

from ragsft_assets.leftovers import start_ticks

# The process side lives in run_process; the CLI, the release and the tests take these from here.
from ragsft_assets.run_process import POOL_WAIT_WARN_ENV as POOL_WAIT_WARN_ENV
from ragsft_assets.run_process import TAG_BOOT_ID as TAG_BOOT_ID
from ragsft_assets.run_process import (
    TAG_HOST,
    TAG_PID,
    TAG_PID_START,
    TAG_PID_TICKS,
    TAG_WORKER_TICKS,
    RunInterrupted,
    RunState,
    pool_wait_warn_s,
    process_alive,
    raise_in_thread,
    same_scope,
    this_host,
)
from ragsft_assets.run_process import TAG_PID_NS as TAG_PID_NS
from ragsft_assets.run_process import create_time as _create_time
from ragsft_assets.run_process import process_tags as process_tags

CLEAN_COMMAND = "ragsft runs clean"
# Every status of a run that has not ended: a run killed in any of them holds what it claimed.
UNFINISHED = tuple(s for s in dg.DagsterRunStatus if s not in FINISHED_STATUSES)


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
    if pid is not None and same_scope(dict(run.tags))[0]:
        alive = process_alive(pid, run.tags.get(TAG_PID_START), run.tags.get(TAG_PID_TICKS))
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
    """Runs to clean: unfinished runs whose process is known to be gone, and ended runs holding slots.

    Unfinished is every status but the three final ones (STARTING, STARTED, CANCELING, ...): a
    run killed while CANCELING (Ctrl-C, then ``kill -9`` within the grace period) holds its slot
    as surely as one killed while STARTED. "Known to be gone" needs the same host, boot and pid
    namespace (``same_scope``); anything else is never taken for dead.

    Returns:
        ``(dead, ended_holding)``: the first are to be marked failed and freed, the second only freed.
    """
    slots = held_slots(instance)
    dead = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=list(UNFINISHED))):
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
        if run is None or run.is_finished:
            continue  # it moved on between the look and now
        message = (
            f"ragsft: run killed (process {state.pid} on {state.host} is gone while the run was "
            f"{run.status.value})"
        )
        if run.status == dg.DagsterRunStatus.CANCELING:  # it was being canceled: it ends canceled
            instance.report_run_canceled(run, message=f"{message}; marked canceled and its pool slots freed")
        else:
            instance.report_run_failed(
                run, message=f"{message}; marked failed and its pool slots freed by {CLEAN_COMMAND}"
            )
    for state in [*dead, *ended]:
        instance.event_log_storage.free_concurrency_slots_for_run(state.run_id)
    return dead, ended


def report_lines(dead: list[RunState], ended: list[RunState], dry_run: bool = False) -> list[str]:
    """What the cleaner did (or would do), one line each."""

    def verb_end(state: RunState) -> str:
        end = "canceled" if state.status == dg.DagsterRunStatus.CANCELING.value else "failed"
        return f"would mark {end}" if dry_run else f"marked {end} (killed)"

    verb_free = "would free slots of" if dry_run else "freed slots of"
    lines = [f"{verb_end(s)}: {s.describe()}" for s in dead]
    lines += [f"{verb_free} ended {s.describe()}" for s in ended]
    return lines


_log = logging.getLogger("ragsft.runs")


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
        raise_in_thread(worker, KeyboardInterrupt)
    deadline = time.monotonic() + grace_s
    n = len(received)
    while worker.is_alive() and time.monotonic() < deadline and len(received) == n:
        worker.join(0.2)
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished:
        # dagster did not get to end it (a long C call, or a second signal): end it from outside.
        instance.report_run_canceled(run, message=f"ragsft: run canceled by {name}; pool slots freed")
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)


# The engine event dagster's run worker emits first, with its pid in the metadata (dagster/_grpc/impl.py).
_WORKER_STARTED = "Started process for run"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def _worker_is_local(run: dg.DagsterRun) -> bool:
    """Whether the run's worker ran on this host: its code server is local (or a unix socket)."""
    import json

    from dagster._core.storage.tags import GRPC_INFO_TAG

    raw = run.tags.get(GRPC_INFO_TAG)
    if not raw:
        return False
    try:
        info = json.loads(raw)
    except ValueError:
        return False
    return "socket" in info or info.get("host") in (*_LOCAL_HOSTS, this_host())


def worker_health(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[bool | None, str]:
    """Whether the process executing ``run`` is alive on this host, and why that is known.

    Runs of the CLI are looked up by their process tags; runs launched through a code server by the
    pid of dagster's "Started process for run" engine event, taken as the same process only if it
    started before that event (a pid reused later is not the worker).

    Returns:
        ``(alive, reason)``: ``alive`` is None when it cannot be told (another host, no pid recorded).
    """
    if run.tags.get(TAG_PID):
        state = run_state(instance, run, {})
        if state.alive is None:
            return (
                None,
                f"process tags name another host, boot or pid namespace: {same_scope(dict(run.tags))[1]}",
            )
        return state.alive, f"pid {state.pid} on {state.host} (run tags)"
    if not _worker_is_local(run):
        return None, "no process tags and no local code server"
    from dagster._core.events import DagsterEventType

    started = [
        e
        for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if (e.message or "").startswith(_WORKER_STARTED)
    ]
    if not started:
        return None, "the worker has not recorded its pid yet"
    event = started[-1]  # a resumed run records a new worker
    pid_md = event.get_dagster_event().engine_event_data.metadata.get("pid")
    pid_text = str(pid_md.value) if pid_md is not None else ""
    if not pid_text.isdigit():
        return None, "the worker's start event holds no pid"
    pid = int(pid_text)
    # Once seen alive, the worker is known by its start in ticks since boot (kept as a run tag):
    # a wall-clock comparison would fail a live worker after the clock is stepped forward (NTP, a
    # resumed VM), since psutil's create_time moves with the boot time.
    # The tag is "<pid>:<ticks>": a retried run inherits its parent's tags (dagster's run retries
    # copy them), and a resumed run has a new worker; a tag of another pid is not this worker's.
    tagged_pid, _, recorded = (run.tags.get(TAG_WORKER_TICKS) or "").rpartition(":")
    ticks = start_ticks(pid)
    if tagged_pid == str(pid) and recorded and ticks is not None:
        alive = process_alive(pid) and str(ticks) == recorded
        return alive, f"run worker pid {pid} on {this_host()} (start {recorded} ticks since boot)"
    try:
        created = _create_time(pid)
    except psutil.AccessDenied:  # it exists, someone else's: alive, never failed on a guess
        return True, f"run worker pid {pid} on {this_host()} exists (not inspectable)"
    alive = process_alive(pid) and created is not None and created <= event.timestamp + 1.0
    if alive and ticks is not None:
        instance.add_run_tags(run.run_id, {TAG_WORKER_TICKS: f"{pid}:{ticks}"})
    return alive, f"run worker pid {pid} on {this_host()} (its start event)"


class PidCheckingRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default run launcher, whose workers run monitoring can check by pid.

    Named in ``dagster.yaml`` (``run_launcher``). The monitoring daemon calls
    :meth:`check_run_worker_health` for every STARTED run each ``poll_interval_seconds``; a run whose
    worker is gone is marked failed there, and its pool slots are freed by the same daemon
    ``free_slots_after_run_end_seconds`` later. A run whose worker cannot be seen from this host is
    reported running: it is never failed on a guess.
    """

    @property
    def supports_check_run_worker_health(self) -> bool:
        """Yes: by pid, on this host."""
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        """RUNNING unless the run's worker process is known to be gone on this host (then FAILED)."""
        alive, reason = worker_health(self._instance, run)
        if alive is False:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"ragsft: run worker is gone ({reason}): the run was killed"
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING, reason if alive is None else "")
