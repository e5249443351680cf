"""Issue 34: bad input is never retried, and a source that is not UTF-8 fails naming its file.

``snapshot_files`` has a retry policy (3 retries, 30 s exponential backoff) for hub exports that
drop; a snapshot folder with no dump file used to go through it, failing four times over minutes.
"""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.corpus.build import BadInputError
from ragsft_assets.defs.bad_input import BAD_INPUT, fail_at_once_on_bad_input
from ragsft_assets.defs.corpus.assets import snapshot_files
from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.resources.snapshots import SnapshotNotFoundError, SnapshotSource
from ragsft_assets.sources.records import SourceError

KEY = "20250301.fr"


def test_the_snapshot_step_has_a_retry_policy_that_bad_input_bypasses(tmp_path: Path) -> None:
    assert snapshot_files.op.retry_policy is not None and snapshot_files.op.retry_policy.max_retries == 3
    (tmp_path / "snapshots" / KEY).mkdir(parents=True)  # a folder with no dump file
    context = dg.build_asset_context(partition_key=KEY)
    with pytest.raises(dg.Failure) as failed:
        snapshot_files(context, SnapshotSource(home=str(tmp_path)))
    assert failed.value.allow_retries is False
    assert "no dump file" in failed.value.description and "not retried" in failed.value.description
    assert isinstance(failed.value.__cause__, SnapshotNotFoundError)


def test_a_run_with_no_dump_fails_at_once_without_retry(tmp_path: Path) -> None:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(snapshot_partitions.name, [KEY])
    started = time.monotonic()
    result = dg.materialize(
        [snapshot_files],
        partition_key=KEY,
        instance=instance,
        resources={"snapshots": SnapshotSource(home=str(tmp_path))},
        raise_on_error=False,
    )
    assert not result.success
    kinds = [e.event_type_value for e in result.all_events]
    assert "STEP_UP_FOR_RETRY" not in kinds and kinds.count("STEP_FAILURE") == 1
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "not found" in str(failure.step_failure_data.error.message)
    assert time.monotonic() - started < 25  # the first retry alone would wait 30 s


@pytest.mark.parametrize("error", [BadInputError("3 of 4 lines"), SourceError("a.jsonl, line 2: x")])
def test_every_kind_of_bad_input_bypasses_retries(error: Exception) -> None:
    assert isinstance(error, BAD_INPUT)
    with pytest.raises(dg.Failure) as failed, fail_at_once_on_bad_input():
        raise error
    assert failed.value.allow_retries is False and str(error) in failed.value.description
    with pytest.raises(ConnectionError), fail_at_once_on_bad_input():  # not bad input: retried as before
        raise ConnectionError("reset by peer")
