"""Start, check and stop the stack's processes: PostgreSQL, ``dagster-daemon``, ``dagster-webserver``.

Each process is started in its own session (``start_new_session``): it leads a process group that
holds what it starts (code servers, run workers), so ``down`` stops the whole group and then checks
with psutil that nothing of it is left. PostgreSQL refuses to run as root: as root, it runs as the
``postgres`` system user (Debian's package makes it; created here when missing), which owns the data
folder. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from ragsft_assets.stack import active
from ragsft_assets.stack.config import (
    DEFAULT_MODULE,
    DEPLOYED,
    LOCATION,
    PASSWORD_ENV,
    PG_DB,
    PG_USER,
    Intervals,
    dump,
    instance_config,
    workspace_config,
)

NAMES = ("postgres", "daemon", "webserver")  # start order; stopped in reverse
SENSOR = "new_snapshot_sensor"  # on in the stack (the deployment turns it on in the UI)
PG_BIN_ENV = "RAGSFT_PG_BIN"  # a folder holding initdb and postgres, when not Debian's
READY_TIMEOUT = float(os.environ.get("RAGSFT_STACK_READY_TIMEOUT", "300"))  # slow machines load slowly


class StackError(RuntimeError):
    """A stack step failed; the message says what to do."""


# --- PostgreSQL binaries and user -------------------------------------------------------------


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.parent.name.split(".") if p.isdigit())


def find_pg_bin() -> Path | None:
    """The folder of the PostgreSQL server binaries: ``$RAGSFT_PG_BIN``, Debian's newest
    ``/usr/lib/postgresql/<ver>/bin``, or the folder of an ``initdb`` on PATH; None when absent."""
    env = os.environ.get(PG_BIN_ENV)
    if env:
        return Path(env) if (Path(env) / "initdb").is_file() else None
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: _version_key(p.parent))
    if debian:
        return debian[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def require_pg_bin() -> Path:
    found = find_pg_bin()
    if found is None:
        raise StackError(
            "no PostgreSQL server binaries (initdb, postgres): install them, e.g."
            " `apt-get install -y postgresql` (Debian/Ubuntu), or set RAGSFT_PG_BIN to their folder"
        )
    return found


def pg_account() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as: None (this user) unless this is root, then ``postgres``
    (created as a system user when missing)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise StackError("running as root and there is no `postgres` user to run PostgreSQL as: create one")
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"], check=True
    )
    return pwd.getpwnam("postgres")


def _grant_search(paths: active.StackPaths, account: pwd.struct_passwd) -> None:
    """Let ``account`` reach the data folder: search (x, not read) on the home and stack folders,
    and a loud stop when a folder above the home blocks it."""
    for folder in (paths.home, paths.root):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
    for folder in paths.home.parents:
        st = folder.stat()
        if st.st_uid != account.pw_uid and not st.st_mode & stat.S_IXOTH:
            raise StackError(
                f"PostgreSQL runs as user {account.pw_name}, who cannot enter {folder} (mode"
                f" {stat.filemode(st.st_mode)}): put RAGSFT_HOME elsewhere (e.g. under /srv or /tmp) or"
                f" `chmod o+x {folder}`"
            )


def _as_account(account: pwd.struct_passwd | None) -> dict:
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


# --- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the webserver binds: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _spawn(cmd: list[str], log: Path, env: dict[str, str], cwd: Path, account=None) -> dict:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group: `down` stops all it started
            **_as_account(account),
        )
    return {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), "cmd": cmd}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(
    what: str, check: Callable[[], bool], entry: dict, log: Path, timeout: float = READY_TIMEOUT
) -> None:
    """Poll ``check`` until it holds; stop loudly when the process died or time ran out."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            if check():
                return
        except StackError:
            raise
        except Exception as exc:  # not ready yet: connection refused, tables being made...
            last = f"{type(exc).__name__}: {exc}"
        if not active.alive(entry):
            raise StackError(f"{what} exited while starting; the end of {log}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise StackError(
                f"{what} did not answer within {timeout:.0f}s (last: {last}); the end of {log}:\n{_tail(log)}"
            )
        time.sleep(0.5)


