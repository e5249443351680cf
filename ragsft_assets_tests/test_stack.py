"""``ragsft stack``: PostgreSQL, dagster-daemon and dagster-webserver on one machine, as deployed.

The settings tests run everywhere. The stack tests need PostgreSQL's server binaries (Debian's
``postgresql``); without them they skip, unless ``RAGSFT_REQUIRE_STACK=1`` (CI) makes that a failure.
One stack serves the module (a small code location, ``stack_defs``: the project's ``full_job`` and
new-snapshot sensor over one asset in the ``gpu`` pool), with the daemon's intervals at 1 s.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from ragsft_assets.defs.partitions import SNAPSHOT_PARTITIONS_NAME
from ragsft_assets.stack import active
from ragsft_assets.stack.config import (
    DEPLOYED,
    PASSWORD_ENV,
    Intervals,
    helm_daemon_values,
    helm_pools,
    helm_postgres_scheme,
    instance_config,
)
from ragsft_assets.stack.processes import find_pg_bin, postgres_url

REPO = Path(__file__).resolve().parents[1]
RAGSFT = [str(Path(sys.executable).parent / "ragsft")]
REQUIRE_ENV = "RAGSFT_REQUIRE_STACK"


# --- one source for the Helm values and the stack (no PostgreSQL needed) ------------------------


def test_helm_values_are_the_deployed_table() -> None:
    values = yaml.safe_load((REPO / "deploy/helm/values.yaml").read_text())
    assert values["dagsterDaemon"] == helm_daemon_values()
    assert values["postgresql"]["postgresqlScheme"] == helm_postgres_scheme()
    chart = yaml.safe_load((REPO / "deploy/chart/values.yaml").read_text())
    assert {k: chart["pools"][k] for k in helm_pools()} == helm_pools() == {"gpu": 1, "duckdb": 1}
    # A change in the table alone is caught: the rendering follows it.
    changed = {**DEPLOYED, "max_concurrent_runs": 5}
    assert helm_daemon_values(changed) != values["dagsterDaemon"]


def test_stack_instance_config_is_the_deployed_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "not-a-real-password")
    config = instance_config(pg_port=5999, intervals=Intervals())
    assert config["storage"]["postgres"]["postgres_db"]["password"] == {"env": PASSWORD_ENV}
    assert config["storage"]["postgres"]["postgres_db"]["hostname"] == "127.0.0.1"
    helm = helm_daemon_values()
    queue = helm["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert config["run_coordinator"]["config"]["max_concurrent_runs"] == queue["maxConcurrentRuns"] == 4
    assert config["run_coordinator"]["config"]["tag_concurrency_limits"] == queue["tagConcurrencyLimits"]
    assert config["run_monitoring"] == {
        "enabled": True,
        "start_timeout_seconds": helm["runMonitoring"]["startTimeoutSeconds"],
        "poll_interval_seconds": helm["runMonitoring"]["pollIntervalSeconds"],
        "free_slots_after_run_end_seconds": helm["runMonitoring"]["freeSlotsAfterRunEndSeconds"],
    }
    assert config["run_retries"] == {
        "enabled": True,
        "max_retries": helm["runRetries"]["maxRetries"],
        "retry_on_asset_or_op_failure": helm["runRetries"]["retryOnAssetOrOpFailure"],
    }
    fast = instance_config(pg_port=5999, intervals=Intervals.every(1))
    assert fast["run_monitoring"]["poll_interval_seconds"] == 1
    assert fast["run_coordinator"]["config"]["dequeue_interval_seconds"] == 1
    # Dagster's own instance schema accepts it (building the instance would connect to the server).
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config_schema

    assert process_config(dagster_instance_config_schema(), config).success
    broken = {**config, "run_retries": {"enabled": True, "max_retry": 1}}
    assert not process_config(dagster_instance_config_schema(), broken).success


def test_stack_config_prints_the_instance_for_a_vm() -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    out = CliRunner().invoke(main, ["stack", "config", "--pg-host", "db.internal", "--pg-port", "6432"])
    assert out.exit_code == 0, out.output
    config = yaml.safe_load(out.output)
    assert config == instance_config(6432, pg_host="db.internal")
    assert config["storage"]["postgres"]["postgres_db"]["password"] == {"env": PASSWORD_ENV}


def test_up_without_server_binaries_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragsft_assets.stack.processes import StackError, up

    monkeypatch.setenv("RAGSFT_PG_BIN", str(tmp_path / "nowhere"))
    assert find_pg_bin() is None
    with pytest.raises(StackError, match=r"apt-get install -y postgresql.*RAGSFT_PG_BIN"):
        up(tmp_path / "home", echo=lambda _: None)
    assert not (tmp_path / "home" / "stack" / "state.json").exists()


def test_postgres_url_masks_the_password() -> None:
    assert postgres_url(5432) == "postgresql://ragsft:***@127.0.0.1:5432/dagster"


# --- the stack itself ---------------------------------------------------------------------------


def _need_postgres() -> None:
    if find_pg_bin() is None:
        msg = "no PostgreSQL server binaries (apt-get install -y postgresql, or set RAGSFT_PG_BIN)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {msg}")
        pytest.skip(msg)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", PASSWORD_ENV)}
    return {**env, "RAGSFT_HOME": str(home)}


def _cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RAGSFT, *args], env=_env(home), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """A running stack under ``home`` and what the tests need from it."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port

    def state(self) -> dict:
        return active.read_state(self.home)

    def sql(self, query: str, args: tuple = ()) -> list[tuple]:
        import psycopg2

        pg = self.state()["processes"]["postgres"]
        password = active.stack_paths(self.home).password.read_text().strip()
        conn = psycopg2.connect(
            host="127.0.0.1", port=pg["port"], user="ragsft", password=password, dbname="dagster"
        )
        try:
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall()
        finally:
            conn.close()

    def runs(self, **tags: str) -> list[tuple[str, str]]:
        """(run_id, status) of the runs carrying every tag, oldest first."""
        rows = self.sql("SELECT run_id, status FROM runs ORDER BY id")
        out = []
        for run_id, status in rows:
            have = dict(self.sql("SELECT key, value FROM run_tags WHERE run_id = %s", (run_id,)))
            if all(have.get(k) == v for k, v in tags.items()):
                out.append((run_id, status))
        return out

    def graphql(self, query: str, variables: dict) -> dict:
        from ragsft_assets.stack.processes import _graphql

        return _graphql(self.port, query, variables)["data"]

    def add_partition(self, partition: str) -> None:
        mutation = """mutation($r: RepositorySelector!, $n: String!, $k: String!) {
          addDynamicPartition(repositorySelector: $r, partitionsDefName: $n, partitionKey: $k) {
          __typename ... on PythonError { message } } }"""
        repo = {"repositoryLocationName": "ragsft", "repositoryName": "__repository__"}
        out = self.graphql(mutation, {"r": repo, "n": SNAPSHOT_PARTITIONS_NAME, "k": partition})
        assert out["addDynamicPartition"]["__typename"] in (
            "AddDynamicPartitionSuccess",
            "DuplicateDynamicPartitionError",
        ), out

    def launch(self, partition: str) -> str:
        """Launch full_job for ``partition`` as the UI does (through the run queue)."""
        self.add_partition(partition)
        mutation = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
          ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
        params = {
            "selector": {
                "repositoryLocationName": "ragsft",
                "repositoryName": "__repository__",
                "jobName": "full_job",
            },
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
            "runConfigData": {},
        }
        out = self.graphql(mutation, {"p": params})["launchRun"]
        assert out["__typename"] == "LaunchRunSuccess", out
        return out["run"]["runId"]

    def probe(self, run_id: str, what: str) -> Path:
        return self.home / "stack_probe" / f"{run_id}.{what}"

    def hold(self, on: bool) -> None:
        hold = self.home / "stack_probe" / "hold"
        hold.parent.mkdir(parents=True, exist_ok=True)
        if on:
            hold.write_text("")
        else:
            hold.unlink(missing_ok=True)

    def status_of(self, run_id: str) -> str:
        return self.sql("SELECT status FROM runs WHERE run_id = %s", (run_id,))[0][0]

    def reaches(self, run_id: str, status: str) -> bool:
        """Whether the run has ``status``; an ended run that has not fails the test at once."""
        now = self.status_of(run_id)
        if now != status and now in ("SUCCESS", "FAILURE", "CANCELED"):
            raise AssertionError(f"run {run_id} ended {now}, expected {status}:\n{self.failure(run_id)}")
        return now == status

    def failure(self, run_id: str) -> str:
        rows = self.sql(
            "SELECT event FROM event_logs WHERE run_id = %s AND dagster_event_type IN"
            " ('STEP_FAILURE', 'PIPELINE_FAILURE') ORDER BY id",
            (run_id,),
        )
        return "\n".join(_event(e).message[:2000] for (e,) in rows)


