"""One style of checks (issue 38): every check is a ``check_spec`` of its asset, computed by its
materialization, no Dagster preview API, so loading the definitions warns of nothing; check names
are short (Dagster shows them under their asset's name)."""

from __future__ import annotations

import subprocess
import sys

from ragsft_assets.definitions import defs

LOAD = (
    "import warnings; warnings.simplefilter('error'); "
    "import ragsft_assets.definitions as d; "
    "d.defs.resolve_asset_graph(); d.defs.resolve_all_job_defs(); d.defs.get_repository_def()"
)


def test_loading_the_definitions_prints_no_warning() -> None:
    # a fresh interpreter: a warning shows once per process, and this one has loaded them already.
    # Every warning is an error, a DeprecationWarning too (Python hides those by default: Dagster's
    # on define_asset_job(partitions_def=), to go in 2.0, was one), and the filter is set before
    # any import, so no module's own filter can hide one.
    cmd = [sys.executable, "-W", "error", "-c", LOAD]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]


def test_each_job_runs_on_the_partition_set_its_table_names() -> None:
    """The jobs take no partitions_def (deprecated): each one's set is inferred from its assets,
    and must be the one ``jobs.JOBS`` lists (a job over mixed sets would have none)."""
    from ragsft_assets.defs.jobs import JOBS

    for name, (_groups, parts, _text) in JOBS.items():
        assert defs.resolve_job_def(name).partitions_def == parts, name
    assert defs.resolve_job_def("plan_job").partitions_def.name == "snapshot"


def test_every_check_name_is_short() -> None:
    keys = list(defs.resolve_asset_graph().asset_check_keys)
    assert len(keys) >= 12  # corpus 4, the 5 invariants of multihop_questions, the 3 filtered configs, ...
    long = [k for k in keys if k.asset_key.to_user_string() in k.name]
    assert not long, f"check names that repeat their asset's name: {long}"


def test_every_check_is_a_spec_of_its_asset() -> None:
    """No separate ``@asset_check`` (a partitioned one is Dagster's preview feature): each check is
    declared by the asset that computes it."""
    assert not list(defs.asset_checks or [])
    graph = defs.resolve_asset_graph()
    for key in graph.asset_check_keys:
        assert key in graph.get(key.asset_key).check_keys, key
