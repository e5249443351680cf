"""New-snapshot sensor (cursor, cap, restart), monthly schedule, failure reporter, retry policy."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.automation.discovery import (
    available_snapshots,
    list_snapshot_folders,
    plan_tick,
    read_cursor,
    scan_snapshots,
    write_cursor,
)
from ragsft_assets.defs.automation import defs as automation_defs
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.automation.sensors import (
    build_monthly_schedule,
    build_new_snapshot_sensor,
    run_failure_reporter,
)
from ragsft_assets.defs.jobs import full_job
from ragsft_assets.defs.partitions import SNAPSHOT_PARTITIONS_NAME, snapshot_partitions


def _add_snapshot(root: Path, key: str, name: str = "frwiki_namespace_0_0.jsonl") -> None:
    """A folder as `ragsft snapshots add` leaves it: the dump, then its manifest (ready at once)."""
    from ragsft_assets.cli.snapshots import write_added_manifest

    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("{}\n")
    write_added_manifest(folder, key)


@dg.asset(partitions_def=snapshot_partitions, group_name="corpus")
def _probe() -> None:
    """A stand-in asset so that full_job (which selects the snapshot families' groups) has something to select."""


def _temp_instance(tmp_path: Path) -> dg.DagsterInstance:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return dg.DagsterInstance.local_temp(str(home))


def _defs(sensor: dg.SensorDefinition) -> dg.Definitions:
    return dg.Definitions(assets=[_probe], jobs=[full_job], sensors=[sensor])


def _tick(
    defs: dg.Definitions, sensor: dg.SensorDefinition, instance: dg.DagsterInstance, cursor: str | None
):
    """Evaluate one tick the way the daemon does, then apply its partition requests to the instance."""
    # With an instance_ref the context resolves partitioned run requests against the instance's
    # partitions plus the tick's own add requests, as the daemon does: a request for a key that is
    # neither would fail here.
    context = dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor, definitions=defs)
    data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return data


def test_folder_listing_keeps_ready_snapshot_folders(tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    _add_snapshot(root, "20240916.fr")
    _add_snapshot(root, "20240901.en", "enwiki-20240901-pages-articles1.xml.bz2")
    _add_snapshot(root, "not a key")
    (root / "20241001.fr").mkdir()  # empty: not ready
    _add_snapshot(root, "20241101.fr", "part1.jsonl.gz.part")  # still being copied
    (root / "20241101.fr" / "done.jsonl").write_text("{}\n")
    assert list_snapshot_folders(root) == ["20240901.en", "20240916.fr"]
    assert list_snapshot_folders(tmp_path / "missing") == []
    assert available_snapshots(root, environ={}) == ["20240901.en", "20240916.fr"]


def test_plan_tick_caps_and_skips_partitions() -> None:
    plan = plan_tick(["c.fr", "a.fr", "b.fr", "d.fr"], partitions=["b.fr"], cursor=None, cap=2)
    assert plan.to_request == ["a.fr", "c.fr"]
    assert plan.already_partitions == ["b.fr"]
    assert read_cursor(plan.cursor) == {"a.fr", "b.fr", "c.fr"}
    assert plan.remaining == 1
    assert read_cursor("not json") == set() and read_cursor(None) == set()
    assert write_cursor(["b", "a", "a"]) == '{"handled":["a","b"]}'
    with pytest.raises(ValueError, match="cap"):
        plan_tick([], [], None, cap=0)


def test_sensor_adds_partitions_requests_runs_and_restarts_from_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    monkeypatch.setenv("RAGSFT_SENSOR_MAX_RUNS_PER_TICK", "2")
    root = tmp_path / "snapshots"
    for key in ("20240916.fr", "20241001.fr", "20241016.fr"):
        _add_snapshot(root, key)
    sensor = build_new_snapshot_sensor(lister=lambda seen: scan_snapshots(root, seen, environ={}))
    defs = _defs(sensor)
    instance = _temp_instance(tmp_path)

    first = _tick(defs, sensor, instance, cursor=None)
    assert [r.partition_key for r in first.run_requests] == ["20240916.fr", "20241001.fr"]  # capped at 2
    assert [r.run_key for r in first.run_requests] == ["snapshot:20240916.fr", "snapshot:20241001.fr"]
    assert [list(r.partition_keys) for r in first.dynamic_partitions_requests] == [
        ["20240916.fr", "20241001.fr"]
    ]
    assert first.dynamic_partitions_requests[0].partitions_def_name == SNAPSHOT_PARTITIONS_NAME
    assert all(r.job_name in (None, "full_job") for r in first.run_requests)
    saved = first.cursor

    # The daemon restarts: a fresh context from the saved cursor gets the third snapshot only.
    second = _tick(defs, sensor, instance, cursor=saved)
    assert [r.partition_key for r in second.run_requests] == ["20241016.fr"]
    third = _tick(defs, sensor, instance, cursor=second.cursor)
    assert not third.run_requests and third.skip_message == "no new snapshot"
    assert sorted(instance.get_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME)) == [
        "20240916.fr",
        "20241001.fr",
        "20241016.fr",
    ]

    # A new folder appears later; one added by hand (`ragsft snapshots add`) is not run again.
    _add_snapshot(root, "20241101.fr")
    _add_snapshot(root, "20241116.fr")
    instance.add_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME, ["20241116.fr"])
    fourth = _tick(defs, sensor, instance, cursor=third.cursor)
    assert [r.partition_key for r in fourth.run_requests] == ["20241101.fr"]
    assert read_cursor(fourth.cursor) >= {"20241101.fr", "20241116.fr"}


