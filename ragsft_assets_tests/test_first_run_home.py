"""Issue 40: "Running a command outside the project folder silently creates an empty `.ragsft`
there, and `explain` then fails. Say which home is used and how it was found, and offer the
project's if one exists." A command that only reads the home creates none: it says which home it
looked for, how, and the project's; the empty cache and the catalog's own SQL on a fresh home.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsft_assets import home
from ragsft_assets.cli import main


@pytest.fixture
def bare_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder without a home, as the current folder, no RAGSFT_HOME nor DAGSTER_HOME set."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for key in ("RAGSFT_HOME", "DAGSTER_HOME"):  # set then removed: teardown undoes what a command sets
        monkeypatch.setenv(key, os.environ.get(key, ""))
        monkeypatch.delenv(key)
    monkeypatch.setattr(home, "project_home", lambda: None)  # the clone's own .ragsft may exist
    return folder


# (argv, exit code, what it says): every one of them leaves the folder as it was
READ_ONLY = [
    (["explain", "abc"], 1, "nothing to explain"),
    (["catalog"], 1, "nothing to catalog"),
    (["catalog", "--sql", "SELECT 1"], 1, "nothing to catalog"),
    (["plan", "sample.fr"], 1, "nothing to plan"),
    (["runs", "clean", "--dry-run"], 1, "nothing to clean"),
    (["materialize", "abstracts", "--partition", "sample.fr"], 1, "nothing to materialize on sample.fr"),
    (["cache", "stats"], 0, "the LLM cache is empty"),
    (["cache", "show", "abc"], 1, "llm_cache (RAGSFT_HOME="),  # which home it looked in
    (["snapshots", "list"], 0, "no snapshot under"),
    (["snapshots", "remove", "sample.fr"], 0, ""),
    (["sources", "remove", "hotpotqa.en"], 0, ""),
]


@pytest.mark.parametrize(("argv", "code", "says"), READ_ONLY, ids=[" ".join(a[:2]) for a, *_ in READ_ONLY])
def test_a_command_that_reads_the_home_creates_none(
    bare_folder: Path, argv: list[str], code: int, says: str
) -> None:
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == code, out.output
    assert says in out.output, out.output
    assert not (bare_folder / ".ragsft").exists(), (
        f"ragsft {' '.join(argv)} created {bare_folder / '.ragsft'}"
    )
    assert list(bare_folder.iterdir()) == []
    if code == 1 and "nothing to" in says:  # which home, how it was found, what makes one
        where = f"no ragsft home at {bare_folder / '.ragsft'} (./.ragsft of the current folder, no RAGSFT_HOME set)"
        assert where in out.output and "`ragsft snapshots add KEY --sample`" in out.output, out.output


def test_the_missing_home_offers_the_projects(
    bare_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "clone" / ".ragsft"
    project.mkdir(parents=True)
    monkeypatch.setattr(home, "project_home", lambda: project)
    out = CliRunner().invoke(main, ["explain", "abc"])
    assert out.exit_code == 1
    assert f"the project's home is {project}: cd {project.parent} or set RAGSFT_HOME={project}" in out.output
    assert not (bare_folder / ".ragsft").exists()
    # a RAGSFT_HOME that names no folder: said as such, and not created either
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path / "typo"))
    out = CliRunner().invoke(main, ["catalog"])
    assert out.exit_code == 1 and f"no ragsft home at {tmp_path / 'typo'} (from $RAGSFT_HOME)" in out.output
    assert not (tmp_path / "typo").exists()


def test_an_existing_home_is_read_as_before(bare_folder: Path) -> None:
    """The guard stops only a missing home: in a folder with one, the commands answer from it."""
    (bare_folder / ".ragsft").mkdir()
    out = CliRunner().invoke(main, ["catalog"])
    assert out.exit_code == 0, out.output
    assert "ragsft catalog --sql" in out.output and "duckdb -readonly" not in out.output
    assert f"RAGSFT_HOME={bare_folder / '.ragsft'} (./.ragsft of the current folder" in out.output
    stats = CliRunner().invoke(main, ["cache", "stats"])
    assert (
        stats.exit_code == 0
        and "the LLM cache is empty" in stats.output
        and "total entries: 0" in stats.output
    )
    unknown = CliRunner().invoke(main, ["explain", "abc"])
    assert unknown.exit_code == 1 and "in no partition" in unknown.output
