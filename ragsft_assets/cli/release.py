"""``ragsft verify FOLDER [--digest SHA | --catalog]``, ``ragsft catalog [--rebuild] [--sql Q]``, ``ragsft explain ID``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--digest", default=None, help="The root digest printed when the release was built (SHA-256).")
@click.option(
    "--catalog",
    "use_catalog",
    is_flag=True,
    help="Check against the root digest recorded for FOLDER in $RAGSFT_HOME/release_digests.jsonl.",
)
def verify(folder: Path, digest: str | None, use_catalog: bool) -> None:
    """Recompute every SHA-256 of release FOLDER against its manifests (exit 1 on any difference).

    The manifests certify the files and provenance/release.json certifies the manifests; give the
    root digest (--digest, or --catalog for the recorded one) to catch an edit that re-hashed them.
    """
    from ragsft_assets.release.catalog import digests_path, recorded_digest
    from ragsft_assets.release.verify import verify_release

    if digest is not None and use_catalog:
        raise click.UsageError("give --digest or --catalog, not both")
    if digest is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", digest.strip()):
        # an empty value once turned the check off (`if expected_digest`): it is an error
        raise click.BadParameter(
            f"{digest!r} is not a SHA-256 (64 hex digits): give the root digest printed when the "
            "release was built, or --catalog for the recorded one",
            param_hint="--digest",
        )
    if use_catalog:
        digest = recorded_digest(folder)
        if digest is None:
            raise click.ClickException(f"no root digest recorded for {folder.resolve()} in {digests_path()}")
    report = verify_release(folder, expected_digest=digest)
    for line in report.lines():
        click.echo(line)
    sys.exit(0 if report.ok else 1)


@click.command()
@click.option("--rebuild", is_flag=True, help="Rebuild the views from what is materialized now.")
@click.option("--sql", "query", default=None, help="Run one query (read-only) and print the rows.")
def catalog(rebuild: bool, query: str | None) -> None:
    """Open (or build) $RAGSFT_HOME/catalog.duckdb: one schema per partition, one view per asset."""
    from ragsft_assets.cli.home_check import require_home
    from ragsft_assets.release.catalog import catalog_path, list_views, open_catalog

    require_home("catalog")  # no catalog.duckdb (and with it a home) made in a folder without one
    con = open_catalog(rebuild=rebuild)
    try:
        if query:
            cur = con.execute(query)
            click.echo("\t".join(d[0] for d in cur.description))
            for row in cur.fetchall():
                click.echo("\t".join(str(v) for v in row))
            return
        from ragsft_assets.home import describe_home

        click.echo(f"catalog: {catalog_path()}  ({describe_home()})")
        click.echo('  query it with: ragsft catalog --sql "SELECT ..."  (read-only), or from Python:')
        click.echo(f"  duckdb.connect('{catalog_path()}', read_only=True)")
        for schema, view in list_views(con):
            click.echo(f'  "{schema}".{view}' if schema != "main" else f"  {view}")
    finally:
        con.close()


@click.command()
@click.argument("row_id")
@click.option("--partition", default=None, help="Snapshot key (default: search every partition).")
def explain(row_id: str, partition: str | None) -> None:
    """Print the chain behind one row: question, pair, documents, revisions, verdicts, LLM calls.

    ROW_ID may be any candidate of the ledger, a dropped one too: its stages, the stage and reason
    that dropped it, and its LLM calls.
    """
    from ragsft_assets.cli.home_check import require_home
    from ragsft_assets.home import describe_home
    from ragsft_assets.release.explain import explain as explain_row
    from ragsft_assets.release.explain import format_trace

    require_home("explain")
    try:
        trace = explain_row(row_id, partition=partition)
    except KeyError as e:
        raise click.ClickException(f"{e.args[0]}\n  home: {describe_home()}") from e
    click.echo(format_trace(trace))


@click.group("release")
def release_group() -> None:
    """Releases built for review (RAGSFT_PUBLISH=review): ``ragsft release promote KEY``."""


@release_group.command()
@click.argument("key")
def promote(key: str) -> None:
    """Swap the release of KEY that waits for review (releases/.pending/KEY) into releases/KEY.

    The pending release must verify (every SHA-256 of its manifests); the release it replaces is
    kept as releases/.previous/KEY, and the new root digest is recorded for ``verify --catalog``.
    """
    from ragsft_assets.home import releases_dir
    from ragsft_assets.release.catalog import record_release_digest
    from ragsft_assets.release.diff import pending_dir, previous_dir
    from ragsft_assets.release.diff import promote as promote_release
    from ragsft_assets.release.manifest import root_digest
    from ragsft_assets.release.verify import verify_release

    target = releases_dir() / key
    pending = pending_dir(target)
    if not pending.is_dir():
        raise click.ClickException(
            f"no release of {key!r} waits for review at {pending} (a run with RAGSFT_PUBLISH=review builds one)"
        )
    report = verify_release(pending)
    if not report.ok:
        lines = "\n".join(report.lines())
        raise click.ClickException(f"{pending} does not verify, not promoted:\n{lines}")
    had = (target / "README.md").is_file()
    promote_release(target)
    digest = root_digest(target)
    record_release_digest(target, key, digest, "promote")
    kept = f"; the release it replaced is kept at {previous_dir(target)}" if had else ""
    click.echo(f"promoted {key}: {target} (root digest {digest}){kept}")
