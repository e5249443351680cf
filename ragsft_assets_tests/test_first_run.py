"""Issue 40, the first run as a newcomer sees it: a quiet console with one line per stage and a
closing funnel, ``explain`` for a dropped candidate, the commands of a fresh home, the card's lines.

The demo itself (the embedded model, minutes) is run once, by test_docs_commands' README test.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.cli.console import StageLines, console_run_config, quiet_third_party
from ragsft_assets.cli.summary import funnel_line, read_summary, summary_lines
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table, write_ledger
from ragsft_assets.release.explain import explain, format_trace

PART = "sample.fr"


# -- the console ---------------------------------------------------------------------------------


def test_stage_lines_say_what_each_number_counts() -> None:
    out: list[str] = []
    lines = StageLines(
        echo=out.append, units={"question_checks": "checked drafts", "release": "rows shipped"}
    )
    lines.step_started("question_checks", 0.0)
    lines.log("question_checks", logging.INFO, "judge: 24/24 calls (100%), 1.2 calls/s, 80 tok/s, ETA 0s")
    lines.log("question_checks", logging.WARNING, "one thing worth a look\nsecond line")
    lines.materialized("question_checks", "question_checks", 43)
    lines.step_ended("question_checks", True, 12.4)
    lines.step_started("question_checks_ids_unique", 0.0)  # an asset check's step: no line of its own
    lines.check_failed("question_checks_ids_unique", "ids_unique", "question_checks", "ERROR", PART)
    lines.check_failed("question_checks_ids_unique", "not_empty", "question_checks", "WARN", PART)
    lines.step_ended("question_checks_ids_unique", True, 0.1)
    lines.step_started("release", 0.0)
    lines.materialized("release", "release", 116)
    lines.step_ended("release", False, None, "boom\ntraceback")
    assert out == [
        "  question_checks               12s  43 checked drafts; 24 LLM calls; 1 warning(s)",
        f"  ! check ids_unique on question_checks [{PART}] failed (ERROR)",
        "  release                    FAILED  116 rows shipped",
        "    boom",
    ]
    assert lines.failed == ["release"]
    assert lines.warning_lines() == [
        "  question_checks: 1 warning(s), first: one thing worth a look",
        "  question_checks: 1 check(s) warn: not_empty",  # a WARN check: named once, at the end
    ]


def test_live_line_shows_calls_and_eta_on_a_terminal() -> None:
    import io

    stream = io.StringIO()
    lines = StageLines(echo=lambda s: None, live=True, stream=stream)
    lines.step_started("question_drafts", 0.0)
    assert stream.getvalue().endswith("question_drafts            ... running\x1b[K")  # before any call
    lines.log("question_drafts", logging.INFO, "generator: 19/24 calls (79%), 0.5 calls/s, 9 tok/s, ETA 10s")
    assert "question_drafts" in stream.getvalue() and "19/24 calls ETA 10s" in stream.getvalue()


def test_console_config_quiets_only_the_console() -> None:
    cfg = console_run_config({"ops": {"x": {}}}, verbose=False)
    assert cfg == {"ops": {"x": {}}, "loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    assert console_run_config({"ops": {}}, verbose=True) == {"ops": {}}  # --verbose: Dagster's own
    mine = {"loggers": {"console": {"config": {"log_level": "DEBUG"}}}}
    assert console_run_config(mine, verbose=False) == mine  # the user's own logger config wins


def test_quiet_third_party_keeps_the_users_values() -> None:
    env = {"VLLM_LOGGING_LEVEL": "DEBUG"}
    applied = quiet_third_party(env)
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG" and "VLLM_LOGGING_LEVEL" not in applied
    assert env["TORCH_CPP_LOG_LEVEL"] == "ERROR" and env["TQDM_DISABLE"] == "1"


def test_quiet_third_party_hides_no_dagster_preview_notice() -> None:
    """Nothing triggers Dagster's Preview/Beta notices any more (test_lineage_checks): a new one is
    a change to look at, so the console does not filter them."""
    import warnings

    from dagster._utils.warnings import BetaWarning, PreviewWarning

    with warnings.catch_warnings(record=True) as seen:  # the filters come back as they were
        warnings.simplefilter("always")
        quiet_third_party({})
        warnings.warn("a preview API", PreviewWarning, stacklevel=1)
        warnings.warn("a beta API", BetaWarning, stacklevel=1)
        warnings.warn("vLLM's own", FutureWarning, stacklevel=1)  # still quiet
    assert [w.category for w in seen] == [PreviewWarning, BetaWarning]


@pytest.fixture
def runner(tmp_home: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_home / "dagster"))  # restored after the test
    for key in ("VLLM_LOGGING_LEVEL", "TORCH_CPP_LOG_LEVEL", "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(key, os.environ.get(key, ""))  # whatever the command sets is undone
        monkeypatch.delenv(key)
    return CliRunner()


def test_materialize_prints_a_line_per_stage_and_the_run_keeps_every_event(runner: CliRunner) -> None:
    import dagster as dg

    assert runner.invoke(main, ["snapshots", "add", PART, "--sample"]).exit_code == 0
    out = runner.invoke(main, ["materialize", "*bridge_pairs", "--partition", PART], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    text = out.output
    assert " DEBUG " not in text and "STEP_START" not in text, text
    stage_lines = [line for line in text.splitlines() if line.startswith("  ") and "warning" not in line[:40]]
    names = ["snapshot_files", "abstracts", "link_graph", "bridge_pairs"]
    assert [line.split()[0] for line in stage_lines[:4]] == names, text
    assert (
        " abstracts" in stage_lines[1] and "link edges" in stage_lines[2] and "bridge pairs" in stage_lines[3]
    )
    assert len(text.splitlines()) <= 10, text
    assert (
        "abstracts: 1 warning(s), first: skipped frwiki_namespace_0_0.jsonl" in text
    )  # said once, at the end
    # only the console was quieted: the run's page in the UI has every event
    instance = dg.DagsterInstance.get()
    run = instance.get_runs(limit=1)[0]
    kinds = {e.dagster_event.event_type_value for e in instance.all_logs(run.run_id) if e.dagster_event}
    assert {"STEP_START", "STEP_SUCCESS", "ASSET_MATERIALIZATION"} <= kinds
    assert any("malformed_line" in (e.user_message or "") for e in instance.all_logs(run.run_id))

    verbose = runner.invoke(main, ["materialize", "abstracts", "--partition", PART, "--verbose"])
    assert verbose.exit_code == 0, verbose.output
    assert "STEP_START" in verbose.output  # --verbose: Dagster's event log, as before
    assert "116 abstracts" in verbose.output


# -- the closing summary -------------------------------------------------------------------------


def _write_demo_like_ledger(assets_root: Path) -> dict[str, list[str]]:
    """A ledger shaped like the demo's: 72 draft slots, 43 drafts, all 43 dropped by the checks."""
    slots = [f"q{i:03d}" for i in range(72)]
    drafted, missing = slots[:43], slots[43:]
    drafts = [Decision(q, KEPT, "drafted", cache_keys=[f"gen-{q}"]) for q in drafted]
    drafts += [Decision(q, DROPPED, "generation_missing", {"error": "no JSON"}) for q in missing]
    checks = [Decision(q, DROPPED, "answer_not_in_b", {"reasons": ["answer_not_in_b"]}) for q in drafted]
    abstracts = [Decision(f"d{i}", KEPT) for i in range(5)] + [Decision("d9", DROPPED, "too_short")]
    # the corpus stage drops more than the checks, by design (pairs not drawn at the demo's size)
    pairs = [
        Decision(f"p{i:03d}", KEPT if i < 10 else DROPPED, "" if i < 10 else "not_drawn") for i in range(110)
    ]
    for product, stage, rows in (
        ("multihop", "question_drafts", drafts),
        ("multihop", "question_checks", checks),
        ("corpus", "abstracts", abstracts),
        ("corpus", "bridge_pairs", pairs),
        ("a_family_with_a_long_name", "rag_sft", abstracts),
    ):
        write_ledger(ledger_table(PART, product, stage, rows), PART, stage, assets_root)
    return {"drafted": drafted, "missing": missing}


