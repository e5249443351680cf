"""Where a home's stack keeps its files, and whether it is up (cheap: ``home.dagster_home`` asks).

A stack is up when its state file names a PostgreSQL process that still runs (same pid and start
time). Then the CLI's instance is the stack's (``$RAGSFT_HOME/stack/dagster``, PostgreSQL), and the
password variable its ``dagster.yaml`` names is set from the 0600 password file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from ragsft_assets.stack.config import PASSWORD_ENV


def stack_dir(home: Path) -> Path:
    return home / "stack"


def state_file(home: Path) -> Path:
    return stack_dir(home) / "state.json"


def password_file(home: Path) -> Path:
    return stack_dir(home) / "postgres.password"


def instance_dir(home: Path) -> Path:
    return stack_dir(home) / "dagster"


def read_state(home: Path) -> dict:
    """The state ``ragsft stack up`` wrote ({} when none, or unreadable)."""
    try:
        return json.loads(state_file(home).read_text(encoding="utf-8"))
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
            os.environ[PASSWORD_ENV] = password_file(home).read_text(encoding="utf-8").strip()
        except OSError:
            return None
    return instance_dir(home)
