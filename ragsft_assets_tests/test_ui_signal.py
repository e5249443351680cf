"""``ragsft ui`` stopped with SIGTERM leaves no process behind: no dagster dev, webserver, daemon or code server.

It is started as a person (or a supervisor) starts it in the background of a script: SIGINT ignored,
which is what made ``dagster dev`` ignore SIGTERM too. The SIGTERM goes to the ``ragsft ui`` process
only, never to its group: what it started must stop because it was told to, not because the test
killed it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    except OSError as exc:
        pytest.skip(f"no local port can be bound here: {exc}")


def _serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in the background of a non-interactive shell


def test_sigterm_stops_dagster_dev_and_everything_it_started(tmp_path: Path) -> None:
    port = _free_port()
    env = dict(os.environ, RAGSFT_HOME=str(tmp_path / "home"))  # ragsft ui sets DAGSTER_HOME under it
    log = (tmp_path / "ui.log").open("wb")
    ui = subprocess.Popen(
        [sys.executable, "-c", "from ragsft_assets.cli import main; main()", "ui", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_ignore_sigint,  # noqa: PLW1509 - the signal state a background job starts with
        start_new_session=True,  # its own group: the clean-up below can reach whatever survives
    )
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while not _serving(port):
            assert ui.poll() is None, (tmp_path / "ui.log").read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the webserver did not answer in 240 s"
            time.sleep(1)
        # The webserver answers; the daemon and the code server are up by then or starting: wait
        # until the tree stops growing, so that the processes the SIGTERM must stop are all listed.
        me = psutil.Process(ui.pid)
        count, steady = -1, 0
        while steady < 3 and time.monotonic() < deadline:
            children = me.children(recursive=True)
            steady = steady + 1 if len(children) == count else 0
            count = len(children)
            time.sleep(1)
        started = [me, *me.children(recursive=True)]
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert "dagster_webserver" in names and "_daemon" in names, names

        os.kill(ui.pid, signal.SIGTERM)
        ui.wait(timeout=120)
        gone_by = time.monotonic() + 30  # children exit on their own shutdown messages
        while any(_alive(p) for p in started) and time.monotonic() < gone_by:
            time.sleep(0.5)
        survivors = [" ".join(p.cmdline())[:120] for p in started if _alive(p)]
        assert not survivors, f"still running after SIGTERM: {survivors}"
    finally:
        log.close()
        for proc in started:
            if _alive(proc):
                proc.kill()
        with contextlib.suppress(ProcessLookupError):  # the session's group: whatever was not listed
            os.killpg(ui.pid, signal.SIGKILL)
        ui.wait(timeout=30)
