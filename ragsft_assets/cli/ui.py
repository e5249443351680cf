"""``ragsft ui``: ``dagster dev`` on the project's instance (the one the CLI and ``ragsft demo`` use)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from ragsft_assets.cli.instance import ensure_instance_home
from ragsft_assets.home import describe_home, ragsft_home


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--port", default=3000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def ui(port: int, host: str, extra: tuple[str, ...]) -> None:
    """Open the Dagster UI (webserver + daemon) on the shared RAGSFT_HOME instance.

    This process becomes ``dagster dev`` (exec, same pid): a SIGTERM or Ctrl-C sent to it reaches
    ``dagster dev``, which stops its webserver, daemon and code server before it exits.
    """
    from ragsft_assets.stack.active import active_instance, read_state

    if "DAGSTER_HOME" not in os.environ and active_instance(ragsft_home()):
        # `ragsft stack up` already serves this instance with its own daemon: a second one (dagster
        # dev's) would tick every sensor twice. Its webserver is the UI.
        click.echo(f"ragsft ui: the stack is up: {read_state(ragsft_home())['url']} (ragsft stack status)")
        return
    home = ensure_instance_home()
    repo_root = Path(__file__).resolve().parents[2]
    # -W: `dagster dev` warns that it is superseded by `dg dev` (a FutureWarning) on every start;
    # this command is the project's way in, so the notice says nothing the user can act on.
    cmd = [sys.executable, "-W", "ignore::FutureWarning", "-m", "dagster", "dev", "-h", host, "-p", str(port)]
    workspace = repo_root / "workspace.yaml"
    cmd += ["-w", str(workspace)] if workspace.exists() else ["-m", "ragsft_assets.definitions"]
    click.echo(f"ragsft ui: DAGSTER_HOME={home} -> http://{host}:{port}  ({describe_home()})")
    sys.stdout.flush()
    # The home made absolute: the processes below start in the instance folder, not the user's.
    # No PYTHONWARNINGS filter: loading the definitions warns of nothing (test_lineage_checks).
    env = dict(os.environ, DAGSTER_HOME=home, RAGSFT_HOME=str(ragsft_home()))
    # dagster dev turns SIGTERM into what SIGINT does. Started in the background of a
    # non-interactive shell, SIGINT is ignored, and with it SIGTERM: dagster dev would then never
    # stop. The default disposition makes Python install its KeyboardInterrupt handler again.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # `dagster dev` warns about any dagster.yaml in its working folder that is not DAGSTER_HOME's
    # (the repository root has one, a template): started in the instance folder, there is none.
    # The workspace's working_directory is relative to workspace.yaml, so the code still loads.
    os.chdir(home)
    os.execve(sys.executable, [*cmd, *extra], env)
