"""Which process runs a run, and whether it still lives (Dagster-free): the run tags that name it
(host, boot id, pid namespace, pid, start time and ticks), the liveness test that never takes an
unknowable process for dead, a run as the cleaner sees it, and the run's stop by signal.
``defs/runs.py`` applies these to the Dagster instance (dead runs, pool slots, the run launcher).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
from dataclasses import dataclass

import psutil

from ragsft_assets.leftovers import boot_id, pid_namespace, start_ticks

TAG_HOST = "ragsft/host"
TAG_PID = "ragsft/pid"
TAG_PID_START = "ragsft/pid_start"  # process create time: a pid reused by another process is not "alive"
# The start in clock ticks since boot (/proc/PID/stat field 22), what liveness compares: the create
# time above is ticks plus the current boot time, which moves when the wall clock is stepped.
TAG_PID_TICKS = "ragsft/pid_start_ticks"
# The start ticks of a code-server-launched worker, recorded the first time monitoring sees it alive.
TAG_WORKER_TICKS = "ragsft/worker_start_ticks"
# Where the pid means something: two containers with one host name (``--network host``) and their
# own pid namespaces, or a host after a reboot, see other processes behind the same pid.
TAG_BOOT_ID = "ragsft/boot_id"
TAG_PID_NS = "ragsft/pid_ns"


def this_host() -> str:
    """The host name recorded in run tags and compared when looking for dead runs."""
    return socket.gethostname()


def create_time(pid: int) -> float | None:
    """The process's start time; None when it is gone (AccessDenied raises: the process exists)."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def process_tags(pid: int | None = None) -> dict[str, str]:
    """Run tags naming the process that executes a run (the current one by default).

    Args:
        pid: The process id; ``os.getpid()`` when omitted.

    Returns:
        Tags for host, boot id, pid namespace, pid and the process's start time (those that can be
        read here).
    """
    pid = os.getpid() if pid is None else pid
    try:
        created = create_time(pid)
    except psutil.AccessDenied:
        created = None
    tags = {TAG_HOST: this_host(), TAG_PID: str(pid)}
    if boot_id():
        tags[TAG_BOOT_ID] = boot_id()
    if pid_namespace():
        tags[TAG_PID_NS] = pid_namespace()
    if created is not None:
        tags[TAG_PID_START] = f"{created:.2f}"
    ticks = start_ticks(pid)
    if ticks:
        tags[TAG_PID_TICKS] = str(ticks)
    return tags


def same_scope(tags: dict[str, str]) -> tuple[bool, str]:
    """Whether a run's tagged process can be looked up from here, and if not, why.

    The host name, the boot id and the pid namespace must all match. A value that one side
    records and the other cannot read makes it unknowable: never "same".
    """
    host = tags.get(TAG_HOST)
    if host != this_host():
        return False, f"tagged host {host}, not this host"
    for tag, here, what in ((TAG_BOOT_ID, boot_id(), "boot"), (TAG_PID_NS, pid_namespace(), "pid namespace")):
        there = tags.get(tag, "")
        if there != here:
            return False, f"another {what} ({there or 'not recorded'} there, {here or 'unknown'} here)"
    return True, ""


def process_alive(pid: int, started: str | None = None, ticks: str | None = None) -> bool:
    """Whether ``pid`` is a live process, and the same one as when it was tagged.

    A process this user may not inspect (``AccessDenied``) exists: it counts as alive.

    Args:
        pid: The process id from the run's tags.
        started: The tagged process start time, when known; a different start time means the pid
            was reused by another process after the run's one died.
        ticks: The tagged start in clock ticks since boot; when given it decides instead of
            ``started``, exactly, whatever the wall clock did since (NTP, a VM resumed).
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        created = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
    if ticks is not None and ticks.isdigit():
        now = start_ticks(pid)
        return now is None or now == int(ticks)  # unreadable now: alive, never failed on a guess
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


POOL_WAIT_WARN_ENV = "RAGSFT_POOL_WAIT_WARN_S"
POOL_WAIT_WARN_DEFAULT_S = 60.0


def pool_wait_warn_s() -> float:
    """Seconds a step may wait on a pool before the WARNING (``$RAGSFT_POOL_WAIT_WARN_S``, default 60)."""
    raw = os.environ.get(POOL_WAIT_WARN_ENV)
    if not raw:
        return POOL_WAIT_WARN_DEFAULT_S
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{POOL_WAIT_WARN_ENV}={raw!r} is not a number of seconds") from exc


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


def raise_in_thread(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    # CPython's documented PyThreadState_SetAsyncExc: the exception is raised in the worker at its
    # next bytecode, which reaches dagster's own interrupt handling (step failed as INTERRUPT, run
    # CANCELED since we set CANCELING first, slots released by its concurrency context).
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))
