"""``ragsft ui``: ``dagster dev`` on the project's instance (the one the CLI and ``ragsft demo`` use)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from ragsft_assets.cli.instance import ensure_instance_home


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--port", default=3000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def ui(port: int, host: str, extra: tuple[str, ...]) -> None:
    """Open the Dagster UI (webserver + daemon) on the shared RAGSFT_HOME instance.

    This process becomes ``dagster dev`` (exec, same pid): a SIGTERM or Ctrl-C sent to it reaches
    ``dagster dev``, which stops its webserver, daemon and code server before it exits.
    """
    home = ensure_instance_home()
    repo_root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "dagster", "dev", "-h", host, "-p", str(port)]
    workspace = repo_root / "workspace.yaml"
    cmd += ["-w", str(workspace)] if workspace.exists() else ["-m", "ragsft_assets.definitions"]
    click.echo(f"ragsft ui: DAGSTER_HOME={home} -> http://{host}:{port}")
    sys.stdout.flush()
    env = dict(os.environ, DAGSTER_HOME=home)
    # dagster dev turns SIGTERM into what SIGINT does. Started in the background of a
    # non-interactive shell, SIGINT is ignored, and with it SIGTERM: dagster dev would then never
    # stop. The default disposition makes Python install its KeyboardInterrupt handler again.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.chdir(repo_root)
    os.execve(sys.executable, [*cmd, *extra], env)
