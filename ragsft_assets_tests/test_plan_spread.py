"""``ragsft plan``'s ranges from the spread between sampled input items (``plan/spread.py``): the
estimator's standard error, the sample size a precision needs, the tracing of ledger candidates to
their input item, and that the 95% interval holds the truth about 95% of the time."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from ragsft_assets.defs.plan import record
from ragsft_assets.plan import forecast as fc
from ragsft_assets.plan import spread
from ragsft_assets.plan.report import plan_table


def test_relative_se_is_the_textbook_one_with_the_finite_population_correction() -> None:
    values = [3.0, 1.0, 2.0]  # 3 of 5 sampled items gave something; 2 gave nothing (no row)
    n, population = 5, 50
    full = values + [0.0, 0.0]
    mean = sum(full) / n
    var = sum((v - mean) ** 2 for v in full) / (n - 1)
    expected = math.sqrt((1 - n / population) * var / n) / mean
    assert spread.relative_se(values, n, population) == pytest.approx(expected)
    assert spread.relative_se(values, n, n) == 0.0  # the sample is the population: exact
    assert spread.relative_se([1.0] * 5, 5, 50) == 0.0  # every item alike (one draft call a pair)


def test_sample_needed_gives_the_wanted_half_width() -> None:
    cv, population, target = 2.0, 200_000, 0.15
    n = spread.sample_needed(cv, population, target)

    def half(m: int) -> float:
        return spread.Z95 * cv * math.sqrt((1 - m / population) / m)

    assert half(n) <= target < half(n - 1)
    assert spread.sample_needed(cv, 300, target) <= 300  # never more than the population
    assert spread.sample_needed(0.0, 300) == 1


def test_candidates_are_traced_to_their_input_item() -> None:
    # pair p1 drafted q1, q2; q1's RAG example e1 (and its twin e1t); pair p2 drafted q3
    parents = {"q1": "p1", "q2": "p1", "q3": "p2", "e1": "q1", "e1t": "q1"}
    root = spread.roots(parents)
    assert root["e1t"] == "p1" and root["q3"] == "p2"
    rows = [
        ("drafts", "q1", True, ["k1"]),
        ("drafts", "q2", False, ["k1"]),  # one draft call for the pair's questions: counted once
        ("drafts", "q3", True, ["k2"]),
        ("rag", "e1", True, ["k3"]),
        ("rag", "e1t", False, ["k4"]),
    ]
    tokens = {"k1": 100, "k2": 80, "k3": 50, "k4": 40}
    sums = spread.unit_sums(rows, root, tokens)
    assert sums["drafts"]["p1"] == {"items": 2, "kept": 1, "calls": 1, "tokens": 100}
    assert sums["rag"] == {"p1": {"items": 2, "kept": 1, "calls": 2, "tokens": 90}}
    out = spread.spreads(sums, n=4, population=40)
    assert out["drafts"]["calls"] == pytest.approx(spread.relative_se([1, 1], 4, 40))
    # the total sums every stage per input item: p1 made 3 calls, p2 1
    assert out["total"]["calls"] == pytest.approx(spread.relative_se([3, 1], 4, 40))


def _population(rng: random.Random, size: int) -> list[tuple[int, int]]:
    """Per input item: (draft calls, judge calls) of a narrow funnel (3 drafts, each kept with
    0.2, each kept question judged by a cascade of 1 to 4 calls)."""
    out = []
    for _ in range(size):
        kept = sum(rng.random() < 0.2 for _ in range(3))
        out.append((1, sum(rng.randint(1, 4) for _ in range(kept))))
    return out


def test_the_95_percent_interval_holds_the_total_about_95_percent_of_the_time() -> None:
    """A seeded simulation: 400 samples of 60 of 600 items; the interval the plan prints (estimate
    +/- 1.96 relative SEs of the total calls) covers the true total in 89-99% of them. Per-stage
    binomial intervals that ignore the finite population and the items' clustering miss either way."""
    rng = random.Random(7)
    population = _population(rng, 600)
    truth = sum(d + j for d, j in population)
    covered = 0
    for _ in range(400):
        sample = rng.sample(population, 60)
        per_item = [d + j for d, j in sample]
        estimate = 600 * sum(per_item) / 60
        half = spread.Z95 * spread.relative_se(per_item, 60, 600)
        covered += estimate * (1 - half) <= truth <= estimate * (1 + half)
    assert 0.89 <= covered / 400 <= 0.99


