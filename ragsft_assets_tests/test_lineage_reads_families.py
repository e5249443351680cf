"""Inputs wired once in the families outside the full job (issue 38): every asset of
``long_context_job`` and ``recall_job`` reads exactly the tables of its declared deps.

Each job runs with its test doubles (as ``test_long_context_job`` and ``test_recall_job``) on a
store that records the reads of each asset (``test_lineage_reads.RecordingStore``). An asset's deps
name assets; the tables it may read are theirs (``long_context.steps.store_names``: an ``lc_`` table
and its lineage). A read of a table no dep writes, or a dep none of whose tables is read, fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.long_context.steps import store_names
from ragsft_assets_tests.test_lineage_reads import NOT_INPUTS, READS, RecordingStore


def _mismatches(
    defs_job: dg.JobDefinition, done: set[str], tables: Callable[[str], Iterable[str]]
) -> dict[str, dict[str, list[str]]]:
    """Per materialized asset: the tables read that no dep writes, and the deps none of whose
    tables was read."""
    graph = defs_job.asset_layer.asset_graph
    wrong = {}
    for asset in sorted(done):
        key = dg.AssetKey.from_user_string(asset)
        own = set(tables(key.path[-1]))
        read = READS.get(asset, set()) - NOT_INPUTS - own
        deps = {d.path[-1]: set(tables(d.path[-1])) for d in graph.get(key).parent_keys}
        allowed = set().union(*deps.values()) if deps else set()
        unread = sorted(d for d, names in deps.items() if not names & read)
        if read - allowed or unread:
            wrong[asset] = {"read, no dep writes it": sorted(read - allowed), "dep, not read": unread}
    return wrong


def _done(result: dg.ExecuteInProcessResult) -> set[str]:
    """The assets the run built (a long-context variant no recipe of the source builds reads
    nothing: its metadata says ``built`` false)."""
    assert result.success
    return {
        e.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
        if getattr(e.materialization.metadata.get("built"), "value", True) is not False
    }


def test_long_context_assets_read_exactly_their_deps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragsft_assets_tests import test_long_context_job as lc

    home = tmp_path / "home"
    lc.installed_narrativeqa(home, monkeypatch)
    job, instance = lc.long_context_job(
        home, lc.NoChatBackend, [lc.KEY], store=RecordingStore(home=str(home))
    )
    over = {"overrides": {"budget_tokens": lc.BUDGET}}
    ops = {  # the untranslated variants built (the translation calls a model: the chat double refuses)
        "long_context__raft": {"config": {**over, "recipe": "long_context_raft"}},
        "long_context__raft_syntactic": {"config": {**over, "recipe": "long_context_raft_syntactic"}},
        "long_context__clustered": {"config": over},
    }
    READS.clear()
    done = _done(job.execute_in_process(partition_key=lc.KEY, instance=instance, run_config={"ops": ops}))
    assert {f"long_context/{a}" for a in ("examples", "raft_syntactic", "clustered", "release")} <= done
    assert not _mismatches(job, done, store_names)


def test_recall_assets_read_exactly_their_deps(tmp_path: Path) -> None:
    from ragsft_assets_tests import test_recall_job as rc

    home = tmp_path / "home"
    job, instance, _, _ = rc._recall_job(home, store=RecordingStore(home=str(home)))
    READS.clear()
    run_config = {"ops": {"oasst_pairs": {"config": {"trees_path": str(rc.TREES)}}}}
    done = _done(job.execute_in_process(run_config=run_config, instance=instance, partition_key=rc.KEY))
    assert {"claims", "rewrites", "recall_release"} <= done
    assert not _mismatches(job, done, lambda name: (name,))
