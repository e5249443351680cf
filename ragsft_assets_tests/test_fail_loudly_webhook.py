"""The failure webhook never shows its secret path, nor a credential quoted by a failure."""

from __future__ import annotations

import socket

import dagster as dg
import pytest

from ragsft_assets.automation.notify import FailureReport, send_report
from ragsft_assets.defs.automation.sensors import run_failure_reporter

HOOK_SECRET = "XyZhookSecret42"


def _dead_hook() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/services/T0/B0/{HOOK_SECRET}"


def _report(message: str = "boom") -> FailureReport:
    return FailureReport(job="full_job", run_id="r1", partition="x.fr", message=message, failed_steps=["s"])


def test_an_unreachable_hook_is_logged_without_its_path() -> None:
    url = _dead_hook()
    delivered, line = send_report(url, _report(), timeout_s=2)
    assert not delivered
    assert HOOK_SECRET not in line and "/services" not in line
    assert line.startswith("failure webhook http://127.0.0.1/*** unreachable: URLError")
    # a URL the client cannot even parse is refused with the same care
    delivered, line = send_report(f"nope://{HOOK_SECRET}", _report(), timeout_s=2)
    assert not delivered and HOOK_SECRET not in line


def test_the_report_masks_credentials_a_failure_quoted() -> None:
    report = _report("HTTP 500 from http://user:PASSWORD1@gpu/v1?api_key=APIKEY1")
    payload = report.payload()
    assert "PASSWORD1" not in repr(payload) and "APIKEY1" not in repr(payload)
    assert "http://***@gpu/v1?api_key=***" in payload["text"]


def test_the_sensor_logs_the_dead_hook_masked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    @dg.op
    def boom() -> None:
        raise RuntimeError("down")

    @dg.job
    def failing() -> None:
        boom()

    monkeypatch.setenv("RAGSFT_FAILURE_WEBHOOK", _dead_hook())
    with dg.DagsterInstance.ephemeral() as instance:
        result = failing.execute_in_process(instance=instance, raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
        event = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
        context = dg.build_run_status_sensor_context(
            sensor_name="run_failure_reporter",
            dagster_event=event,
            dagster_instance=instance,
            dagster_run=run,
        ).for_run_failure()
        run_failure_reporter(context)
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    assert "failure webhook http://127.0.0.1/*** unreachable" in logged
    assert HOOK_SECRET not in logged
