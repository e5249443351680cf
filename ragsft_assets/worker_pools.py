"""How the project's multiprocessing pools start and end: one definition for every stage that uses one."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool
from typing import Any, TypeVar

from ragsft_assets.heap import raise_mmap_threshold

T = TypeVar("T")

# What this process's fork server imports when it starts: the union of what every stage asked for
# before that (one fork server serves the whole process; it cannot import more once it runs).
_PRELOAD: list[str] = []


def worker_context(preload: Sequence[str] = ()) -> BaseContext:
    """The start method for worker pools: a fork server where the platform has one, else spawn; never fork.

    Forking a running Dagster process (threads, maybe a live inference engine) is unsafe; the fork server
    is a clean interpreter started once per process. ``preload`` joins the modules it imports when it
    starts, so every worker forked from it has them already; a stage whose pool starts after the server
    is up gets workers that import what they need themselves (slower to start, same results).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # pragma: no cover - platforms without forkserver
    _PRELOAD.extend(m for m in preload if m not in _PRELOAD)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(_PRELOAD))
    return ctx


def _init_worker(
    initializer: Callable[..., Any] | None,
    initargs: tuple[Any, ...],
    mmap_threshold: int | None = None,
    nice: int = 0,
) -> None:
    # A worker inherits the ignored signals of the process that started it (they survive exec): started
    # from a process that ignores SIGTERM (a background job of a non-interactive shell, under nohup), it
    # ignored terminate()'s SIGTERM and Pool.terminate() waited for it forever (a hung CI run).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if mmap_threshold is not None:
        raise_mmap_threshold(mmap_threshold)
    if nice:
        os.nice(nice)
    if initializer is not None:
        initializer(*initargs)


def start_pool(
    ctx: BaseContext,
    workers: int,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple[Any, ...] = (),
    mmap_threshold: int | None = None,
    nice: int = 0,
) -> Pool:
    """A pool of ``workers`` processes of ``ctx`` whose workers die on SIGTERM, whatever the caller ignores.

    ``mmap_threshold``: glibc's mmap threshold in the workers (see :func:`raise_mmap_threshold`), for
    workers that allocate and free large arrays over and over; None keeps malloc's default.
    ``nice``: added to the workers' niceness (``os.nice``), so that the system runs this process
    first when both want a core.
    """
    return ctx.Pool(workers, initializer=_init_worker, initargs=(initializer, initargs, mmap_threshold, nice))


def run_apart(fn: Callable[..., T], *args: Any, nice: int = 0, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in one worker process (:func:`worker_context`), ``nice`` added to its
    niceness; its result. ``fn``, its arguments and its result travel pickled (``fn`` a module-level
    function). An exception in ``fn`` is raised here.

    For CPU work beside threads of this process that must not wait for it: Python code holds this
    process's GIL while it runs, and a worker has its own (and, niced, yields its core first).
    """
    with closing_pool(start_pool(worker_context(), 1, nice=nice)) as pool:
        return pool.apply(fn, args, kwargs)


TERMINATE_GRACE_S = 10.0


def terminate_pool(pool: Pool, grace_s: float = TERMINATE_GRACE_S) -> None:
    """Terminate ``pool`` and return once its workers are gone, killing any that outlive ``grace_s``.

    ``Pool.terminate`` sends SIGTERM and joins each worker with no time limit. A worker still starting
    (before its initializer restored SIGTERM) in a process that ignores SIGTERM, or one whose task
    ignores it, never dies of it and that join never returns; SIGKILL cannot be ignored.
    """
    workers = list(pool._pool)  # the processes terminate() will join, before it clears the list
    stopping = threading.Thread(target=pool.terminate, name="pool-terminate", daemon=True)
    stopping.start()
    stopping.join(grace_s)
    if stopping.is_alive():
        for worker in workers:
            if worker.exitcode is None:
                worker.kill()
        stopping.join()


@contextmanager
def closing_pool(pool: Pool, terminate_grace_s: float = TERMINATE_GRACE_S) -> Iterator[Pool]:
    """Use ``pool`` and shut it down: ``close`` + ``join`` when the block succeeds, terminate when it raises.

    On success the workers finish their loop and exit by themselves; terminating (what ``with pool:``
    always does) stays for errors and interruptions, where queued work must not run on, and it is
    bounded (``terminate_pool``): a failing stage never hangs on its own workers.
    """
    try:
        yield pool
    except BaseException:
        terminate_pool(pool, terminate_grace_s)
        raise
    pool.close()
    pool.join()
