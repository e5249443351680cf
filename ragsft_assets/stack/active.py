"""Where a home's stack keeps its files, and whether it is up (cheap: ``home.dagster_home`` asks).

A stack is up when its state file names a PostgreSQL process that still runs (same pid and start
time). Then the CLI's instance is the stack's (``$RAGSFT_HOME/stack/dagster``, PostgreSQL), and the
password variable its ``dagster.yaml`` names is set from the 0600 password file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import psutil

from ragsft_assets.stack.config import PASSWORD_ENV


class StackPaths(NamedTuple):
    """Where a home's stack keeps its files (``stack_paths`` says which is where)."""

    home: Path
    root: Path
    data: Path
    password: Path
    instance: Path
    logs: Path
    state: Path

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def stack_paths(home: Path) -> StackPaths:
    """The stack's layout: everything under ``<home>/stack``."""
    root = home / "stack"
    return StackPaths(
        home=home,
        root=root,
        data=root / "postgres",  # PostgreSQL's data folder
        password=root / "postgres.password",  # 0600, read into PASSWORD_ENV for dagster.yaml
        instance=root / "dagster",  # the stack's DAGSTER_HOME
        logs=root / "logs",  # one <process>.log per process
        state=root / "state.json",  # what `ragsft stack up` started (pids, ports)
    )


def read_state(home: Path) -> dict:
    """The state ``ragsft stack up`` wrote ({} when none, or unreadable)."""
    try:
        return json.loads(stack_paths(home).state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def alive(entry: dict | None) -> bool:
    """Whether a recorded process (``pid``, ``create_time``) still runs, and is the same process."""
    if not entry or not entry.get("pid"):
        return False
    try:
        proc = psutil.Process(int(entry["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - float(entry.get("create_time", 0))) < 1.0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def active_instance(home: Path) -> Path | None:
    """The stack's DAGSTER_HOME when its PostgreSQL runs, else None. Sets the password variable of
    its ``dagster.yaml`` (from the 0600 file) when unset, so that the instance opens."""
    state = read_state(home)
    if not alive(state.get("processes", {}).get("postgres")):
        return None
    if not os.environ.get(PASSWORD_ENV):
        try:
            os.environ[PASSWORD_ENV] = stack_paths(home).password.read_text(encoding="utf-8").strip()
        except OSError:
            return None
    return stack_paths(home).instance
