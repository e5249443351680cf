"""``ragsft diff OLD NEW [--config NAME] [--json] [--limit N]``: what changed between two releases."""

from __future__ import annotations

import click


@click.command()
@click.argument("old")
@click.argument("new")
@click.option("--config", "configs", multiple=True, help="Compare only this config (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option(
    "--limit",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Example rows per kind and config.",
)
def diff(old: str, new: str, configs: tuple[str, ...], as_json: bool, limit: int) -> None:
    """Rows added, removed, changed (and why) and unchanged, per config and split, from release OLD to NEW.

    OLD and NEW are partition keys (their current release under $RAGSFT_HOME/releases) or release
    folders. A changed row's reasons: revision, text, documents, split, verdict, recipe, model,
    prompt (content when the provenance names none); an added or removed row shows the stage that
    let it in or dropped it.
    """
    import orjson

    from ragsft_assets.release.diff import diff_releases, format_diff, resolve_release

    try:
        result = diff_releases(
            resolve_release(old), resolve_release(new), configs=list(configs) or None, limit=limit
        )
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from e
    except KeyError as e:
        raise click.ClickException(str(e.args[0])) from e
    if as_json:
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(format_diff(result), nl=False)
