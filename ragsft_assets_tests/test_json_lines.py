"""``json_lines.parse_json_lines``: the one JSON-lines reader of the commands, recall and review files."""

from __future__ import annotations

import pytest

from ragsft_assets.json_lines import parse_json_lines


class _Refused(Exception):
    pass


def test_blank_lines_are_skipped_but_keep_their_number() -> None:
    lines = [b'{"a": 1}\n', b"\n", b"   \n", b"[2]\n", '"three"\n']
    assert list(parse_json_lines(lines, "f.jsonl")) == [(1, {"a": 1}), (4, [2]), (5, "three")]


def test_a_bad_line_raises_the_callers_error_naming_file_and_line() -> None:
    with pytest.raises(_Refused, match=r"^f\.jsonl:3: not valid JSON \("):
        list(parse_json_lines([b"{}", b"", b"{oops"], "f.jsonl", _Refused))
    with pytest.raises(ValueError, match=r"^g:1: not valid JSON"):  # ValueError by default
        list(parse_json_lines(["nope"], "g"))
