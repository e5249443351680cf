"""Parameter types and options that several commands share, each spelled once."""

from __future__ import annotations

from pathlib import Path

import click

# A file the command reads: it must exist and not be a folder (click says so before the command runs).
INPUT_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
# A file the command writes (its folder is the command's business).
OUTPUT_FILE = click.Path(dir_okay=False, path_type=Path)

# The commands that run a job in-process (demo, materialize) print Dagster's events only on request.
verbose_option = click.option(
    "--verbose", is_flag=True, help="Print Dagster's event log and the libraries' lines as they come."
)