def test_summary_is_a_funnel_per_family_with_the_top_reason_and_one_explain(tmp_path: Path) -> None:
    ids = _write_demo_like_ledger(tmp_path / "assets")
    summary = read_summary(tmp_path / "assets", PART, ["corpus"])
    assert funnel_line(summary.funnels["multihop"]) == (
        "72 draft slots -> 43 drafts (29 generation_missing) -> 0 past the checks (43 answer_not_in_b)"
    )
    text = summary_lines(summary, small_model=True)
    assert text[0] == "funnel (from the decision ledger):"
    assert text[1:5] == [
        "  a_family_with_a_long_name  6 examples -> 5 SFT examples (1 too_short)",
        "  corpus                     6 records -> 5 abstracts (1 too_short)",
        "                             110 edges -> 10 bridge pairs (100 not_drawn)",  # its own line, aligned
        "  multihop                   72 draft slots -> 43 drafts (29 generation_missing)"
        " -> 0 past the checks (43 answer_not_in_b)",
    ]
    # the question families' most frequent drop, not the corpus stage's pairs left undrawn
    assert "most candidates were dropped by question_checks: answer_not_in_b (43)" in text
    at = next(i for i, line in enumerate(text) if line.startswith("the release holds only the corpus config"))
    assert text[at].endswith(
        "no candidate got through (multihop at question_checks)"
    )  # the family that stopped
    assert "expected with a 135M model" in text[at + 1]
    explain_line = text[-1]
    assert explain_line.endswith(f"ragsft explain {ids['drafted'][0]} --partition {PART}")
    # the command it gives answers: the stages the candidate passed, the one that dropped it, its calls
    trace = explain(ids["drafted"][0], home=tmp_path, lookup=lambda key: {"response": {"text": key}})
    shown = format_trace(trace)
    assert f"candidate {ids['drafted'][0]}" in shown
    assert "dropped at question_checks (answer_not_in_b)" in shown
    assert "question_drafts      kept (drafted)" in shown and f"gen-{ids['drafted'][0]}" in shown
    # a release with the question configs says nothing of a small model
    assert not any(
        "135M" in line
        for line in summary_lines(read_summary(tmp_path / "assets", PART, ["corpus", "default"]))
    )