def _stage(name: str, upstream: str | None, items: int, kept: int, requests: int) -> fc.StageSample:
    return fc.StageSample(name, upstream, items, kept, requests, 10 * requests, 2 * requests)


def test_forecast_ranges_and_precision_come_from_the_spread() -> None:
    samples = [_stage("drafts", None, 30, 20, 10), _stage("judge", "drafts", 20, 5, 40)]
    spreads = {
        "drafts": {
            "items": 0.0,
            "kept": 0.05,
            "calls": 0.0,
            "tokens": 0.02,
            "cv_calls": 0.0,
            "cv_tokens": 0.1,
        },
        "judge": {"items": 0.05, "kept": 0.3, "calls": 0.1, "tokens": 0.1, "cv_calls": 0.4, "cv_tokens": 0.4},
        "total": {"calls": 0.08, "tokens": 0.09, "cv_calls": 0.3, "cv_tokens": 0.35},
    }
    plan = fc.forecast(samples, 10, 1000, spreads=spreads)
    judge = plan.stages["judge"]
    assert judge.calls == pytest.approx(4000)
    assert (judge.calls_low, judge.calls_high) == (
        pytest.approx(4000 * (1 - spread.Z95 * 0.1)),
        pytest.approx(4000 * (1 + spread.Z95 * 0.1)),
    )
    assert judge.error_95 == pytest.approx(spread.Z95 * 0.1)
    assert plan.stages["drafts"].calls_low == plan.stages["drafts"].calls == 1000  # one call a pair
    total = plan.total
    assert total["calls_high"] == pytest.approx(5000 * (1 + spread.Z95 * 0.08))  # not the stages' sum
    assert plan.precision["tokens"] == pytest.approx(spread.Z95 * 0.09)
    assert plan.precision["sample_needed"] == spread.sample_needed(0.4, 1000)  # the judge's spread
    data = plan.to_json()
    assert data["stages"]["judge"]["error_95"] == pytest.approx(spread.Z95 * 0.1, abs=1e-9)  # not rounded
    text = plan_table(data)
    assert "expected error (95%" in text and f"--sample {spread.sample_needed(0.4, 1000)}" in text
    # without spreads: the binomial ranges, no precision claimed
    plain = fc.forecast(samples, 10, 1000)
    assert plain.precision == {} and plain.stages["judge"].error_95 == -1.0
    assert "expected error" not in plan_table(plain.to_json())
    # the sample is the whole input: exact, nothing to claim
    assert fc.forecast(samples, 10, 10, spreads=spreads).precision == {}


