"""How the project's multiprocessing pools end: one definition for every stage that starts one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.pool import Pool


@contextmanager
def closing_pool(pool: Pool) -> Iterator[Pool]:
    """Use ``pool`` and shut it down: ``close`` + ``join`` when the block succeeds, ``terminate`` when it raises.

    Not ``with pool:`` (whose exit always terminates): SIGTERM to workers that are idle after a finished
    ``map`` left ``terminate()`` waiting forever in ``join()`` (a hung CI run). Terminating stays for
    errors and interruptions, where queued work must not run on.
    """
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()
