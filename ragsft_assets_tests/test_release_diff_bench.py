"""``ragsft bench diff`` at a tiny size: the generated releases diff to the counts their rules give,
through the CLI's closing line, in a child process under the memory bar."""

from __future__ import annotations

from click.testing import CliRunner

from ragsft_assets.bench import diff as bench_diff
from ragsft_assets.cli import main


def test_bench_diff_counts_match_the_generation_rules(tmp_path) -> None:
    res = CliRunner().invoke(main, ["bench", "diff", "--size", "3000", "--workdir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    line = res.output.strip().splitlines()[-1]
    values = dict(part.split("=", 1) for part in line.split())
    assert values["bench"] == "diff" and values["counts_match"] == "true" and values["passed"] == "true"
    want = bench_diff.expected(3000, int(values["questions"]))
    assert int(values["corpus_changed"]) == want["corpus"]["changed"] > 0
    assert int(values["default_added"]) == want["default"]["added"] > 0
    assert "verdict:" in values["reasons_default"] and "revision:" in values["reasons_default"]
