"""``ragsft stack``: the deployed topology on this machine (ragsft_assets/stack, docs/deployment.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ragsft_assets.home import ragsft_home


@click.group()
def stack() -> None:
    """PostgreSQL, dagster-daemon and dagster-webserver on this machine, as the Helm chart runs them.

    While the stack is up, `ragsft materialize`, `demo`, `runs` and `ui` use its instance
    ($RAGSFT_HOME/stack/dagster, PostgreSQL); after `ragsft stack down`, the SQLite one again.
    """


@stack.command()
@click.option("--port", default=3000, show_default=True, help="The webserver's port on 127.0.0.1.")
@click.option(
    "--module",
    default="ragsft_assets.definitions",
    show_default=True,
    help="The code location's module (a test serves a small one).",
)
@click.option(
    "--poll-seconds",
    type=click.IntRange(min=1),
    default=None,
    help="Shorten run monitoring's poll, the slot release and the queue's dequeue interval to N"
    " seconds (a rehearsal or a test); default: the deployed values.",
)
def up(port: int, module: str, poll_seconds: int | None) -> None:
    """Start the stack (what is already running is kept), wait until each process answers."""
    from ragsft_assets.stack.config import Intervals
    from ragsft_assets.stack.processes import StackError
    from ragsft_assets.stack.processes import up as stack_up

    intervals = Intervals.every(poll_seconds) if poll_seconds else Intervals()
    t0 = time.monotonic()
    try:
        state = stack_up(ragsft_home(), port=port, module=module, intervals=intervals, echo=click.echo)
    except StackError as exc:
        raise click.ClickException(f"{exc}\n(`ragsft stack down` stops what did start)") from None
    click.echo(f"ragsft stack: up in {time.monotonic() - t0:.0f}s; new_snapshot_sensor {state['sensor']}")
    click.echo(state["url"])


@stack.command()
@click.option("--pg-host", default="127.0.0.1", show_default=True)
@click.option("--pg-port", default=5432, show_default=True, type=int)
def config(pg_host: str, pg_port: int) -> None:
    """Print the stack's dagster.yaml for a PostgreSQL at HOST:PORT (a VM's instance, docs/deployment.md).

    The password is read from $RAGSFT_STACK_PG_PASSWORD when the instance opens; it is never written.
    """
    from ragsft_assets.stack.config import dump, instance_config

    header = "Written by `ragsft stack config` (ragsft_assets/stack/config.py: the Helm values' settings)."
    click.echo(dump(instance_config(pg_port, pg_host=pg_host), header), nl=False)


@stack.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def status(as_json: bool) -> None:
    """Each process with its pid and state; the URL and postgres_url (password masked)."""
    from ragsft_assets.stack.processes import status as stack_status

    info = stack_status(ragsft_home())
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    for row in info["processes"]:
        click.echo(f"{row['name']:10s} {row['state']:8s} pid {row['pid'] or '-'}")
    click.echo(f"url          {info['url'] or '-'}")
    click.echo(f"postgres_url {info['postgres_url'] or '-'}")
    click.echo(f"dagster_home {info['dagster_home']}")


@stack.command()
def down() -> None:
    """Stop the webserver, the daemon (code servers and run workers too) and PostgreSQL."""
    from ragsft_assets.stack.processes import StackError, leftovers
    from ragsft_assets.stack.processes import down as stack_down

    try:
        killed = stack_down(ragsft_home())
    except StackError as exc:
        raise click.ClickException(str(exc)) from None
    if killed:
        click.echo(f"ragsft stack: killed after the grace period: {', '.join(killed)}")
    left = leftovers(ragsft_home())
    if left:
        raise click.ClickException(f"processes still running: {left}")
    click.echo("ragsft stack: down, no process left")


@stack.command()
@click.option("-n", "--lines", default=40, show_default=True, help="Lines of each log.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C stops).")
@click.argument("names", nargs=-1, type=click.Choice(["postgres", "daemon", "webserver"]))
def logs(lines: int, follow: bool, names: tuple[str, ...]) -> None:
    """The end of each process's log (all three unless NAMES)."""
    from ragsft_assets.stack.active import stack_paths

    paths = stack_paths(ragsft_home())
    chosen = names or ("postgres", "daemon", "webserver")
    offsets: dict[str, int] = {}
    for name in chosen:
        log = paths.log(name)
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        click.echo(f"==> {log} <==")
        click.echo("\n".join(text.splitlines()[-lines:]))
        offsets[name] = log.stat().st_size if log.exists() else 0
    while follow:
        time.sleep(1)
        for name in chosen:
            log: Path = paths.log(name)
            if log.exists() and log.stat().st_size > offsets[name]:
                with open(log, "rb") as f:
                    f.seek(offsets[name])
                    chunk = f.read().decode("utf-8", errors="replace")
                    offsets[name] = f.tell()
                for line in chunk.splitlines():
                    click.echo(f"{name}: {line}")
