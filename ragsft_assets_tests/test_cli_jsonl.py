"""The commands' JSON-lines reading: line numbers in every error, gzip by name, blank lines skipped."""

from __future__ import annotations

import gzip
from pathlib import Path

import click
import pytest

from ragsft_assets.cli.jsonl import json_objects
from ragsft_assets.cli.recall import read_full
from ragsft_assets.cli.syntactic import read_passages


def test_objects_with_their_line_numbers_plain_and_gzipped(tmp_path: Path) -> None:
    text = b'{"a": 1}\n\n{"b": 2}\n'
    (tmp_path / "x.jsonl").write_bytes(text)
    (tmp_path / "x.jsonl.gz").write_bytes(gzip.compress(text))
    for name in ("x.jsonl", "x.jsonl.gz"):
        assert list(json_objects(tmp_path / name, "an object")) == [(1, {"a": 1}), (3, {"b": 2})]


@pytest.mark.parametrize(
    "text, message",
    [(b'{"a": 1}\n{oops\n', r"x.jsonl:2: not valid JSON"), (b"[1, 2]\n", r"x.jsonl:1: expected an object")],
)
def test_bad_lines_name_the_file_and_line(tmp_path: Path, text: bytes, message: str) -> None:
    (tmp_path / "x.jsonl").write_bytes(text)
    with pytest.raises(click.ClickException, match=message):
        list(json_objects(tmp_path / "x.jsonl", "an object"))


def test_each_command_checks_its_own_fields(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_bytes(b'{"id": "a", "passage": "text"}\n{"id": "b"}\n')
    with pytest.raises(click.ClickException, match=r"p.jsonl:2: field 'passage' is missing"):
        read_passages(tmp_path / "p.jsonl")
    (tmp_path / "full.jsonl").write_bytes(b'{"id": "a", "claims": "none"}\n')
    with pytest.raises(
        click.ClickException, match=r"full.jsonl:1: expected a -full record with a claims list"
    ):
        read_full(tmp_path / "full.jsonl")
