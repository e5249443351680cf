"""``ragsft materialize``: clear errors before any run (the runs themselves: test_docs_commands)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main


@pytest.fixture
def runner(tmp_home: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_home / "dagster"))  # restored after the test
    return CliRunner()


def test_errors_name_the_fix(runner: CliRunner) -> None:
    out = runner.invoke(main, ["materialize", "*abstracts", "--partition", "nope.fr"])
    assert out.exit_code == 2 and "ragsft snapshots add nope.fr" in out.output, out.output
    out = runner.invoke(main, ["materialize", "*abstracts"])
    assert out.exit_code == 2 and "give --partition KEY" in out.output, out.output
    out = runner.invoke(main, ["materialize", "abstracts,qa/questions", "--partition", "x.fr"])
    assert out.exit_code == 2 and "different partition sets" in out.output, out.output
    out = runner.invoke(main, ["materialize", "no_such_asset", "--partition", "x.fr"])
    assert out.exit_code == 2 and "no_such_asset" in out.output, out.output
    out = runner.invoke(main, ["materialize", "*abstracts", "--partition", "x.fr", "--config-json", "{"])
    assert out.exit_code == 2 and "not JSON" in out.output, out.output


def test_config_files_merge_then_json_wins(tmp_path: Path) -> None:
    from ragsft_assets.cli.materialize import _run_config

    a = tmp_path / "a.yaml"
    a.write_text("ops:\n  x: {config: {n: 1, m: 2}}\n", encoding="utf-8")
    b = tmp_path / "b.json"
    b.write_text('{"ops": {"x": {"config": {"n": 3}}}}', encoding="utf-8")
    got = _run_config('{"ops": {"y": {"config": {}}}}', (a, b))
    assert got == {"ops": {"x": {"config": {"n": 3, "m": 2}}, "y": {"config": {}}}}
