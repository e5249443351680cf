"""The mechanical_rules filter: year answers and questions that name the document (both directions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragsft_assets.multihop import mechanical_rules as M

_CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "cases" / "mechanical_rules.jsonl").read_text("utf-8").splitlines()
    if line.strip()
]


@pytest.mark.parametrize(
    "case", _CASES, ids=[f"{c['lang']}:{c['question'][:40]}:{c['answer']}" for c in _CASES]
)
def test_rule_cases_data_file(case: dict) -> None:
    assert M.rule_verdict(case["question"], case["answer"], case["lang"]) == case["expected"]


def test_every_reason_is_covered_in_both_languages() -> None:
    for lang in ("fr", "en"):
        seen = {c["expected"] for c in _CASES if c["lang"] == lang}
        assert seen == {M.KEPT, *M.REASONS}


def test_unknown_language_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no mechanical-rule patterns for language 'de'"):
        M.patterns("de")
