"""``ragsft ui``: ``dagster dev`` on the project's instance (the one the CLI and ``ragsft demo`` use)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from ragsft_assets.cli.instance import ensure_instance_home


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--port", default=3000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def ui(port: int, host: str, extra: tuple[str, ...]) -> None:
    """Open the Dagster UI (webserver + daemon) on the shared RAGSFT_HOME instance."""
    home = ensure_instance_home()
    repo_root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "dagster", "dev", "-h", host, "-p", str(port)]
    workspace = repo_root / "workspace.yaml"
    cmd += ["-w", str(workspace)] if workspace.exists() else ["-m", "ragsft_assets.definitions"]
    click.echo(f"ragsft ui: DAGSTER_HOME={home} -> http://{host}:{port}")
    env = dict(os.environ, DAGSTER_HOME=home)
    raise SystemExit(subprocess.call([*cmd, *extra], env=env, cwd=repo_root))
