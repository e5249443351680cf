"""Every asset check's result, built one way: the partition it checked and a count that plots.

Dagster fills an evaluation's own ``partition`` (the check page's Partition column, "—" when empty)
only for a partitioned check, which takes ``AssetCheckSpec(partitions_def=...)`` or a partitioned
``@asset_check``: a preview feature of dagster 1.13 that warns at every load (the project's loading
prints no warning). Setting that field by hand is no way out either: the run's planned row for the
check is stored without a partition and would stay "planned" (shown as skipped) beside the result.

So each result carries, in its metadata, ``partition`` (text: the snapshot key it checked) and
``failures`` (an integer on every evaluation, 0 when it passes, so the check's metadata plots one
point per run). Dagster already links each result to that partition's materialization (its
"target materialization" is looked up within the step's partition).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from ragsft_assets.release.verify import VerifyReport

PARTITION = "partition"
FAILURES = "failures"


def running_partition() -> str | None:
    """The partition the running step materializes (``a...b`` for a range), None outside a step or
    for an unpartitioned one."""
    try:
        ctx = dg.OpExecutionContext.get()
    except dg.DagsterInvariantViolationError:  # outside a step: a unit test of the check's logic
        return None
    if ctx.has_partition_key:
        return ctx.partition_key
    if ctx.has_partition_key_range:
        r = ctx.partition_key_range
        return f"{r.start}...{r.end}"
    return None


def check_result(
    *,
    passed: bool,
    failures: int,
    metadata: Mapping[str, object] | None = None,
    partition: str | None = None,
    asset_key: dg.AssetKey | str | None = None,
    check_name: str | None = None,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
    description: str | None = None,
) -> dg.AssetCheckResult:
    """An ``AssetCheckResult`` whose metadata leads with ``partition`` (``partition``, else the
    running step's) and ``failures`` (what the check found wrong, a count), then ``metadata``."""
    md = dict(metadata or {})
    given = md.pop(FAILURES, None)
    given = getattr(given, "value", given)
    if given is not None and given != failures:
        raise ValueError(f"check {check_name or ''}: metadata failures={given!r} but failures={failures!r}")
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
        raise TypeError(f"check {check_name or ''}: failures must be a count (an int >= 0), got {failures!r}")
    key = partition if partition is not None else running_partition()
    head: dict[str, object] = {PARTITION: dg.MetadataValue.text(key)} if key is not None else {}
    head[FAILURES] = dg.MetadataValue.int(failures)
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=check_name,
        passed=passed,
        severity=severity,
        description=description,
        metadata={**head, **md},
    )


def verify_failures(report: VerifyReport) -> int:
    """The problems ``verify_release`` found, a count: one per file listed wrong, per error, and one
    for a root digest that is not the expected one (0 exactly when ``report.ok``)."""
    listed = (report.mismatched, report.missing, report.unlisted, report.not_regular, report.empty_dirs)
    return sum(map(len, listed)) + len(report.errors) + (not report.digest_ok)
