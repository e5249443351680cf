"""``ragsft plan``'s wall time from a model of the fleet (``plan/wall.py``): the load curve fitted on
two samples, the run's load, the step time that is not LLM time, and the ends of the range."""

from __future__ import annotations

import math

import pytest

from ragsft_assets.plan import forecast as fc
from ragsft_assets.plan import wall


def _latency(k: float, a: float = 1.0, r: float = 0.006) -> float:
    """A vLLM-like fleet: a lone request takes ``a`` s, each one in flight adds ``a * r``."""
    return a * (1 + r * k)


def _timing(made: float, k: float, r: float = 0.006, other: float = 0.5, **kw: float) -> wall.Timing:
    """What a sample's batch of ``made`` requests, ``k`` in flight on average, measures."""
    latency = _latency(k, r=r)
    llm = made * latency / k  # Little's law: request-seconds over the requests in flight
    return wall.Timing(
        made,
        llm + other,
        llm,
        made * latency,
        kw.get("batch_calls", made),
        **{k_: v for k_, v in kw.items() if k_ != "batch_calls"},
    )


def test_the_load_curve_is_fitted_on_two_loads() -> None:
    assert wall.fit_load((20, _latency(20)), (100, _latency(100))) == pytest.approx(0.006)
    assert wall.fit_load((100, _latency(100)), (20, _latency(20))) == pytest.approx(0.006)  # any order
    assert wall.fit_load((20, 1.0), (25, 1.3)) is None  # loads too close to tell (ratio < 1.5)
    assert wall.fit_load((20, 1.0), (100, 0.9)) == 0.0  # faster under load: noise on a load-free fleet
    assert wall.fit_load((20, 1.0), (100, 6.0)) == wall.SATURATED  # slower than the load grew
    t1, t2 = _timing(12, 8), _timing(38, 25)
    assert (t1.in_flight, t1.latency_s) == (pytest.approx(8), pytest.approx(_latency(8)))
    per, r = wall.fit_stages({"drafts": t2}, {"drafts": t1, "judge": t1})
    assert per == {"drafts": pytest.approx(0.006)} and r == pytest.approx(0.006)


def test_the_pooled_curve_is_the_weighted_median() -> None:
    assert wall.pooled_load([]) is None
    assert wall.pooled_load([(0.01, 1.0), (0.002, 5.0), (wall.SATURATED, 1.0)]) == pytest.approx(0.002)
    assert wall.pooled_load([(wall.SATURATED, 3.0), (0.0, 1.0)]) == wall.SATURATED


def test_the_run_is_timed_at_its_own_load_not_the_samples() -> None:
    """50 requests measured at 25 in flight, 2,000 to make on 256 slots: the fitted curve gives the
    latency at 256 in flight. The saturated end is the sample's throughput (what the plan said
    before), the load-free end Little's law at the sample's latency; the truth lies between."""
    r, slots, calls = 0.006, 256, 2000.0
    sample = _timing(50, 25, r=r, other=0.5)
    fill = 25 / 50
    k_run = wall.run_in_flight(calls, slots, fill)
    assert k_run == pytest.approx(calls / ((calls - slots) / slots + 1 / fill))
    truth = calls * _latency(k_run, r=r) / k_run + 0.5  # the step's other 0.5 s: not LLM time
    assert wall.stage_wall(calls, sample, slots, r) == pytest.approx(truth)
    low, high = wall.stage_wall_bounds(calls, sample, slots)
    assert high == pytest.approx(sample.llm_wall_s * calls / 50 + 0.5)  # the sample's throughput
    assert low == pytest.approx(calls * _latency(25, r=r) / k_run + 0.5)  # latency as in the sample
    assert low < truth < high
    assert wall.stage_wall(calls, sample, slots, None) == pytest.approx(high)  # no curve: saturated
    # fewer calls than slots: one partial wave, at the sample's fill
    assert wall.run_in_flight(100, slots, fill) == pytest.approx(50)
    assert wall.stage_wall(0, sample, slots, r) == 0.0


def test_step_time_outside_the_batches_is_not_scaled_unless_it_waited_on_streamed_calls() -> None:
    """A judge whose calls the stream made (its batch answered from the cache) keeps its step's
    0.7 s whatever the run's size; the step that waited on the stream scales that wait with the
    calls; a step with no batch figures at all is taken as LLM time at the sample's throughput."""
    cached = wall.Timing(made=20, step_s=0.7, llm_wall_s=0.05, batch_calls=0)
    assert wall.stage_wall(4000, cached, 256, 0.006) == pytest.approx(0.7)
    waited = wall.Timing(
        made=100, step_s=3.0, llm_wall_s=1.0, request_s=0.0, batch_calls=10, stream_calls=300
    )
    # its own batch (no concurrency reported): seconds per request sent; the 2 s wait: x calls/made
    assert wall.stage_wall(1000, waited, 256, 0.006) == pytest.approx(1.0 * 1000 / 10 + 2.0 * 10)
    bare = wall.Timing(made=6, step_s=341.0)
    assert wall.stage_wall(189, bare, 256, 0.006) == pytest.approx(189 * 341.0 / 6)