def _until(what: str, check: Callable[[], object], timeout: float = 120.0, stack: Stack | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    logs = ""
    if stack is not None:
        log = stack.home / "stack" / "logs" / "daemon.log"
        logs = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    _need_postgres()
    # Under /tmp (not pytest's 0700 tmp root): as root, PostgreSQL runs as `postgres`, which must
    # be able to enter the home.
    home = Path(tempfile.mkdtemp(prefix="ragsft-stack-"))
    port = _free_port()
    up = _cli(
        home,
        "stack",
        "up",
        "--port",
        str(port),
        "--poll-seconds",
        "1",
        "--module",
        "ragsft_assets_tests.stack_defs",
    )
    s = Stack(home, port)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"
        yield s
    finally:
        _cli(home, "stack", "down", timeout=120)


def test_up_status_and_up_again(stack: Stack) -> None:
    pw_file = active.stack_paths(stack.home).password
    assert stat.S_IMODE(pw_file.stat().st_mode) == 0o600
    password = pw_file.read_text().strip()
    out = _cli(stack.home, "stack", "status", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert [(p["name"], p["state"]) for p in info["processes"]] == [
        ("postgres", "running"),
        ("daemon", "running"),
        ("webserver", "running"),
    ]
    assert all(psutil.pid_exists(p["pid"]) for p in info["processes"])
    assert info["postgres_url"].startswith("postgresql://ragsft:***@127.0.0.1:")
    assert (
        password not in out.stdout and password not in (stack.home / "stack/dagster/dagster.yaml").read_text()
    )
    # PostgreSQL listens on 127.0.0.1 only, and never runs as root.
    pg = psutil.Process(info["processes"][0]["pid"])
    assert pg.username() != "root"
    assert {
        c.laddr.ip for c in psutil.net_connections("inet") if c.pid == pg.pid and c.status == "LISTEN"
    } <= {"127.0.0.1"}
    pids = [p["pid"] for p in info["processes"]]
    again = _cli(
        stack.home, "stack", "up", "--port", str(stack.port), "--module", "ragsft_assets_tests.stack_defs"
    )
    assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
    assert [
        p["pid"] for p in json.loads(_cli(stack.home, "stack", "status", "--json").stdout)["processes"]
    ] == pids
    # `ragsft ui` while the stack is up: the stack's webserver, no second daemon (dagster dev's).
    ui = _cli(stack.home, "ui", "--port", str(_free_port()), timeout=60)
    assert ui.returncode == 0 and f"the stack is up: http://127.0.0.1:{stack.port}" in ui.stdout, ui.stderr
    logs = _cli(stack.home, "stack", "logs", "-n", "5")
    assert logs.returncode == 0 and "daemon.log" in logs.stdout


def test_materialize_run_is_a_postgres_row(stack: Stack) -> None:
    """`ragsft materialize` while the stack is up: the CLI finds the stack's instance by itself."""
    trees = REPO / "ragsft_assets_tests/data/oasst1/oasst_en_100_trees.jsonl"
    config = json.dumps({"ops": {"oasst_pairs": {"config": {"trees_path": str(trees), "max_examples": 5}}}})
    out = _cli(stack.home, "materialize", "oasst_pairs", "--config-json", config)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = next(w for w in out.stdout.split() if len(w) == 36 and w.count("-") == 4)
    assert stack.status_of(run_id) == "SUCCESS"
    events = stack.sql(
        "SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'",
        (run_id,),
    )
    assert events == [(1,)]
    # ... and the webserver shows it.
    query = "{ runsOrError { __typename ... on Runs { results { runId status } } } }"
    listed = {r["runId"]: r["status"] for r in stack.graphql(query, {})["runsOrError"]["results"]}
    assert listed[run_id] == "SUCCESS"
    assert not (stack.home / "dagster").exists()  # nothing went to the SQLite instance


def test_copied_snapshot_gets_a_daemon_launched_run(stack: Stack) -> None:
    key = "20240916.fr"
    folder = stack.home / "snapshots" / key
    folder.mkdir(parents=True)
    (folder / "frwiki_namespace_0_0.jsonl.part").write_text("{}\n")  # still being copied: not ready
    time.sleep(4)  # two ticks of the sensor
    assert stack.runs(**{"dagster/partition": key}) == []
    (folder / "frwiki_namespace_0_0.jsonl.part").rename(folder / "frwiki_namespace_0_0.jsonl")
    runs = _until(
        "the sensor's run",
        lambda: stack.runs(**{"dagster/partition": key, "dagster/sensor_name": "new_snapshot_sensor"}),
        stack=stack,
    )
    (run_id, _), *more = runs
    assert not more
    _until("its success", lambda: stack.reaches(run_id, "SUCCESS"), stack=stack)
    assert stack.probe(run_id, "end").exists()


def test_queue_and_gpu_pool_limits(stack: Stack) -> None:
    """One run per partition (the queue's tag limit), one `gpu` step at a time (the pool)."""
    stack.hold(True)
    try:
        a1 = stack.launch("20250101.aa")
        _until("a1's step", lambda: stack.probe(a1, "start").exists(), stack=stack)
        a2 = stack.launch("20250101.aa")  # same partition: waits in the queue (tag limit)
        b1 = stack.launch("20250101.bb")  # another partition: its `gpu` step waits for the one slot
        time.sleep(4)  # four dequeue and monitoring intervals
        assert stack.status_of(a2) == "QUEUED"
        # The queue does not even start a run whose first step's pool is full (dagster 1.13).
        assert stack.status_of(b1) in ("QUEUED", "STARTING", "STARTED")
        assert not stack.probe(b1, "start").exists() and not stack.probe(a2, "start").exists()
        assert stack.status_of(a1) == "STARTED"
    finally:
        stack.hold(False)
    for run in (a1, a2, b1):
        _until(f"{run} done", lambda run=run: stack.reaches(run, "SUCCESS"), stack=stack)

    def span(run: str) -> tuple[float, float]:
        return (
            float(stack.probe(run, "start").read_text().split()[0]),
            float(stack.probe(run, "end").read_text()),
        )

    spans = sorted(span(r) for r in (a1, a2, b1))
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), spans  # never two at once


def _event(text: str):  # noqa: ANN202 - a dagster EventLogEntry
    from dagster._serdes import deserialize_value

    return deserialize_value(text)


def _worker_pid(stack: Stack, run_id: str) -> int | None:
    """The run worker's pid, from dagster's own "Started process for run" engine event."""
    rows = stack.sql(
        "SELECT event FROM event_logs WHERE run_id = %s AND dagster_event_type = 'ENGINE_EVENT'", (run_id,)
    )
    for (text,) in rows:
        entry = _event(text)
        if (entry.message or "").startswith("Started process for run"):
            return int(str(entry.dagster_event.engine_event_data.metadata["pid"].value))
    return None


def test_killed_worker_is_failed_and_retried(stack: Stack) -> None:
    stack.hold(True)
    try:
        run = stack.launch("20250101.cc")
        _until("its step", lambda: stack.probe(run, "start").exists(), stack=stack)
        worker = psutil.Process(_until("the worker's pid", lambda: _worker_pid(stack, run), stack=stack))
        doomed = [worker, *worker.children(recursive=True)]  # SIGKILL, as the OOM killer does
        for proc in doomed:
            proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(doomed, timeout=10)
        _until("run monitoring fails it", lambda: stack.status_of(run) == "FAILURE", stack=stack)
        retry = _until("the retry", lambda: stack.runs(**{"dagster/parent_run_id": run}), stack=stack)
    finally:
        stack.hold(False)
    ((retry_id, _),) = retry
    tags = dict(stack.sql("SELECT key, value FROM run_tags WHERE run_id = %s", (retry_id,)))
    assert tags["dagster/retry_number"] == "1"
    # The dead run's `gpu` slot was freed: the retry's gpu step could run (pool of 1).
    _until("the retry's success", lambda: stack.reaches(retry_id, "SUCCESS"), stack=stack)
    # Failed from outside the dead worker: by run monitoring (the launcher's worker check: "run worker
    # is gone") or, when it notices first, by the code server that started the worker. (With the code
    # server killed too, only run monitoring is left: test_runs_daemon covers that path; here the
    # daemon's retry would wait for the code server to come back.)
    events = [_event(e) for (e,) in stack.sql("SELECT event FROM event_logs WHERE run_id = %s", (run,))]
    failures = [e.message or "" for e in events if e.dagster_event and e.dagster_event.is_run_failure]
    assert failures and all("execution of run" not in m.lower() for m in failures), failures


def test_up_after_postgres_died_starts_all_again_on_the_same_data(stack: Stack) -> None:
    runs_before = stack.sql("SELECT count(*) FROM runs")[0][0]
    old = {name: p["pid"] for name, p in stack.state()["processes"].items()}
    psutil.Process(old["postgres"]).kill()
    out = _cli(
        stack.home,
        "stack",
        "up",
        "--port",
        str(stack.port),
        "--poll-seconds",
        "1",
        "--module",
        "ragsft_assets_tests.stack_defs",
    )
    assert out.returncode == 0 and "PostgreSQL is gone" in out.stdout, out.stdout + out.stderr
    new = {name: p["pid"] for name, p in stack.state()["processes"].items()}
    assert all(new[n] != old[n] and psutil.pid_exists(new[n]) for n in old)
    assert not psutil.pid_exists(old["daemon"]) and not psutil.pid_exists(old["webserver"])
    assert stack.sql("SELECT count(*) FROM runs")[0][0] == runs_before  # the same database


def test_down_leaves_nothing_running(stack: Stack) -> None:
    pids = [p["pid"] for p in stack.state()["processes"].values()]
    out = _cli(stack.home, "stack", "down", timeout=120)
    assert out.returncode == 0 and "no process left" in out.stdout, out.stdout + out.stderr
    assert not any(psutil.pid_exists(p) for p in pids)
    status = json.loads(_cli(stack.home, "stack", "status", "--json").stdout)
    assert {p["state"] for p in status["processes"]} == {"stopped"}
    # No process of this stack is left: nothing runs from its home or with its instance.
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            text = " ".join(proc.info["cmdline"] or []) + json.dumps(proc.info["environ"] or {})
        except psutil.Error:
            continue
        assert str(stack.home) not in text, (proc.pid, proc.info["cmdline"])
    # The CLI is back on the SQLite instance.
    from ragsft_assets.home import dagster_home

    assert active.active_instance(stack.home) is None
    assert dagster_home(stack.home) == stack.home / "dagster" or "DAGSTER_HOME" in os.environ