def _pg_connect(port: int, password: str, db: str = PG_DB):  # noqa: ANN202 - a psycopg2 connection
    import psycopg2

    return psycopg2.connect(
        host="127.0.0.1", port=port, user=PG_USER, password=password, dbname=db, connect_timeout=3
    )


def postgres_url(port: int, password: str | None = None, db: str = PG_DB) -> str:
    """The database URL; the password masked unless given."""
    return f"postgresql://{PG_USER}:{password if password is not None else '***'}@127.0.0.1:{port}/{db}"


def _init_postgres(paths: active.StackPaths, pg_bin: Path, account: pwd.struct_passwd | None) -> str:
    """The data folder, made once (initdb, scram-sha-256), and the password (0600 file)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    if not paths.password.exists():
        fd = os.open(paths.password, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(24) + "\n")
    os.chmod(paths.password, 0o600)
    password = paths.password.read_text(encoding="utf-8").strip()
    if account is not None:
        _grant_search(paths, account)
    if (paths.data / "PG_VERSION").exists():
        return password
    if paths.data.exists():
        shutil.rmtree(paths.data)  # an initdb that stopped halfway: nothing in it yet
    paths.data.mkdir(mode=0o700)
    # initdb reads the password from a file the postgres user can read: a copy, removed at once.
    pwfile = paths.root / ".initdb-pw"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    try:
        if account is not None:
            os.chown(paths.data, account.pw_uid, account.pw_gid)
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        cmd = [
            str(pg_bin / "initdb"), "-D", str(paths.data), "-U", PG_USER, f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--locale=C",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=paths.root, **_as_account(account))
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise StackError(f"initdb failed ({' '.join(cmd)}):\n{done.stdout}\n{done.stderr}")
    return password


def _start_postgres(
    paths: active.StackPaths, pg_bin: Path, account, port: int, password: str, env: dict
) -> dict:
    cmd = [
        str(pg_bin / "postgres"), "-D", str(paths.data), "-c", "listen_addresses=127.0.0.1",
        "-c", f"port={port}", "-c", "unix_socket_directories=",
    ]  # fmt: skip
    entry = _spawn(cmd, paths.log("postgres"), env, paths.root, account)
    entry["port"] = port
    _wait(
        "PostgreSQL",
        lambda: _pg_connect(port, password, "postgres").close() is None,
        entry,
        paths.log("postgres"),
    )
    conn = _pg_connect(port, password, "postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,))
        if cur.fetchone() is None:
            cur.execute(f"CREATE DATABASE {PG_DB}")
    conn.close()
    return entry


def _dagster_script(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise StackError(
            f"`{name}` not found next to {sys.executable} nor on PATH: install dagster-webserver"
        )
    return found


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


_LOCATION_QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def _location_loaded(port: int) -> bool:
    """True once the webserver has loaded the code location; a load error stops ``up`` loudly."""
    data = _graphql(port, _LOCATION_QUERY)["data"]["workspaceOrError"]
    for entry in data.get("locationEntries", []):
        if entry["name"] == LOCATION:
            loaded = entry.get("locationOrLoadError") or {}
            if loaded.get("__typename") == "PythonError":
                raise StackError(f"the code location `{LOCATION}` failed to load: {loaded['message']}")
            return loaded.get("__typename") == "RepositoryLocation"
    return False


_SENSOR_QUERY = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status } } } }"""
_START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""


def start_sensor(port: int, name: str = SENSOR) -> str:
    """Turn the sensor on through the webserver (as a user does in Automation); its status, or
    "absent" when the code location has no such sensor."""
    selector = {
        "s": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "sensorName": name}
    }
    found = _graphql(port, _SENSOR_QUERY, selector)["data"]["sensorOrError"]
    if found["__typename"] != "Sensor":
        return "absent"
    if found["sensorState"]["status"] == "RUNNING":
        return "RUNNING"
    started = _graphql(port, _START_SENSOR, selector)["data"]["startSensor"]
    if started["__typename"] != "Sensor":
        raise StackError(f"starting {name} failed: {started.get('message', started['__typename'])}")
    return started["sensorState"]["status"]


