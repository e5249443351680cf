"""How the project's multiprocessing pools start and end: one definition for every stage that uses one."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool
from typing import Any


def _init_worker(initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    # A worker inherits the ignored signals of the process that started it (they survive exec): started
    # from a process that ignores SIGTERM (a background job of a non-interactive shell, under nohup), it
    # ignored terminate()'s SIGTERM and Pool.terminate() waited for it forever (a hung CI run).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)


def start_pool(
    ctx: BaseContext,
    workers: int,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Pool:
    """A pool of ``workers`` processes of ``ctx`` whose workers die on SIGTERM, whatever the caller ignores."""
    return ctx.Pool(workers, initializer=_init_worker, initargs=(initializer, initargs))


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