def test_explain_cli_answers_for_a_dropped_draft(tmp_home: Path) -> None:
    ids = _write_demo_like_ledger(tmp_home / "assets")
    out = CliRunner().invoke(main, ["explain", ids["missing"][0]])
    assert out.exit_code == 0, out.output
    assert "dropped at question_drafts (generation_missing)" in out.output and "no JSON" in out.output
    unknown = CliRunner().invoke(main, ["explain", "f" * 24])
    assert unknown.exit_code == 1 and "in no partition" in unknown.output
    assert f"RAGSFT_HOME={tmp_home} (from $RAGSFT_HOME)" in unknown.output  # which home, how it was found


# -- the other commands on a fresh home ------------------------------------------------------------


def test_cache_stats_on_a_fresh_home_says_the_cache_is_empty(tmp_home: Path) -> None:
    out = CliRunner().invoke(main, ["cache", "stats"])
    assert out.exit_code == 0, out.output
    assert "the LLM cache is empty" in out.output and "total entries: 0" in out.output


def test_catalog_offers_its_own_sql_not_a_missing_duckdb_cli(tmp_home: Path) -> None:
    out = CliRunner().invoke(main, ["catalog"])
    assert out.exit_code == 0, out.output
    assert "duckdb -readonly" not in out.output and "ragsft catalog --sql" in out.output
    assert f"RAGSFT_HOME={tmp_home} (from $RAGSFT_HOME)" in out.output  # which home it opened


def test_the_home_says_how_it_was_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragsft_assets import home

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGSFT_HOME", raising=False)
    project = tmp_path / "project" / ".ragsft"
    project.mkdir(parents=True)
    monkeypatch.setattr(home, "project_home", lambda: project)
    text = home.describe_home()
    assert text.startswith(f"RAGSFT_HOME={tmp_path / '.ragsft'} (./.ragsft of the current folder")
    assert f"the project's home is {project}" in text and f"RAGSFT_HOME={project}" in text
    monkeypatch.setenv("RAGSFT_HOME", str(project))
    assert home.describe_home() == f"RAGSFT_HOME={project} (from $RAGSFT_HOME)"  # the project's: no hint


