"""Issue 34: the new-snapshot sensor never takes a folder mid-copy.

``kubectl cp``, ``cp`` and ``snapshots add`` all write final names, so a ``.part`` suffix cannot tell.
A folder is ready when ``snapshots add`` wrote its manifest last (atomically) and the folder holds
exactly those files, or, copied by hand, when its files' names, sizes and times are the same at two
ticks in a row (the cursor keeps what the previous tick saw).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.automation.discovery import (
    list_snapshot_folders,
    plan_tick,
    read_cursor,
    read_waiting,
    scan_snapshots,
)
from ragsft_assets.cli.snapshots import install_snapshot
from ragsft_assets.defs.automation.sensors import build_new_snapshot_sensor
from ragsft_assets.defs.jobs import full_job
from ragsft_assets.defs.partitions import snapshot_partitions

KEY = "20250301.fr"


@dg.asset(partitions_def=snapshot_partitions, group_name="corpus")
def _probe() -> None:
    """A stand-in asset so that full_job has something to select."""


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, cursor: str | None):
    defs = dg.Definitions(assets=[_probe], jobs=[full_job], sensors=[sensor])
    context = dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor, definitions=defs)
    data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return data


def _append(path: Path, text: str, mtime: int | None = None) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
    if mtime is not None:  # `kubectl cp` (tar) sets each file's original time once it is written
        os.utime(path, (mtime, mtime))


def test_a_hand_copied_folder_is_taken_once_unchanged_over_two_ticks(tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    folder = root / KEY
    folder.mkdir(parents=True)
    dump = folder / "frwiki_namespace_0_0.jsonl"
    _append(dump, '{"name": "A"}\n', mtime=1_700_000_000)  # an old time, as tar restores it
    sensor = build_new_snapshot_sensor(lister=lambda seen: scan_snapshots(root, seen, environ={}))
    (tmp_path / "dh").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dh"))

    first = _tick(sensor, instance, None)
    assert not first.run_requests and KEY in read_waiting(first.cursor)
    _append(dump, '{"name": "B"}\n', mtime=1_700_000_000)  # still growing: same time, another size
    second = _tick(sensor, instance, first.cursor)
    assert not second.run_requests and read_waiting(second.cursor)[KEY] != read_waiting(first.cursor)[KEY]
    (folder / "frwiki_namespace_0_1.jsonl").write_text('{"name": "C"}\n', encoding="utf-8")  # a new file
    third = _tick(sensor, instance, second.cursor)
    assert not third.run_requests
    fourth = _tick(sensor, instance, third.cursor)  # nothing changed since the last tick: ready
    assert [r.partition_key for r in fourth.run_requests] == [KEY]
    assert KEY in read_cursor(fourth.cursor) and read_waiting(fourth.cursor) == {}
    assert not _tick(sensor, instance, fourth.cursor).run_requests  # requested once


def test_a_folder_snapshots_add_completed_is_ready_at_once(tmp_path: Path) -> None:
    source = tmp_path / "dumps"
    source.mkdir()
    (source / "frwiki_namespace_0_0.jsonl").write_text('{"name": "A"}\n', encoding="utf-8")
    home = tmp_path / "home"
    install_snapshot(KEY, source, home)
    root = home / "snapshots"
    assert list_snapshot_folders(root) == [KEY]
    # a file added or grown by hand afterwards: no longer what `add` wrote, so it waits again
    _append(root / KEY / "frwiki_namespace_0_0.jsonl", '{"name": "B"}\n')
    ready, waiting = scan_snapshots(root, None, environ={})
    assert ready == [] and list(waiting) == [KEY]
    assert scan_snapshots(root, waiting, environ={}) == ([KEY], {})


def test_a_manifest_that_is_not_json_is_not_ready(tmp_path: Path) -> None:
    folder = tmp_path / KEY
    folder.mkdir()
    (folder / "frwiki_namespace_0_0.jsonl").write_text("{}\n", encoding="utf-8")
    (folder / "snapshot-added.json").write_text('{"files": {"frwiki_namespace_0_0', encoding="utf-8")
    assert list_snapshot_folders(tmp_path) == []


@pytest.mark.parametrize("cursor", [None, "not json", '{"handled": ["x.fr"], "waiting": ["bad"]}'])
def test_the_cursor_keeps_waiting_folders_and_reads_old_cursors(cursor: str | None) -> None:
    plan = plan_tick(["a.fr"], [], cursor, cap=4, waiting={"b.fr": "0123"})
    assert plan.to_request == ["a.fr"] and read_waiting(plan.cursor) == {"b.fr": "0123"}
    assert read_waiting(cursor) == {}
