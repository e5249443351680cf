"""Bad input fails a step at once: a Dagster retry policy never retries it.

A retry policy (``snapshot_files``'s, ``LLM_RETRY_POLICY``) is for what may pass on a second try: a
dropped connection, a server restarting. A missing or empty snapshot folder, a source file that does
not parse, or too many unreadable dump lines fail the same way every time: retrying them three times
with backoff only delays the message (issue 34: "no dump file" was retried three times, 30 s apart).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from ragsft_assets.corpus.build import BadInputError
from ragsft_assets.resources.snapshots import SnapshotNotFoundError
from ragsft_assets.sources.records import SourceError

# The kinds of bad input: the input itself must change before a rerun can pass.
BAD_INPUT: tuple[type[Exception], ...] = (BadInputError, SnapshotNotFoundError, SourceError)


@contextmanager
def fail_at_once_on_bad_input() -> Iterator[None]:
    """Turn a :data:`BAD_INPUT` error raised inside into a ``dg.Failure`` that bypasses retry policies.

    The message is the error's own (it names the file and says what to do), followed by a note that
    the step was not retried.
    """
    try:
        yield
    except BAD_INPUT as exc:
        raise dg.Failure(
            description=f"{exc} (bad input, {type(exc).__name__}: not retried; fix the input, then rerun)",
            allow_retries=False,
        ) from exc