def test_ui_starts_dagster_dev_where_its_warnings_do_not_apply(
    tmp_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dagster dev` warns of a dagster.yaml in its working folder other than DAGSTER_HOME's, and that
    it is superseded (a FutureWarning): started in the instance folder with -W, neither is printed."""
    import signal

    from ragsft_assets.cli import ui as ui_mod

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    seen: dict[str, object] = {}
    monkeypatch.setattr(ui_mod.os, "chdir", lambda p: seen.setdefault("cwd", Path(p)))
    monkeypatch.setattr(ui_mod.os, "execve", lambda exe, argv, env: seen.update(argv=argv, env=env))
    previous = signal.getsignal(signal.SIGINT)
    try:
        out = CliRunner().invoke(main, ["ui", "--port", "3999"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert out.exit_code == 0, out.output
    argv, env = seen["argv"], seen["env"]
    assert argv[1:3] == ["-W", "ignore::FutureWarning"] and "dev" in argv
    assert seen["cwd"] == Path(env["DAGSTER_HOME"]) == tmp_home / "dagster"  # the condition of the warning
    assert (seen["cwd"] / "dagster.yaml").is_file()
    # absolute: the code server does not start in the user's folder
    assert env["RAGSFT_HOME"] == str(tmp_home)
    assert env.get("PYTHONWARNINGS") == os.environ.get("PYTHONWARNINGS")  # none added: nothing to hide


# -- the card ----------------------------------------------------------------------------------------


def test_card_notes_say_each_skipped_config_once() -> None:
    from ragsft_assets.release.card_notes import condense_notes

    notes = []
    for config, asset in (("default", "multihop_questions"), ("filtered", "multihop_filtered")):
        notes += [
            f"config '{config}': split '{s}' is empty and left out" for s in ("train", "validation", "test")
        ]
        notes.append(f"config '{config}' skipped: asset '{asset}' has no rows")
    notes += ["config 'corpus': split 'test' is empty and left out", "something else"]
    assert condense_notes(notes) == [
        "configs skipped, their asset has no rows: `default` (multihop_questions), `filtered` (multihop_filtered)",
        "config `corpus`: empty split(s) left out: test",
        "something else",
    ]


def test_card_counts_the_links_that_ship_in_provenance(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from ragsft_assets.release.card import config_stats

    data = tmp_path / "corpus-train.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["x y", "z"], "sentences": [["x y"], ["z"]]}), data)
    prov = tmp_path / "provenance" / "corpus"
    prov.mkdir(parents=True)
    link = {"target_title": "T", "target_id": "t", "anchor": "x", "sentence": 0}
    pq.write_table(
        pa.table({"id": ["a", "b"], "links": [[link, link, link], [link]]}), prov / "links.parquet"
    )
    rows, _ = config_stats("corpus", [data], prov)
    links = next(r for r in rows if r[0] == "links per abstract")
    assert links[1:] == (2.0, 2.0, 3, 3)  # median, mean, p90, max of 3 and 1 links


# -- the UI's metadata -----------------------------------------------------------------------------


def test_preview_leads_with_the_question_and_answer_even_for_a_verdict_table(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from ragsft_assets.table_stats import reviewer_preview

    part = tmp_path / "assets" / PART
    (part / "question_drafts").mkdir(parents=True)
    (part / "question_checks").mkdir()
    pq.write_table(
        pa.table(
            {
                "id": ["q1", "q2"],
                "question": ["Qui ?", "Où ?"],
                "answer": ["Lui", "Là"],
                "split": ["train"] * 2,
            }
        ),
        part / "question_drafts" / "all.parquet",
    )
    checks = part / "question_checks" / "all.parquet"
    pq.write_table(pa.table({"id": ["q2"], "verdict": ["dropped"], "reason": ["answer_not_in_b"]}), checks)
    text = reviewer_preview([checks], ["id", "verdict", "reason"])
    assert text.splitlines()[0] == "| question | answer | id | verdict | reason |"
    assert "| Où ? | Là | q2 | dropped | answer_not_in_b |" in text
    drafts = reviewer_preview([part / "question_drafts" / "all.parquet"], ["id", "split"])
    assert drafts.splitlines()[0] == "| question | answer | id | split |"


def test_rows_per_split_names_every_split_of_an_empty_asset() -> None:
    from ragsft_assets.table_stats import counts_per_split

    assert counts_per_split([], "split", ("train", "validation", "test")) == {
        "train": 0,
        "validation": 0,
        "test": 0,
    }


def test_funnel_is_a_table_in_the_metadata() -> None:
    import dagster as dg

    from ragsft_assets.defs.metadata import funnel_metadata

    md = funnel_metadata({"lines_read": 138, "too_short": 5, "kept": 116})
    table = md["funnel_table"]
    assert isinstance(table, dg.TableMetadataValue)
    assert [(r.data["step"], r.data["count"]) for r in table.records] == [
        ("lines_read", 138),
        ("too_short", 5),
        ("kept", 116),
    ]
    assert "| too_short | 5 |" in md["funnel"].value  # the markdown stays for what reads it


def test_card_of_a_corpus_only_release_names_no_skipped_config_twice(tmp_path: Path) -> None:
    """The recipes section lists only shipped configs, the notes say each skipped config once, and the
    card links nowhere it cannot (its kept abstracts: test_first_run_card, on the bundled sample)."""
    from ragsft_assets import recipes
    from ragsft_assets.multihop.card_section import release_sections
    from ragsft_assets.multihop.recipes import RECIPES
    from ragsft_assets.release import build
    from ragsft_assets.resources.store import ArtifactStore
    from ragsft_assets_tests.release_fixtures import PARTITION as WORLD
    from ragsft_assets_tests.release_fixtures import write_world

    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    # a recipe record for a shipped config (default) and one for a config this release skips
    recipes.write_record(store.root / WORLD / "multihop_questions", recipes.record(RECIPES["default"]))
    recipes.write_record(store.root / WORLD / "language_judge", recipes.record(RECIPES["filtered_qwen_v2"]))
    folder = tmp_path / "releases" / WORLD
    build.build_release(store.root, WORLD, folder)
    body, _ = build.write_card(folder, WORLD, sections=release_sections(store.root, WORLD, folder))
    recipe_part = body.split("### Recipes", 1)[1].split("##", 1)[0]
    assert "`default`" in recipe_part and "filtered_qwen_v2" not in recipe_part
    assert "https://github.com/)" not in body
    notes = [line for line in body.split("Notes:", 1)[1].split("##", 1)[0].splitlines() if line]
    assert notes == [
        "- configs skipped, their asset is not materialized: `filtered` (multihop_filtered), `filtered_qwen`"
        " (multihop_filtered_qwen), `filtered_qwen_v2` (multihop_filtered_qwen_v2), `corpus_filtered_qwen_v2`"
        " (corpus_filtered_qwen_v2)"
    ]


def test_each_stage_shows_the_recipe_fields_it_reads_beside_the_cards() -> None:
    import dataclasses

    from ragsft_assets import recipes
    from ragsft_assets.definitions import defs
    from ragsft_assets.multihop.recipes import RECIPES, MultihopRecipe
    from ragsft_assets.multihop.stage_fields import STAGE_FIELDS, stage_field_rows

    fields = {f.name for f in dataclasses.fields(MultihopRecipe)}
    assets = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    for stage, names in STAGE_FIELDS.items():
        assert stage in assets, f"{stage}: no such asset"
        assert set(names) <= fields, f"{stage}: {set(names) - fields} are not recipe fields"
    changed = dataclasses.replace(RECIPES["default"], answer_max_words=12)
    rows = stage_field_rows("question_checks", recipes.record(changed))
    assert rows == [
        {"field": "answer_max_words", "value": 12, "card": 10, "as_card": False},
        {"field": "answer_max_chars", "value": 70, "card": 70, "as_card": True},
    ]
    assert (
        len(stage_field_rows("a_stage_not_listed", recipes.record(changed))) == len(fields) - 1
    )  # all but name
    from ragsft_assets.defs.multihop.common import recipe_fields_table

    table = recipe_fields_table("question_checks", recipes.record(changed))  # what the asset's page shows
    assert [(r.data["field"], r.data["value"], r.data["card"], r.data["as_card"]) for r in table.records] == [
        ("answer_max_words", "12", "10", False),
        ("answer_max_chars", "70", "70", True),
    ]


def test_demo_max_pairs_draws_and_drafts_that_many() -> None:
    """The sample's snapshot.json draws 24 pairs: --max-pairs N sets the draw too, or N > 24 would
    draft no more than 24."""
    from ragsft_assets.cli.demo import demo_run_config
    from ragsft_assets.definitions import defs

    full = demo_run_config(defs.resolve_job_def("full_job"), 40)
    assert full == {
        "ops": {
            "bridge_pairs": {"config": {"max_pairs": 40}},
            "question_drafts": {"config": {"max_pairs": 40}},
        }
    }
    assert demo_run_config(defs.resolve_job_def("full_job"), None) == {}
    corpus = demo_run_config(defs.resolve_job_def("corpus_job"), 40)
    assert "question_drafts" not in corpus["ops"]