def test_the_embedded_engine_stays_at_its_measured_throughput() -> None:
    """The issue's case: 6 drafts took 5 min 41 s on the embedded engine, which reports the
    sequences it ran but is saturated (its latency grew with them): two samples fit a saturated
    curve, and 189 drafts take about half an hour, not Little's law's 5.7 min over 256 slots."""
    first = wall.Timing(3, 170.5, 170.5, 3 * 170.5, 3)  # 3 at once in 170.5 s
    second = wall.Timing(6, 341.0, 341.0, 6 * 341.0, 6)  # 6 at once in 341 s: twice the latency
    per, r = wall.fit_stages({"drafts": second}, {"drafts": first})
    assert r == wall.SATURATED
    assert wall.stage_wall(189, second, 256, r) == pytest.approx(189 * 341.0 / 6)
    drafts = fc.StageSample(
        "question_drafts", None, 18, 18, 6, 600, 600, wall_s=341.0, llm_wall_s=341.0,
        request_s=6 * 341.0, batch_calls=6,
    )  # fmt: skip
    earlier = {"question_drafts": fc.sample_timing(dataclass_replace(drafts, requests=3, wall_s=170.5))}
    plan = fc.forecast([drafts], sample_items=6, input_items=189, fleet=fc.Fleet(slots=256), earlier=earlier)
    assert plan.load["saturation"] == 1.0 and plan.load["stages_fitted"] == 1
    assert plan.total["wall_s"] == pytest.approx(189 * 341.0 / 6, rel=1e-6)
    assert plan.total["wall_s_low"] < plan.total["wall_s"] <= plan.total["wall_s_high"]
    assert math.isfinite(plan.to_json()["load"]["r"])  # JSON holds no infinity


def dataclass_replace(sample: fc.StageSample, **kw: float) -> fc.StageSample:
    """``sample`` with its request and timing figures of a smaller sample of the same engine."""
    import dataclasses

    out = dataclasses.replace(sample, **kw)  # type: ignore[arg-type]
    n = out.requests
    return dataclasses.replace(out, llm_wall_s=out.wall_s, request_s=n * out.wall_s, batch_calls=n)


def test_a_forecast_reads_the_fitted_curve_near_the_runs_load_and_hedges_far_from_it() -> None:
    """Two samples of a fleet on ``latency = 1 + 0.006 k``: the plan's ``load`` names the curve.
    Measured at 130 in flight for a run that keeps about 250, the wall time is read on the curve,
    between Little's law and the sample's throughput; measured at 25 (a light sample, whose slope
    is noise on a real fleet), it is the geometric mean of the two ends."""

    def stage(made: int, k: float) -> fc.StageSample:
        t = _timing(made, k, other=0.0)
        return fc.StageSample(
            "drafts", None, 3 * made, 2 * made, made, 100 * made, 20 * made,
            wall_s=t.step_s, llm_wall_s=t.llm_wall_s, request_s=t.request_s, batch_calls=made,
        )  # fmt: skip

    small, large = stage(50, 40), stage(150, 130)
    earlier = {"drafts": fc.sample_timing(small)}
    plan = fc.forecast([large], 200, 2_000, fleet=fc.Fleet(slots=256), earlier=earlier)
    assert plan.load["r"] == pytest.approx(0.006) and 0 < plan.load["saturation"] < 1
    d = plan.stages["drafts"]
    k_run = wall.run_in_flight(d.calls, 256, 130 / 150)
    assert wall.RELIABLE_LOAD * k_run <= 130
    assert d.wall_s == pytest.approx(d.calls * _latency(k_run) / k_run)
    assert d.wall_s_low < d.wall_s < d.wall_s_high
    assert d.measured["in_flight"] == pytest.approx(130) and d.measured["made"] == 150
    assert not [w for w in plan.warnings if "lighter load" in w]  # the curve answers the load
    light = fc.forecast(
        [stage(38, 25)],
        50,
        10_000,
        fleet=fc.Fleet(slots=256),
        earlier={"drafts": fc.sample_timing(stage(12, 8))},
    ).stages["drafts"]
    assert light.wall_s == pytest.approx(math.sqrt(light.wall_s_low * light.wall_s_high))
    one = fc.forecast([large], 200, 2_000, fleet=fc.Fleet(slots=256))  # one sample: no curve
    assert one.load == {} and one.stages["drafts"].wall_s == pytest.approx(d.wall_s_high)  # safe side


def test_a_batch_held_by_a_straggler_is_named() -> None:
    """39 RAG requests whose batch took 121 s with 1.2 in flight on average (one request stalled
    past the client's timeout): the plan names the stage instead of passing 121 s off as its
    throughput; a batch that kept most of its requests in flight says nothing."""
    held = fc.StageSample(
        "rag_responses", None, 39, 39, 39, 39_000, 3_000, wall_s=121.3, llm_wall_s=121.2,
        request_s=145.5, batch_calls=39,
    )  # fmt: skip
    plan = fc.forecast([held], 200, 600, fleet=fc.Fleet(slots=256))
    [warning] = [w for w in plan.warnings if w.startswith("wall time held by a few slow requests")]
    assert "rag_responses (1.2 of 39 in flight, 121 s)" in warning
    fine = fc.StageSample(
        "rag_responses", None, 39, 39, 39, 39_000, 3_000, wall_s=1.3, llm_wall_s=1.2,
        request_s=24.0, batch_calls=39,
    )  # fmt: skip
    assert not [w for w in fc.forecast([fine], 200, 600).warnings if "slow requests" in w]
