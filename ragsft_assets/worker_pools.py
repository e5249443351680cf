"""How the project's multiprocessing pools start and end: one definition for every stage that uses one."""

from __future__ import annotations

import signal
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


@contextmanager
def closing_pool(pool: Pool) -> Iterator[Pool]:
    """Use ``pool`` and shut it down: ``close`` + ``join`` when the block succeeds, ``terminate`` when it raises.

    On success the workers finish their loop and exit by themselves; terminating (what ``with pool:``
    always does) stays for errors and interruptions, where queued work must not run on.
    """
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()
