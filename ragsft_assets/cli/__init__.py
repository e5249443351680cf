"""The ``ragsft`` command: what Dagster's own CLI cannot do.

Each command group lives in its own module; ``main`` registers them lazily so
``ragsft --help`` stays fast and a heavy group (the LLM) loads only when used.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "snapshots": "ragsft_assets.cli.snapshots:snapshots",
    "sources": "ragsft_assets.cli.sources:sources",
    "bench": "ragsft_assets.cli.bench:bench",
    "cache": "ragsft_assets.cli.cache:cache",
    "catalog": "ragsft_assets.cli.release:catalog",
    "explain": "ragsft_assets.cli.release:explain",
    "verify": "ragsft_assets.cli.release:verify",
    "diff": "ragsft_assets.cli.diff:diff",
    "release": "ragsft_assets.cli.release:release_group",
    "citations": "ragsft_assets.cli.citations:citations",
    "syntactic": "ragsft_assets.cli.syntactic:syntactic",
    "demo": "ragsft_assets.cli.demo:demo",
    "materialize": "ragsft_assets.cli.materialize:materialize",
    "plan": "ragsft_assets.cli.plan:plan",
    "ui": "ragsft_assets.cli.ui:ui",
    "runs": "ragsft_assets.cli.runs:runs",
    "agreement": "ragsft_assets.cli.agreement:agreement",
    "review": "ragsft_assets.cli.review:review_group",
    "recall": "ragsft_assets.cli.recall:recall",
    "base-models": "ragsft_assets.cli.base_models:base_models",
    "stack": "ragsft_assets.cli.stack:stack",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
def main() -> None:
    """ragsft: verified RAG training data from Wikipedia snapshots (Dagster asset graph)."""
