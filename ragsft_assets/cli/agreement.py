"""``ragsft agreement``: validity of kept vs rejected questions, and agreement of two labelings."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ragsft_assets.cli.options import INPUT_FILE


@click.command()
@click.argument("labels_a", type=INPUT_FILE)
@click.argument("labels_b", required=False, type=INPUT_FILE)
@click.option(
    "--key",
    "key_path",
    type=INPUT_FILE,
    help='Key file of JSON lines {"id", "group": "kept"|"rejected"} (from `ragsft review sample`).',
)
def agreement(labels_a: Path, labels_b: Path | None, key_path: Path | None) -> None:
    """Statistics over the ids LABELS_A [LABELS_B] [--key] share; one JSON object on stdout.

    A label file holds JSON lines {"id", "valid": true|false}. With --key: validity among kept vs
    rejected, Fisher's exact p, the sample odds ratio (null with a zero cell), Wilson 95% intervals.
    With LABELS_B: Cohen's kappa and the exact McNemar p with the discordant counts.
    """
    from ragsft_assets.multihop.agreement import AgreementInputError, agreement_report, read_key, read_labels

    try:
        report = agreement_report(
            read_labels(labels_a),
            read_labels(labels_b) if labels_b else None,
            read_key(key_path) if key_path else None,
        )
    except AgreementInputError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(report, indent=2, sort_keys=True))
