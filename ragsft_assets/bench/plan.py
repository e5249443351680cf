"""``ragsft bench plan``: how far ``ragsft plan``'s forecast is from the run it forecasts.

In one run:

1. a generated snapshot of about ``pairs`` bridge pairs (default 5,000; ``bench.fleet``'s
   generator: realistic frwiki records);
2. the simulated fleet of ``bench fleet`` (``bench.fleet_sim``: 2 replicas x 128 slots, prefill and
   decode rates, 429 + Retry-After, about 1% failed attempts, keep rates like the seed funnels);
3. ``ragsft plan``'s own code (``defs/plan/sample.run_sample``): the corpus stage, then ``full_job``
   on a seeded sample of ``sample`` pairs (default 50) in a scratch home, extrapolated;
4. the real ``full_job`` on every pair, in the real home, with the same roles and cache.

Closing line (``bench=plan ...``): ``calls_error``, ``tokens_error`` (prompt + completion) and
``wall_error`` (the LLM stages' wall time), each ``|forecast - actual| / actual`` over the whole
run; ``in_range_share``: the share of the stages' actual calls and kept items that fall inside the
forecast's low-high range; per stage ``<stage>_calls_error``. Bar: calls and tokens within 0.15,
wall within 0.25.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ragsft_assets.bench import machine_values

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
        "actual_wall_s": round(a_wall, 1),
    }
    for s in llm:
        out[f"{s}_calls_error"] = round(relative_error(stages[s]["calls"], actual[s]["calls"]), 3)
    return out


def run(
    size: int | None = None,
    workdir: str | None = None,
    *,
    pairs: int | None = None,
    sample: int = DEFAULT_SAMPLE,
    replicas: int = 2,
    slots: int = 128,
    prefill_tok_s: float = 500.0,
    decode_tok_s: float = 30.0,
    error_rate: float = 0.01,
    time_scale: float = 0.25,
    seed: int = 1,
) -> dict[str, object]:
    """Plan, then run, a generated snapshot against the simulated fleet; the closing key=value pairs."""
    import dagster as dg

    from ragsft_assets.bench.fleet import PARTITION, _resources, fresh_home, llm_resources, make_snapshot
    from ragsft_assets.bench.fleet_sim import FleetSimulator
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.plan.record import run_actuals
    from ragsft_assets.defs.plan.sample import JOB_KINDS, _execute, run_sample
    from ragsft_assets.plan import forecast as fc

    n_pairs = pairs or size or DEFAULT_PAIRS
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-plan-"))
    root.mkdir(parents=True, exist_ok=True)
    run_config = {
        "ops": {
            "bridge_pairs": {"config": {"max_pairs": n_pairs}},
            "question_drafts": {"config": {"max_pairs": n_pairs}},
        }
    }
    with fresh_home(root) as home:
        make_snapshot(home, n_pairs, root, seed)
        with FleetSimulator(
            replicas=replicas,
            slots=slots,
            prefill_tok_s=prefill_tok_s,
            decode_tok_s=decode_tok_s,
            error_rate=error_rate,
            seed=seed,
            time_scale=time_scale,
        ) as fleet:
            llm = llm_resources(home, fleet.base_urls, fleet.model, concurrency=slots)
            resources = _resources(home, llm)
            instance = dg.DagsterInstance.ephemeral()
            t0 = time.perf_counter()
            plan = run_sample(
                PARTITION,
                resources=resources,
                sample=sample,
                run_config=run_config,
                home=home,
                instance=instance,
                fleet=fc.Fleet(slots=replicas * slots),
                log=_print,
            ).to_json()
            plan_s = time.perf_counter() - t0
            _print(f"plan of {plan['input_items']} pairs from {sample} in {plan_s:.1f}s; the run starts")
            job = build_definitions(resources).resolve_job_def("full_job")
            corpus = JOB_KINDS["full_job"].deterministic  # built by the plan, reused by the run
            keys = [k for k in job.asset_layer.asset_graph.get_all_asset_keys() if k.path[-1] not in corpus]
            t0 = time.perf_counter()
            result = _execute(job, PARTITION, instance, run_config, keys)
            run_s = time.perf_counter() - t0
            if not result.success:
                raise RuntimeError("bench plan: the full run failed")
            for r in llm.values():
                r.close()
        actual = run_actuals(
            home / "assets" / PARTITION, home / "llm_cache", plan["stages"], instance, result.run_id
        )
    values: dict[str, object] = {
        "pairs": plan["input_items"],
        "sample": sample,
        **errors(plan, actual),
        "plan_s": round(plan_s, 1),
        "run_s": round(run_s, 1),
        "time_scale": time_scale,
        "load_avg": round(os.getloadavg()[0], 2),
    }
    values["passed"] = (
        values["calls_error"] <= CALLS_BAR  # type: ignore[operator]
        and values["tokens_error"] <= TOKENS_BAR  # type: ignore[operator]
        and values["wall_error"] <= WALL_BAR  # type: ignore[operator]
    )
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return {**values, **machine_values()}
