"""No credential of a base URL reaches the home, the Dagster instance or stderr, even when runs fail.

The roles are configured the way a user does it (``RAGSFT_<ROLE>_*`` variables read by
``defs.resources.llm_for_role``), with ``http://user:PASS@host/v1?api_key=KEY``; the project's own
assets run in process against a real instance (SQLite under a temporary ``DAGSTER_HOME``):

- a run whose generator answers HTTP 500 to every call, with the role allowing every call to fail
  (so the errors are written: ``question_drafts`` rows and the ledger);
- a run whose judge answers HTTP 500 (``first_hop`` fails the step: STEP_FAILURE, PIPELINE_FAILURE);
- a run whose generator URL is a closed port (RESOURCE_INIT_FAILURE).

Then every file of the home is read as bytes, and every blob of the instance's SQLite databases
is also read decompressed (Dagster stores its snapshots zlib-compressed), and stderr is read too:
neither PASS nor KEY may appear.
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from ragsft_assets.defs.multihop.assets import question_drafts
from ragsft_assets.defs.multihop.filters import first_hop
from ragsft_assets.defs.resources import llm_for_role
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.fake_openai import FakeOpenAI
from ragsft_assets_tests.release_fixtures import PARTITION, write_world

PASS = "PaSs7781zq"
KEY = "KeY9932xw"
SECRETS = (PASS.encode(), KEY.encode())


def _secret_url(port: int) -> str:
    return f"http://user:{PASS}@127.0.0.1:{port}/v1?api_key={KEY}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _failing(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    # a server that quotes the request's credentials back in its error, as some proxies do
    return 500, {}, {"error": f"upstream down (api_key={KEY})"}


def _configure(monkeypatch: pytest.MonkeyPatch, role: str, url: str, **extra: str) -> None:
    prefix = f"RAGSFT_{role.upper()}_"
    settings = {
        "BACKEND": "openai",
        "BASE_URLS": url,
        "MODEL": "served-model",
        "MAX_RETRIES": "0",
        "BACKOFF_S": "0.01",
        "TIMEOUT_S": "2",
        **extra,
    }
    for name, value in settings.items():
        monkeypatch.setenv(prefix + name, value)


def _blobs(db: Path) -> Iterator[bytes]:
    """Every text or blob value of every table of a SQLite database, raw and, where it is, inflated."""
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in con.execute(f'SELECT * FROM "{table}"'):  # noqa: S608 - the database's own names
                for value in row:
                    if isinstance(value, str):
                        value = value.encode()
                    if isinstance(value, bytes):
                        yield value
                        with contextlib.suppress(zlib.error):
                            yield zlib.decompress(value)
    finally:
        con.close()


def _leaks(home: Path) -> list[str]:
    found = []
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if any(s in data for s in SECRETS):
            found.append(str(path))
        sqlite = data[:16] == b"SQLite format 3\x00"
        if sqlite and any(s in blob for blob in _blobs(path) for s in SECRETS):
            found.append(f"{path} (a value, raw or decompressed)")
    return found


def test_no_credential_in_the_home_the_instance_or_stderr_after_failing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    store = ArtifactStore()
    write_world(store)
    pairs = store.read(PARTITION, "bridge_pairs")  # the draw order bridge_pairs records: the rows' order
    store.write(
        pairs.append_column("draw", pa.array(range(pairs.num_rows), pa.int64())), PARTITION, "bridge_pairs"
    )
    with FakeOpenAI(_failing).running() as fleet, dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshot", [PARTITION])
        port = int(fleet.url.rsplit(":", 1)[1].split("/")[0])
        url = _secret_url(port)

        # 1. every generation fails, and the role accepts it: the error texts are written
        _configure(monkeypatch, "generator", url, MAX_ERROR_SHARE="1")
        drafts = dg.materialize(
            [question_drafts],
            # question_drafts also holds the judge and annotator roles (its stream, off here, sends
            # the cascade and the judges' calls)
            resources={"store": store, **{r: llm_for_role(r) for r in ("generator", "judge", "annotator")}},
            partition_key=PARTITION,
            instance=instance,
        )
        assert drafts.success
        errors = store.read(PARTITION, "question_drafts").column("error").to_pylist()
        assert errors and all(e and "HTTP 500 from http://***@127.0.0.1" in e for e in errors), errors[:2]

        # 2. the judge fails every call: the step fails, naming the masked URL
        _configure(monkeypatch, "judge", url)
        _configure(monkeypatch, "annotator", url)

        def first_hop_run():  # the roles as the variables configure them now
            return dg.materialize(
                [first_hop],
                resources={
                    "store": store,
                    "judge": llm_for_role("judge"),
                    "annotator": llm_for_role("annotator"),
                },
                partition_key=PARTITION,
                instance=instance,
                raise_on_error=False,
            )

        judged = first_hop_run()
        assert not judged.success
        failure = next(e for e in judged.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
        message = failure.step_failure_data.error.to_string()
        assert "judge:" in message and "failed in transport" in message and "HTTP 500" in message
        assert f"http://***@127.0.0.1:{port}/v1?api_key=***" in message

        # 3. the judge's URL is a closed port: the resource fails to start, saying where (masked)
        _configure(monkeypatch, "judge", _secret_url(_closed_port()))
        refused = first_hop_run()
        assert not refused.success
        init = [
            e.dagster_event
            for e in instance.all_logs(refused.run_id)
            if e.dagster_event and e.dagster_event.event_type == dg.DagsterEventType.RESOURCE_INIT_FAILURE
        ]
        assert init, "the resource did not fail to start"
        said = init[0].message + init[0].event_specific_data.error.to_string()
        assert "/v1/models answered at none of ['http://***@127.0.0.1:" in said, said
    out, err = capfd.readouterr()
    assert PASS not in out + err and KEY not in out + err
    assert _leaks(home) == []
