"""``ragsft bench plan``: how far ``ragsft plan``'s forecast is from the run it forecasts.

In one run:

1. a generated snapshot of about ``pairs`` bridge pairs (default 5,000; ``bench.fleet``'s
   generator: realistic frwiki records);
2. the simulated fleet of ``bench fleet`` (``bench.fleet_sim``: 2 replicas x 128 slots, prefill and
   decode rates, 429 + Retry-After, about 1% failed attempts, keep rates like the seed funnels);
3. ``ragsft plan``'s own code (``defs/plan/sample.run_sample``): the corpus stage, then ``full_job``
   on a seeded sample of ``sample`` pairs (default 50) in a scratch home, extrapolated;
4. the real ``full_job`` on every pair, in the real home, with the same roles and cache.

Each of ``seeds`` seeds (default 3: a snapshot, a fleet and a sample of their own) is one such
case; then three more, on the first seed's snapshot:

- ``warm``: plan, a partial run (half the pairs), plan again, the run: the second plan's cache hits
  against the requests the run found in the cache (``warm_hits_error``);
- ``dead``: a fleet that fails every attempt: the plan must refuse (``dead_refused``) and say so
  quickly (``dead_s``), not forecast 0 rows;
- ``load``: a fleet whose per-sequence speed falls steeply with its batch (``batch_floor`` 0.1):
  the wall time from the sample's measured throughput (``load_wall_error``).

Closing line (``bench=plan ...``): per seed, ``calls_error``, ``tokens_error`` (prompt + completion)
and ``wall_error`` (the LLM stages' wall time), each ``|forecast - actual| / actual`` over the
whole run, and ``stage_error_weighted`` (each LLM stage's error weighted by its tokens) with the
``worst_stage``; printed as the median and the worst seed (``*_median``, ``*_worst``). Bar, on the
worst seed: calls and tokens within 0.15 (total and weighted per stage), wall within 0.25.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ragsft_assets.bench import machine_values
from ragsft_assets.plan.forecast import relative_error

DEFAULT_PAIRS = 5_000
DEFAULT_SAMPLE = 50
CALLS_BAR = 0.15
TOKENS_BAR = 0.15
WALL_BAR = 0.25


def _print(msg: str) -> None:
    print(f"bench plan: {msg}", flush=True)


def errors(plan: dict[str, Any], actual: dict[str, dict[str, float]]) -> dict[str, object]:
    """The forecast's relative errors against ``actual`` (``plan.measure.actual_by_stage`` with
    ``wall_s`` per stage), overall and per stage, and the share of actual values inside the range."""
    from ragsft_assets.plan.forecast import relative_error

    stages = plan["stages"]
    llm = [s for s, f in stages.items() if f["calls"] > 0 or actual.get(s, {}).get("calls", 0) > 0]
    f_calls = sum(stages[s]["calls"] for s in llm)
    a_calls = sum(actual[s]["calls"] for s in llm)
    f_tok = sum(stages[s]["prompt_tokens"] + stages[s]["completion_tokens"] for s in llm)
    a_tok = sum(actual[s]["prompt_tokens"] + actual[s]["completion_tokens"] for s in llm)
    f_wall = sum(stages[s]["wall_s"] for s in llm)
    f_wall_low = sum(stages[s].get("wall_s_low", stages[s]["wall_s"]) for s in llm)
    a_wall = sum(actual[s].get("wall_s", 0.0) for s in llm)
    inside = total = 0
    for s, f in stages.items():
        a = actual.get(s, {})
        for value, lo, hi in (
            (a.get("calls", 0.0), f["calls_low"], f["calls_high"]),
            (a.get("kept", 0.0), f["kept_low"], f["kept_high"]),
        ):
            total += 1
            inside += lo - 0.5 <= value <= hi + 0.5  # the plan's figures are rounded to integers
    out: dict[str, object] = {
        "calls_error": round(relative_error(f_calls, a_calls), 4),
        "tokens_error": round(relative_error(f_tok, a_tok), 4),
        "wall_error": round(relative_error(f_wall, a_wall), 4),
        "in_range_share": round(inside / total, 3) if total else 1.0,
        "forecast_calls": round(f_calls),
        "actual_calls": round(a_calls),
        "forecast_wall_s": round(f_wall, 1),
        "forecast_wall_s_low": round(f_wall_low, 1),
        "actual_wall_s": round(a_wall, 1),
        # the actual wall time inside [wall_s_low (Little's law), wall_s (measured throughput)]
        "wall_in_range": f_wall_low * 0.95 <= a_wall <= f_wall * 1.05,
    }
    for s in llm:
        out[f"{s}_calls_error"] = round(relative_error(stages[s]["calls"], actual[s]["calls"]), 3)
    out.update(stage_errors(plan, actual))
    return out


def stage_errors(plan: dict[str, Any], actual: dict[str, dict[str, float]]) -> dict[str, object]:
    """Per-stage errors, so a total that is right by compensation does not hide a wrong stage:
    ``stage_error_weighted`` is each LLM stage's calls-and-tokens error weighted by its actual
    tokens; ``worst_stage`` and ``worst_stage_error`` the largest of those errors (a stage that
    made no call and was forecast none counts 0)."""
    from ragsft_assets.plan.forecast import relative_error

    stages = plan["stages"]
    per: dict[str, float] = {}
    weights: dict[str, float] = {}
    for s, f in stages.items():
        a = actual.get(s, {})
        a_tok = a.get("prompt_tokens", 0.0) + a.get("completion_tokens", 0.0)
        if f["calls"] <= 0 and a.get("calls", 0.0) <= 0:
            continue
        f_tok = f["prompt_tokens"] + f["completion_tokens"]
        per[s] = max(relative_error(f["calls"], a.get("calls", 0.0)), relative_error(f_tok, a_tok))
        weights[s] = a_tok
    total = sum(weights.values())
    weighted = sum(per[s] * weights[s] for s in per) / total if total else 0.0
    worst = max(per, key=lambda s: (per[s], s), default="")
    return {
        "stage_error_weighted": round(weighted, 4),
        "worst_stage": worst or "-",
        "worst_stage_error": round(per.get(worst, 0.0), 4),
    }


def _case(
    n_pairs: int,
    sample: int,
    root: Path,
    seed: int,
    fleet_kw: dict[str, Any],
    *,
    warm: bool = False,
) -> dict[str, object]:
    """One plan then run on a fresh home (``warm``: plan, half run, plan, run); its errors."""
    import dagster as dg

    from ragsft_assets.bench.fleet import PARTITION, _resources, fresh_home, llm_resources, make_snapshot
    from ragsft_assets.bench.fleet_sim import FleetSimulator
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.plan.record import run_actuals
    from ragsft_assets.defs.plan.sample import JOB_KINDS, _execute, run_sample
    from ragsft_assets.plan import forecast as fc
    from ragsft_assets.plan import measure

    def config(pairs: int) -> dict[str, Any]:
        return {
            "ops": {
                "bridge_pairs": {"config": {"max_pairs": n_pairs}},
                "question_drafts": {"config": {"max_pairs": pairs}},
            }
        }

    slots = int(fleet_kw.get("slots", 128))
    replicas = int(fleet_kw.get("replicas", 2))
    with fresh_home(root) as home:
        make_snapshot(home, n_pairs, root, seed)
        with FleetSimulator(seed=seed, **fleet_kw) as fleet:
            llm = llm_resources(home, fleet.base_urls, fleet.model, concurrency=slots)
            resources = _resources(home, llm)
            instance = dg.DagsterInstance.ephemeral()
            job = build_definitions(resources).resolve_job_def("full_job")
            corpus = JOB_KINDS["full_job"].deterministic  # built by the plan, reused by the run
            keys = [k for k in job.asset_layer.asset_graph.get_all_asset_keys() if k.path[-1] not in corpus]

            def plan_now() -> tuple[dict[str, Any], float]:
                t0 = time.perf_counter()
                out = run_sample(
                    PARTITION,
                    resources=resources,
                    sample=sample,
                    run_config=config(n_pairs),
                    home=home,
                    instance=instance,
                    fleet=fc.Fleet(slots=replicas * slots),
                    log=_print,
                ).to_json()
                return out, time.perf_counter() - t0

            plan, plan_s = plan_now()
            if warm:  # a partial run of half the pairs, then the plan that must count its cache
                if not _execute(job, PARTITION, instance, config(n_pairs // 2), keys).success:
                    raise RuntimeError("bench plan: the partial run failed")
                plan, plan_s = plan_now()
            _print(
                f"seed {seed}: plan of {plan['input_items']} pairs from {sample} in {plan_s:.1f}s; the run starts"
            )
            started = time.time()
            t0 = time.perf_counter()
            result = _execute(job, PARTITION, instance, config(n_pairs), keys)
            run_s = time.perf_counter() - t0
            if not result.success:
                raise RuntimeError("bench plan: the full run failed")
            for r in llm.values():
                r.close()
        folder = home / "assets" / PARTITION
        actual = run_actuals(folder, home / "llm_cache", plan["stages"], instance, result.run_id)
        values = {**errors(plan, actual), "plan_s": round(plan_s, 1), "run_s": round(run_s, 1)}
        if warm:
            counts = measure.ledger_counts(folder)
            hits = sum(
                measure.cache_tokens(home / "llm_cache", counts[s]["keys"], before=started)["cached_before"]  # type: ignore[arg-type]
                for s in plan["stages"]
                if s in counts
            )
            forecast_hits = sum(f["cache_hits"] for f in plan["stages"].values())
            values.update(
                warm_hits_forecast=round(forecast_hits),
                warm_hits_actual=hits,
                warm_hits_error=round(relative_error(forecast_hits, hits), 4),
            )
    return values


def _dead_case(n_pairs: int, sample: int, root: Path, seed: int) -> dict[str, object]:
    """A fleet that fails every attempt: the plan must refuse, quickly, and say why."""
    import dagster as dg

    from ragsft_assets.bench.fleet import PARTITION, _resources, fresh_home, llm_resources, make_snapshot
    from ragsft_assets.bench.fleet_sim import FleetSimulator
    from ragsft_assets.defs.plan.sample import run_sample

    with fresh_home(root) as home:
        make_snapshot(home, n_pairs, root, seed)
        with FleetSimulator(replicas=1, slots=16, error_rate=1.0, seed=seed, time_scale=0.25) as fleet:
            llm = llm_resources(home, fleet.base_urls, fleet.model, concurrency=16)
            t0 = time.perf_counter()
            refused, why = False, ""
            try:
                run_sample(
                    PARTITION,
                    resources=_resources(home, llm),
                    sample=sample,
                    run_config={"ops": {"bridge_pairs": {"config": {"max_pairs": n_pairs}}}},
                    home=home,
                    instance=dg.DagsterInstance.ephemeral(),
                    log=_print,
                )
            except RuntimeError as exc:
                refused, why = True, str(exc)
            dead_s = time.perf_counter() - t0
            for r in llm.values():
                r.close()
    _print(f"dead fleet: {'refused' if refused else 'NOT refused'} in {dead_s:.1f}s: {why[:200]}")
    return {"dead_refused": refused, "dead_s": round(dead_s, 1)}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def run(
    size: int | None = None,
    workdir: str | None = None,
    *,
    pairs: int | None = None,
    sample: int = DEFAULT_SAMPLE,
    seeds: int = 3,
    cases: tuple[str, ...] = ("warm", "dead", "load"),
    replicas: int = 2,
    slots: int = 128,
    prefill_tok_s: float = 500.0,
    decode_tok_s: float = 30.0,
    error_rate: float = 0.01,
    time_scale: float = 0.25,
) -> dict[str, object]:
    """Plan, then run, generated snapshots against the simulated fleet, ``seeds`` times, then the
    warm-cache, dead-fleet and load-dependent cases; the closing key=value pairs."""
    n_pairs = pairs or size or DEFAULT_PAIRS
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-plan-"))
    root.mkdir(parents=True, exist_ok=True)
    fleet_kw: dict[str, Any] = {
        "replicas": replicas,
        "slots": slots,
        "prefill_tok_s": prefill_tok_s,
        "decode_tok_s": decode_tok_s,
        "error_rate": error_rate,
        "time_scale": time_scale,
    }
    per_seed = [_case(n_pairs, sample, root, seed, fleet_kw) for seed in range(1, seeds + 1)]
    values: dict[str, object] = {"pairs": n_pairs, "sample": sample, "seeds": seeds}
    for key in ("calls_error", "tokens_error", "wall_error", "stage_error_weighted", "in_range_share"):
        series = [float(v[key]) for v in per_seed]  # type: ignore[arg-type]
        worst = min(series) if key == "in_range_share" else max(series)
        values[f"{key}_median"] = round(_median(series), 4)
        values[f"{key}_worst"] = round(worst, 4)
    worst_seed = max(per_seed, key=lambda v: float(v["stage_error_weighted"]))  # type: ignore[arg-type]
    values["worst_stage"] = worst_seed["worst_stage"]
    values["worst_stage_error"] = worst_seed["worst_stage_error"]
    values["wall_in_range_share"] = round(sum(bool(v["wall_in_range"]) for v in per_seed) / len(per_seed), 3)
    values["wall_forecast_over_actual"] = ",".join(
        f"{float(v['forecast_wall_s']) / max(float(v['actual_wall_s']), 1e-9):.2f}"  # type: ignore[arg-type]
        for v in per_seed
    )
    values["plan_s_median"] = round(_median([float(v["plan_s"]) for v in per_seed]), 1)  # type: ignore[arg-type]
    values["run_s_median"] = round(_median([float(v["run_s"]) for v in per_seed]), 1)  # type: ignore[arg-type]
    if "warm" in cases:
        warm = _case(n_pairs, sample, root, 1, fleet_kw, warm=True)
        values.update({k: warm[k] for k in ("warm_hits_forecast", "warm_hits_actual", "warm_hits_error")})
        values["warm_calls_error"] = warm["calls_error"]
    if "dead" in cases:
        values.update(_dead_case(n_pairs, sample, root, 1))
    if "load" in cases:
        load = _case(n_pairs, sample, root, 1, {**fleet_kw, "batch_floor": 0.1})
        values["load_wall_error"] = load["wall_error"]
        values["load_calls_error"] = load["calls_error"]
    values["time_scale"] = time_scale
    values["load_avg"] = round(os.getloadavg()[0], 2)
    values["passed"] = (
        float(values["calls_error_worst"]) <= CALLS_BAR  # type: ignore[arg-type]
        and float(values["tokens_error_worst"]) <= TOKENS_BAR  # type: ignore[arg-type]
        and float(values["stage_error_weighted_worst"]) <= CALLS_BAR  # type: ignore[arg-type]
        and float(values["wall_error_worst"]) <= WALL_BAR  # type: ignore[arg-type]
        and bool(values.get("dead_refused", True))
    )
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return {**values, **machine_values()}