def _answers_http(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as resp:
        return resp.status == 200


_DAEMONS_QUERY = """{ instance { daemonHealth { allDaemonStatuses { daemonType required healthy } } } }"""


def _daemons_healthy(port: int) -> bool:
    """Every daemon the instance requires (sensors, queue, monitoring, retries...) has beaten."""
    statuses = _graphql(port, _DAEMONS_QUERY)["data"]["instance"]["daemonHealth"]["allDaemonStatuses"]
    return all(d["healthy"] for d in statuses if d["required"])


_SET_POOL = """mutation($k: String!, $n: Int!) { setConcurrencyLimit(concurrencyKey: $k, limit: $n) }"""
_GET_POOL = """query($k: String!) { instance { concurrencyLimit(concurrencyKey: $k) { slotCount } } }"""


def set_pools(port: int, pools: dict[str, int]) -> None:
    """What the chart's hook Job does with `dagster instance concurrency set`, through the webserver."""
    for pool, limit in pools.items():
        _graphql(port, _SET_POOL, {"k": pool, "n": limit})
        got = _graphql(port, _GET_POOL, {"k": pool})["data"]["instance"]["concurrencyLimit"]["slotCount"]
        if got != limit:
            raise StackError(f"the `{pool}` pool's limit is {got} after setting {limit}")


def write_instance(
    paths: active.StackPaths, pg_port: int, intervals: Intervals, module: str, cwd: Path
) -> None:
    paths.instance.mkdir(parents=True, exist_ok=True)
    (paths.instance / "dagster.yaml").write_text(
        dump(
            instance_config(pg_port, intervals),
            "Written by `ragsft stack up` (ragsft_assets/stack/config.py: the Helm values' settings).\n"
            f"The password comes from ${PASSWORD_ENV} (the 0600 file {paths.password}).",
        ),
        encoding="utf-8",
    )
    (paths.root / "workspace.yaml").write_text(
        dump(workspace_config(module, cwd), "Written by `ragsft stack up`: the stack's one code location."),
        encoding="utf-8",
    )


def _save(paths: active.StackPaths, state: dict) -> None:
    paths.state.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def up(
    home: Path,
    port: int = 3000,
    module: str = DEFAULT_MODULE,
    intervals: Intervals | None = None,
    cwd: Path | None = None,
    echo: Callable[[str], None] = print,
) -> dict:
    """Start what is not running (PostgreSQL, then the daemon, then the webserver) and wait until
    each answers. A running stack is left as it is. Returns the state (also in ``state.json``)."""
    paths = active.stack_paths(home)
    cwd = cwd or Path.cwd()
    intervals = intervals or Intervals()
    state = active.read_state(home)
    procs = state.get("processes", {})
    if all(active.alive(procs.get(n)) for n in NAMES):
        echo(f"ragsft stack: already up at {state['url']}")
        return state
    pg_bin = require_pg_bin()
    if not active.alive(procs.get("postgres")) and any(active.alive(procs.get(n)) for n in NAMES[1:]):
        # PostgreSQL died under a running daemon/webserver: it comes back on another port, which they
        # would not see. Start all three afresh.
        echo("ragsft stack: PostgreSQL is gone; stopping the daemon and the webserver to start all again")
        down(home)
        state = active.read_state(home)
        procs = state.get("processes", {})
    account = pg_account()
    password = _init_postgres(paths, pg_bin, account)
    env = {
        **os.environ,
        "RAGSFT_HOME": str(home),
        "DAGSTER_HOME": str(paths.instance),
        PASSWORD_ENV: password,
    }
    env.pop("PGPASSWORD", None)
    if active.alive(procs.get("postgres")):
        pg_port = procs["postgres"]["port"]
    else:
        pg_port = free_port()
        procs["postgres"] = _start_postgres(paths, pg_bin, account, pg_port, password, env)
        echo(f"ragsft stack: postgres pid {procs['postgres']['pid']} on 127.0.0.1:{pg_port}")
    # The daemon and the webserver read the same instance: rewrite it only while neither runs.
    running = [n for n in ("daemon", "webserver") if active.alive(procs.get(n))]
    if not running:
        write_instance(paths, pg_port, intervals, module, cwd)
    else:
        port = state.get("port", port)
    state = {**state, "processes": procs, "port": port, "url": f"http://127.0.0.1:{port}", "module": module}
    _save(paths, state)
    workspace = str(paths.root / "workspace.yaml")
    if not active.alive(procs.get("daemon")):
        procs["daemon"] = _spawn(
            [_dagster_script("dagster-daemon"), "run", "-w", workspace], paths.log("daemon"), env, cwd
        )
        _save(paths, state)
        echo(f"ragsft stack: dagster-daemon pid {procs['daemon']['pid']}")
    if not active.alive(procs.get("webserver")):
        if port_taken(port):
            raise StackError(f"port {port} is taken on 127.0.0.1: `ragsft stack up --port N` with a free one")
        cmd = [_dagster_script("dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w", workspace]
        procs["webserver"] = _spawn(cmd, paths.log("webserver"), env, cwd)
        _save(paths, state)
        echo(
            f"ragsft stack: dagster-webserver pid {procs['webserver']['pid']}; waiting for it and the daemon"
        )
    log = paths.log("webserver")
    _wait("dagster-webserver", lambda: _answers_http(port), procs["webserver"], log)
    _wait("the code location", lambda: _location_loaded(port), procs["webserver"], log)
    _wait("dagster-daemon's heartbeats", lambda: _daemons_healthy(port), procs["daemon"], paths.log("daemon"))
    set_pools(port, DEPLOYED["pools"])
    state["sensor"] = {SENSOR: start_sensor(port)}
    _save(paths, state)
    return state


def status(home: Path) -> dict:
    """Each process with its pid and state, the URL and the masked ``postgres_url``."""
    state = active.read_state(home)
    procs = state.get("processes", {})
    rows = []
    for name in NAMES:
        entry = procs.get(name) or {}
        rows.append(
            {"name": name, "pid": entry.get("pid"), "state": "running" if active.alive(entry) else "stopped"}
        )
    pg_port = (procs.get("postgres") or {}).get("port")
    return {
        "up": all(r["state"] == "running" for r in rows),
        "processes": rows,
        "url": state.get("url"),
        "postgres_url": postgres_url(pg_port) if pg_port else None,
        "dagster_home": str(active.stack_paths(home).instance),
        "logs": {n: str(active.stack_paths(home).log(n)) for n in NAMES},
    }


def _group(entry: dict) -> list[psutil.Process]:
    """A recorded process, everything below it, and every process of its group (a child that
    re-parented to init stays in the group, even after its leader died)."""
    if not entry.get("pid"):
        return []
    leader, born = int(entry["pid"]), float(entry.get("create_time", 0)) - 1.0
    found: dict[int, psutil.Process] = {}
    if active.alive(entry):
        root = psutil.Process(leader)
        found[leader] = root
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found[child.pid] = child
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == leader and proc.create_time() >= born:
                found[proc.pid] = proc
    return list(found.values())


def _signal(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def down(home: Path, timeout: float = 30.0) -> list[str]:
    """Stop the webserver, the daemon (with its code servers and run workers) and PostgreSQL, in
    that order; then check that none of their processes is left. Returns what had to be killed."""
    paths = active.stack_paths(home)
    state = active.read_state(home)
    procs = state.get("processes", {})
    killed: list[str] = []
    # The webserver and the daemon together (each takes seconds to wind down), then PostgreSQL,
    # whose fast shutdown is SIGINT to the postmaster (SIGTERM waits for every client to leave).
    for names, sig in ((("webserver", "daemon"), signal.SIGTERM), (("postgres",), signal.SIGINT)):
        group = [p for n in names for p in _group(procs.get(n) or {})]
        if not group:
            continue
        leaders = {int(procs[n]["pid"]) for n in names if procs.get(n)}
        _signal([p for p in group if p.pid in leaders] if sig == signal.SIGINT else group, sig)
        _, left = psutil.wait_procs(group, timeout=timeout)
        if left:
            killed += [f"pid {p.pid}" for p in left]
            _signal(left, signal.SIGKILL)
            _, left = psutil.wait_procs(left, timeout=10)
        if left:
            raise StackError(f"processes {[p.pid for p in left]} survive SIGKILL")
    if state:
        for entry in procs.values():
            entry["stopped"] = True
        _save(paths, state)
    return killed


def leftovers(home: Path) -> list[int]:
    """Pids of the recorded processes' groups still running (empty after ``down``)."""
    procs = active.read_state(home).get("processes", {})
    return sorted(p.pid for name in NAMES for p in _group(procs.get(name) or {}))