def test_sensor_default_listing_uses_ragsft_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    monkeypatch.delenv("RAGSFT_SNAPSHOT_SOURCE", raising=False)
    _add_snapshot(tmp_path / "snapshots", "sample.fr")
    sensor = next(s for s in automation_defs.sensors if s.name == "new_snapshot_sensor")
    instance = _temp_instance(tmp_path)
    data = _tick(_defs(sensor), sensor, instance, cursor=None)
    assert [r.partition_key for r in data.run_requests] == ["sample.fr"]


def test_monthly_schedule_is_off_by_default_and_adds_new_partitions(tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    _add_snapshot(root, "20240916.fr")
    schedule = build_monthly_schedule(lister=lambda seen: scan_snapshots(root, seen, environ={}))
    shipped = automation_defs.schedules[0]
    assert shipped.default_status == dg.DefaultScheduleStatus.STOPPED
    assert shipped.cron_schedule == "0 4 2 * *" and shipped.job_name == "full_job"
    instance = _temp_instance(tmp_path)
    when = dt.datetime(2026, 8, 2, 4, 0, tzinfo=dt.UTC)
    requests = schedule(
        dg.build_schedule_context(instance_ref=instance.get_ref(), scheduled_execution_time=when)
    )
    assert [(r.partition_key, r.run_key) for r in requests] == [("20240916.fr", "snapshot:20240916.fr")]
    assert instance.get_dynamic_partitions(SNAPSHOT_PARTITIONS_NAME) == ["20240916.fr"]
    again = schedule(
        dg.build_schedule_context(instance_ref=instance.get_ref(), scheduled_execution_time=when)
    )
    assert isinstance(again, dg.SkipReason)


# --- failure reports ----------------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def webhook():
    _Recorder.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Recorder.received
    server.shutdown()
    server.server_close()


@dg.op
def _boom() -> None:
    raise RuntimeError("the judge endpoint is down")


@dg.job
def _failing_job() -> None:
    _boom()


def _failure_context(instance: dg.DagsterInstance) -> dg.RunFailureSensorContext:
    result = _failing_job.execute_in_process(
        instance=instance, raise_on_error=False, tags={"dagster/partition": "sample.fr"}
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    event = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
    context = dg.build_run_status_sensor_context(
        sensor_name="run_failure_reporter", dagster_event=event, dagster_instance=instance, dagster_run=run
    )
    return context.for_run_failure()


def test_failure_reporter_posts_to_webhook(webhook, monkeypatch: pytest.MonkeyPatch) -> None:
    url, received = webhook
    monkeypatch.setenv("RAGSFT_FAILURE_WEBHOOK", url)
    monkeypatch.setenv("RAGSFT_UI_URL", "http://127.0.0.1:3000/")
    with dg.DagsterInstance.ephemeral() as instance:
        context = _failure_context(instance)
        run_failure_reporter(context)
    assert len(received) == 1
    payload = received[0]
    assert payload["job"] == "_failing_job" and payload["partition"] == "sample.fr"
    assert payload["failed_steps"] == ["_boom"]
    assert payload["run_id"] == context.dagster_run.run_id
    assert payload["ui_url"] == f"http://127.0.0.1:3000/runs/{payload['run_id']}"
    assert "_failing_job" in payload["text"] and "failed" in payload["text"]


def test_failure_reporter_without_or_with_dead_webhook_does_not_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    with dg.DagsterInstance.ephemeral() as instance:
        context = _failure_context(instance)
        monkeypatch.delenv("RAGSFT_FAILURE_WEBHOOK", raising=False)
        run_failure_reporter(context)
        monkeypatch.setenv("RAGSFT_FAILURE_WEBHOOK", dead)
        run_failure_reporter(context)


def test_llm_retry_policy_backs_off() -> None:
    assert LLM_RETRY_POLICY.max_retries >= 2
    assert LLM_RETRY_POLICY.backoff == dg.Backoff.EXPONENTIAL
    assert LLM_RETRY_POLICY.delay and LLM_RETRY_POLICY.delay > 0


def test_discovery_logic_does_not_import_the_wiring() -> None:
    """Logic lives below the wiring: the discovery module and the snapshot layout import no ``defs``."""
    import subprocess
    import sys

    code = (
        "import sys, ragsft_assets.automation.discovery, ragsft_assets.corpus.snapshot_layout\n"
        "bad = sorted(m for m in sys.modules if m.startswith('ragsft_assets.defs'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_one_definition_of_dump_suffixes_and_hub_dataset() -> None:
    from ragsft_assets.automation import discovery
    from ragsft_assets.corpus import snapshot_layout, structured_wikipedia
    from ragsft_assets.defs import partitions

    assert discovery.DUMP_SUFFIXES is snapshot_layout.DUMP_SUFFIXES
    assert structured_wikipedia.DUMP_SUFFIXES is snapshot_layout.DUMP_SUFFIXES
    assert discovery.HUB_DATASET is structured_wikipedia.HUB_DATASET is snapshot_layout.HUB_DATASET
    assert partitions.validate_snapshot_key is snapshot_layout.validate_snapshot_key
