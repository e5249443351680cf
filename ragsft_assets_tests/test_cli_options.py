"""cli.options: the shared file types and --verbose behave the same in every command that uses them."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.cli.options import INPUT_FILE, OUTPUT_FILE, verbose_option


@click.command()
@click.argument("src", type=INPUT_FILE)
@click.option("--out", type=OUTPUT_FILE)
@verbose_option
def _probe(src: Path, out: Path | None, verbose: bool) -> None:
    click.echo(f"{type(src).__name__} {type(out).__name__} {verbose}")


def test_input_file_must_exist_and_be_a_file_and_arrives_as_a_path(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text("{}\n")
    ok = CliRunner().invoke(_probe, [str(f), "--out", str(tmp_path / "o.jsonl"), "--verbose"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip() == "PosixPath PosixPath True"
    missing = CliRunner().invoke(_probe, [str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    folder = CliRunner().invoke(_probe, [str(tmp_path)])
    assert folder.exit_code == 2 and "is a directory" in folder.output
    to_folder = CliRunner().invoke(_probe, [str(f), "--out", str(tmp_path)])
    assert to_folder.exit_code == 2 and "is a directory" in to_folder.output


def test_commands_reading_a_file_refuse_a_missing_one(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    for args in (["plan", "sample.fr", "--config", missing], ["agreement", missing], ["syntactic", missing]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and "does not exist" in res.output, (args, res.output)
