"""``bench plan``'s arithmetic: the errors and the range share it prints (the bench itself runs a
simulated fleet for minutes; its bar lives in the script, not in a timed test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsft_assets.bench.plan import errors


def _plan(calls: float, low: float, high: float, wall: float) -> dict:
    stage = {
        "calls": calls,
        "calls_low": low,
        "calls_high": high,
        "prompt_tokens": 10 * calls,
        "completion_tokens": calls,
        "wall_s": wall,
        "kept": calls / 2,
        "kept_low": low / 2,
        "kept_high": high / 2,
    }
    return {
        "stages": {
            "judge": stage,
            "checks": {**stage, "calls": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0, "wall_s": 0.0},
        }
    }


def test_errors_compare_llm_stages_and_count_values_in_range() -> None:
    actual = {
        "judge": {
            "calls": 100.0,
            "kept": 50.0,
            "prompt_tokens": 1000.0,
            "completion_tokens": 100.0,
            "wall_s": 10.0,
        },
        "checks": {"calls": 0.0, "kept": 40.0, "prompt_tokens": 0.0, "completion_tokens": 0.0},
    }
    out = errors(_plan(110.0, 90.0, 130.0, 12.0), actual)
    assert out["calls_error"] == pytest.approx(0.1)
    assert out["tokens_error"] == pytest.approx(0.1)
    assert out["wall_error"] == pytest.approx(0.2)
    assert out["judge_calls_error"] == pytest.approx(0.1)
    assert "checks_calls_error" not in out  # no LLM stage
    # judge: calls and kept inside; checks: calls 0 inside [90, 130]? no; kept 40 inside [45, 65]? no
    assert out["in_range_share"] == pytest.approx(0.5)


def test_stage_errors_weigh_by_tokens_and_name_the_worst_stage() -> None:
    """Two stages whose errors cancel in the total calls (+50% and -50%) still show: weighted by
    their actual tokens, and the worst one named."""
    from ragsft_assets.bench.plan import stage_errors

    def stage(calls: float, per_call: float) -> dict:
        return {"calls": calls, "prompt_tokens": per_call * calls, "completion_tokens": 0.0}

    actual = {"big": stage(100.0, 10.0), "small": stage(100.0, 30.0), "none": stage(0.0, 1.0)}
    plan = {"stages": {"big": stage(150.0, 10.0), "small": stage(50.0, 30.0), "none": stage(0.0, 1.0)}}
    out = stage_errors(plan, actual)  # +50% on 1,000 tokens, -50% on 3,000
    assert out["stage_error_weighted"] == pytest.approx(0.5)
    assert (out["worst_stage"], out["worst_stage_error"]) == ("small", pytest.approx(0.5))
    plan["stages"]["small"] = stage(90.0, 30.0)  # -10% now: the big stage is the worst
    out = stage_errors(plan, actual)
    assert out["worst_stage"] == "big"
    assert out["stage_error_weighted"] == pytest.approx((0.5 * 1000 + 0.1 * 3000) / 4000)


def test_rated_wall_prices_the_requests_the_run_made() -> None:
    """The wall error judges the plan's seconds per request to make, at the run's own cache state:
    a plan that expected 80 of 100 calls to make in 40 s (0.5 s each) and a run that made 60."""
    from ragsft_assets.bench.plan import rated_wall

    stage = {"calls": 100.0, "cache_hits": 20.0, "wall_s": 40.0, "wall_s_low": 8.0}
    plan = {"stages": {"judge": stage, "checks": {**stage, "calls": 0.0, "cache_hits": 0.0}}}
    assert rated_wall(plan, {"judge": 60.0}) == pytest.approx(30.0)
    assert rated_wall(plan, {"judge": 60.0}, "wall_s_low") == pytest.approx(6.0)
    assert rated_wall(plan, {}) == 0.0


def test_each_plan_starts_from_the_partition_and_cache_after_the_corpus(tmp_path: Path) -> None:
    """Before each plan of a seed, the earlier plan's and run's calls, assets, ledger rows and
    release are gone; the corpus stage's stay. The default plan (0) comes last, as prefix
    ``default_``."""
    import sqlite3

    from ragsft_assets.bench.plan import forget_run, plan_order, tag_of

    db = tmp_path / "llm_cache" / "calls.sqlite"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, created REAL NOT NULL)")
    con.executemany("INSERT INTO calls VALUES (?, ?)", [("old", 10.0), ("plan", 20.0), ("run", 30.0)])
    con.commit()
    con.close()
    folder = tmp_path / "assets" / "p"
    for name in ("bridge_pairs", "question_drafts", "_ledger"):
        (folder / name).mkdir(parents=True)
    for stage in ("bridge_pairs", "question_drafts"):
        (folder / "_ledger" / f"{stage}.parquet").write_bytes(b"x")
    (tmp_path / "releases" / "p").mkdir(parents=True)
    forget_run(tmp_path, "p", ("abstracts", "link_graph", "bridge_pairs"), db, since=15.0)
    assert sorted(p.name for p in folder.iterdir()) == ["_ledger", "bridge_pairs"]
    assert [p.name for p in (folder / "_ledger").iterdir()] == ["bridge_pairs.parquet"]
    assert not (tmp_path / "releases" / "p").exists()
    con = sqlite3.connect(db)
    assert [k for (k,) in con.execute("SELECT key FROM calls")] == ["old"]
    con.close()
    assert plan_order((0, 200, 50)) == [50, 200, 0]
    assert [tag_of(n, [50, 0]) for n in (50, 0)] == ["n50_", "default_"] and tag_of(50, [50]) == ""