def test_target_error_grows_the_sample_to_what_its_spread_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make_plan(target_error=...)`` runs the sample again at the size the first sample's spread
    asks for (capped by ``max_sample``), and stops when the sample is large enough. With no sample
    given that is the default (50, grown to +/-15%); a sample given is kept, after a pilot of a
    quarter of it; each later sample gets the earlier one's timing (the load curve's second load)."""
    from ragsft_assets.defs.plan import sample as sample_mod

    runs: list[int] = []
    earliers: list[object] = []

    def fake_run_sample(key: str, *, sample: int, earlier: Any = None, **_: Any) -> fc.Plan:
        runs.append(sample)
        earliers.append(earlier)
        spreads = {
            "drafts": {"calls": 0.0, "tokens": 0.0, "cv_calls": 0.0, "cv_tokens": 0.0},
            "total": {"calls": 1.0 / math.sqrt(sample), "tokens": 0.0, "cv_calls": 1.0, "cv_tokens": 0.0},
        }
        drafts = fc.StageSample(
            "drafts", None, 3 * sample, sample, sample, 10 * sample, 2 * sample,
            wall_s=2.0, llm_wall_s=1.0, request_s=0.5 * sample, batch_calls=sample,
        )  # fmt: skip
        return fc.forecast([drafts], sample, 100_000, spreads=spreads)

    monkeypatch.setattr(sample_mod, "run_sample", fake_run_sample)
    monkeypatch.setattr(record, "save", lambda plan, key, home=None: "digest")
    record.make_plan("k", sample=20, resources={}, target_error=0.15)
    assert runs == [20, spread.sample_needed(1.0, 100_000, 0.15)]
    assert earliers[0] is None and earliers[1]["drafts"]["made"] == 20  # the first sample's timing
    runs.clear()
    record.make_plan("k", sample=20, resources={}, target_error=0.15, max_sample=100)
    assert runs == [20, 100]
    runs.clear()
    record.make_plan("k", resources={})  # the default: 50, grown to +/-15%
    assert runs == [50, spread.sample_needed(1.0, 100_000, spread.TARGET_ERROR)]
    runs.clear(), earliers.clear()
    record.make_plan("k", sample=20, resources={})  # a sample given, no target: as given, after a pilot
    assert runs == [5, 20] and earliers[1]["drafts"]["made"] == 5
    runs.clear()
    record.make_plan("k", sample=19, resources={}, target_error=0)  # too small for a pilot of 5
    assert runs == [19]
    assert record.resolve_sample(None, 0) == (record.DEFAULT_SAMPLE, None)  # 0: no target


def test_an_earlier_smaller_run_keeps_more_under_the_caps_than_the_whole_run() -> None:
    """A partial run of the first m pairs capped fewer questions than the run of every pair will:
    of its cached requests below the caps, the run asks again only a share (``survival``)."""
    from ragsft_assets.plan.scale import cap_keep_factor, cap_keep_factors

    everything = [(f"a{i}", f"b{i % 15}") for i in range(120)]  # 8 pairs on each bridge
    sample = everything[:10]
    out = cap_keep_factors(sample, [3] * 10, everything, seed=1, runs=[30, 120, 0])
    assert set(out) == {30, 120}
    assert out[120] == pytest.approx(cap_keep_factor(sample, [3] * 10, everything, seed=1))
    assert out[30] < 1.0  # 2 pairs a bridge at 30 pairs, 8 at 120: the whole run caps more
    assert out[120] < out[30]  # the 10-pair sample kept even more than the 30-pair run


def test_below_follows_the_funnel_up() -> None:
    from ragsft_assets.defs.plan.sample import _below

    upstream = {"drafts": None, "caps": "drafts", "ablation": "caps", "judge": "ablation"}
    assert _below("judge", "caps", upstream) and _below("ablation", "caps", upstream)
    assert not _below("caps", "caps", upstream) and not _below("drafts", "caps", upstream)


def test_a_sample_measured_at_a_lighter_load_than_the_run_says_so() -> None:
    """50 drafts kept 50 in flight; the run will keep 256 (its slots): the throughput measured at
    50 holds only for a saturated fleet, and the plan says which sample measures it at the run's
    load. A sample already at the run's load says nothing."""
    light = fc.StageSample(
        "question_drafts", None, 150, 140, 50, 500, 50, wall_s=10.0, llm_wall_s=8.0, request_s=400.0
    )
    plan = fc.forecast([light], 50, 10_000, fleet=fc.Fleet(slots=256))
    [warning] = [w for w in plan.warnings if w.startswith("wall time measured at a lighter load")]
    assert "about 50 requests in flight" in warning and "--sample of about 256" in warning
    full = fc.StageSample(
        "question_drafts", None, 900, 800, 300, 500, 50, wall_s=10.0, llm_wall_s=8.0, request_s=2000.0
    )
    plan = fc.forecast([full], 300, 10_000, fleet=fc.Fleet(slots=256))  # 250 in flight: the run's
    assert not [w for w in plan.warnings if "lighter load" in w]
