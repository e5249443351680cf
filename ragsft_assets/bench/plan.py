"""``ragsft bench plan``: how far ``ragsft plan``'s forecast is from the run it forecasts.

In one run:

1. a generated snapshot of about ``pairs`` bridge pairs (default 5,000; ``bench.fleet``'s
   generator: realistic frwiki records);
2. the simulated fleet of ``bench fleet`` (``bench.fleet_sim``: 2 replicas x 128 slots, prefill and
   decode rates, 429 + Retry-After, about 1% failed attempts, keep rates like the seed funnels);
3. ``ragsft plan``'s own code (``defs/plan/record.make_plan``): the corpus stage, then ``full_job``
   on a seeded sample in a scratch home (a fixed ``sample`` after its pilot of a quarter, or the
   default: 50 pairs grown until the plan's own 95% half-width is 15%), extrapolated;
4. the real ``full_job`` on every pair, in the real home, with the same roles and cache.

Each of ``seeds`` seeds (default 3: a snapshot, a fleet and a sample of their own) is one such
case per sample size of ``samples`` (0: the default plan): before each plan, the partition and the
cache are put back as they were after the corpus stage, so each plan is judged against the run
that follows it, with the cache it left, as a user's run. Then three more, on the first seed's
snapshot:

- ``warm``: plan, a partial run (half the pairs), plan again, the run: the second plan's cache hits
  against the requests the run found in the cache (``warm_hits_error``);
- ``dead``: a fleet that fails every attempt: the plan must refuse (``dead_refused``) and say so
  quickly (``dead_s``), not forecast 0 rows;
- ``load``: a fleet whose per-sequence speed falls steeply with its batch (``batch_floor`` 0.1):
  the wall time from the fleet model (``load_wall_error``).

Closing line (``bench=plan ...``): per seed, ``calls_error``, ``tokens_error`` (prompt + completion),
each ``|forecast - actual| / actual`` over the whole run, ``stage_error_weighted`` (each LLM
stage's error weighted by its tokens) with the ``worst_stage``, and ``wall_error`` /
``wall_low_error`` / ``wall_high_error``: the plan's seconds per request to make (``wall_s``, the
fleet model's point; ``wall_s_low``, a load-free fleet; ``wall_s_high``, a saturated one) times
the requests the run made, against the LLM stages' step seconds; printed as the median and the
worst seed (``*_median``, ``*_worst``). With the plan's own claim beside them: ``calls_halfwidth``
/ ``tokens_halfwidth`` (its 95% half-widths), ``sample_needed`` (the sample its spread asks for
+/-15%), ``sample_items`` (the sample it ran) and ``saturation`` (its load curve, -1: none). With
several ``samples`` each figure is prefixed ``n<N>_`` (``default_`` for 0). Bar, on the worst
seed: calls and tokens within 0.15 (total and weighted per stage), wall within 0.25. A
``workdir`` keeps each case's plan and actual figures (``plan_case_*.json``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

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
    f_wall_high = sum(stages[s].get("wall_s_high", stages[s]["wall_s"]) for s in llm)
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
        # the actual wall time inside [wall_s_low (load-free fleet), wall_s_high (saturated fleet)]
        "wall_in_range": f_wall_low * 0.95 <= a_wall <= f_wall_high * 1.05,
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


def rated_wall(plan: dict[str, Any], made: dict[str, float], field: str = "wall_s") -> float:
    """The plan's wall time (``field``: ``wall_s``, or ``wall_s_low``, Little's law) for the requests
    a run actually made per stage (``made``): each stage's forecast seconds per request to make,
    times those requests. It judges the throughput measure alone, apart from the calls' error and
    the cache state the plan saw."""
    total = 0.0
    for name, f in plan["stages"].items():
        to_make = f["calls"] - f["cache_hits"]
        if to_make > 0:
            total += f.get(field, f["wall_s"]) / to_make * made.get(name, 0.0)
    return total


def _case(
    n_pairs: int,
    samples: tuple[int, ...],
    root: Path,
    seed: int,
    fleet_kw: dict[str, Any],
    *,
    warm: bool = False,
) -> dict[int, dict[str, object]]:
    """Per sample size of ``samples`` (fixed sizes smallest first, then 0, the default plan): a plan
    then the run it forecasts, on one home whose partition and cache are put back as they were
    before each plan (``warm``: plan, half run, plan, run); per size, the plan's errors against its
    own run. Each plan is judged against the run that follows it, with the cache it left."""
    import dagster as dg

    from ragsft_assets.bench.fleet import PARTITION, _resources, fresh_home, llm_resources, make_snapshot
    from ragsft_assets.bench.fleet_sim import FleetSimulator
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.plan.record import make_plan
    from ragsft_assets.defs.plan.sample import JOB_KINDS, _execute
    from ragsft_assets.llm.cache import DB_NAME

    def config(pairs: int) -> dict[str, Any]:
        return {
            "ops": {
                "bridge_pairs": {"config": {"max_pairs": n_pairs}},
                "question_drafts": {"config": {"max_pairs": pairs}},
            }
        }

    slots = int(fleet_kw.get("slots", fleet_default("slots")))
    replicas = int(fleet_kw.get("replicas", fleet_default("replicas")))
    out: dict[int, dict[str, object]] = {}
    with fresh_home(root) as home:
        make_snapshot(home, n_pairs, root, seed)
        with FleetSimulator(seed=seed, **fleet_kw) as fleet:
            llm = llm_resources(home, fleet.base_urls, fleet.model, concurrency=slots)
            resources = _resources(home, llm)
            instance = dg.DagsterInstance.ephemeral()
            job = build_definitions(resources).resolve_job_def("full_job")
            corpus = JOB_KINDS["full_job"].deterministic  # built by the plan, reused by the run
            keys = [k for k in job.asset_layer.asset_graph.get_all_asset_keys() if k.path[-1] not in corpus]
            cache_db = home / "llm_cache" / DB_NAME

            def plan_now(sample: int) -> tuple[dict[str, Any], float]:
                """One plan as ``ragsft plan`` makes it (``sample`` 0: the default)."""
                t0 = time.perf_counter()
                plan = make_plan(
                    PARTITION,
                    sample=sample or None,
                    slots=replicas * slots,
                    resources=resources,
                    run_config=config(n_pairs),
                    home=home,
                    instance=instance,
                    log=_print,
                )
                return plan, time.perf_counter() - t0

            fresh = time.time()  # the corpus is built by the first plan; no LLM call before this
            for sample in plan_order(samples):
                forget_run(home, PARTITION, corpus, cache_db, fresh)
                plan, plan_s = plan_now(sample)
                if warm:  # a partial run of half the pairs, then the plan that must count its cache
                    if not _execute(job, PARTITION, instance, config(n_pairs // 2), keys).success:
                        raise RuntimeError("bench plan: the partial run failed")
                    plan, plan_s = plan_now(sample)
                _print(f"seed {seed}: plan from {sample or 'the default'} of {n_pairs} pairs; the run starts")
                started = time.time()
                t0 = time.perf_counter()
                result = _execute(job, PARTITION, instance, config(n_pairs), keys)
                run_s = time.perf_counter() - t0
                if not result.success:
                    raise RuntimeError("bench plan: the full run failed")
                actual, cached, made = _run_figures(home, PARTITION, plan, instance, result, started)
                out[sample] = _judge(plan, actual, cached, made, warm) | {
                    "plan_s": round(plan_s, 1),
                    "run_s": round(run_s, 1),
                }
                # every figure behind the errors, for a look afterwards (``workdir``)
                dump = {"seed": seed, "pairs": n_pairs, "fleet": fleet_kw, "warm": warm, "run_s": run_s}
                dump.update(sample=sample, actual=actual, plan=plan)
                name = f"plan_case_seed{seed}{'_warm' if warm else ''}_n{sample}_{time.time_ns()}.json"
                (root / name).write_bytes(
                    orjson.dumps(dump, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
                )
            for r in llm.values():
                r.close()
    return out


def _run_figures(
    home: Path, partition: str, plan: dict[str, Any], instance: Any, result: Any, started: float
) -> tuple[dict[str, dict[str, float]], dict[str, float], dict[str, float]]:
    """What the run did per stage (``run_actuals``, with its batches' load), the requests it found
    in the cache, and those it made."""
    from ragsft_assets.defs.plan.record import run_actuals
    from ragsft_assets.defs.plan.sample import llm_time
    from ragsft_assets.plan import measure

    folder = home / "assets" / partition
    actual = run_actuals(folder, home / "llm_cache", plan["stages"], instance, result.run_id)
    counts = measure.ledger_counts(folder)
    cached = {
        s: float(measure.cache_tokens(home / "llm_cache", counts[s]["keys"], before=started)["cached_before"])  # type: ignore[arg-type]
        for s in plan["stages"]
        if s in counts
    }
    made = {s: actual[s]["calls"] - cached.get(s, 0.0) for s in actual}
    for stage, (llm_wall, request_s, sent, streamed) in llm_time(result).items():  # the run's load
        if stage in actual:
            actual[stage].update(
                llm_wall_s=llm_wall, request_s=request_s, batch_calls=sent, stream_calls=streamed
            )
    for stage, n in made.items():
        actual[stage]["made"] = n
    return actual, cached, made


def _judge(
    plan: dict[str, Any],
    actual: dict[str, dict[str, float]],
    cached: dict[str, float],
    made: dict[str, float],
    warm: bool,
) -> dict[str, object]:
    """A plan's figures against its run's."""
    values = errors(plan, actual)
    # the wall time of the requests the run made, at the plan's seconds per request to make
    a_wall = float(values["actual_wall_s"])  # type: ignore[arg-type]
    values["wall_error"] = round(relative_error(rated_wall(plan, made), a_wall), 4)
    values["wall_low_error"] = round(relative_error(rated_wall(plan, made, "wall_s_low"), a_wall), 4)
    values["wall_high_error"] = round(relative_error(rated_wall(plan, made, "wall_s_high"), a_wall), 4)
    values["sample_items"] = plan["sample_items"]
    values["saturation"] = plan.get("load", {}).get("saturation", -1.0)
    precision = plan.get("precision", {})
    values["calls_halfwidth"] = precision.get("calls", -1.0)
    values["tokens_halfwidth"] = precision.get("tokens", -1.0)
    values["sample_needed"] = precision.get("sample_needed", -1.0)
    if warm:
        forecast_hits = sum(f["cache_hits"] for f in plan["stages"].values())
        hits = sum(cached.values())
        values.update(
            warm_hits_forecast=round(forecast_hits),
            warm_hits_actual=round(hits),
            warm_hits_error=round(relative_error(forecast_hits, hits), 4),
        )
        for name, f in plan["stages"].items():  # per stage: which one counts keys the run skips
            if f["cache_hits"] or cached.get(name):
                values[f"warm_hits_{name}"] = f"{round(f['cache_hits'])}/{round(cached.get(name, 0.0))}"
    return values


def forget_run(home: Path, partition: str, corpus: tuple[str, ...], cache_db: Path, since: float) -> None:
    """Put the partition back as it was after its corpus stage: the earlier run's assets, ledger
    rows and release gone, and its calls and the earlier plans' forgotten (``forget_calls``)."""
    from ragsft_assets.storage import LEDGER_DIR

    folder = home / "assets" / partition
    keep = {name.split("/")[-1] for name in corpus}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.is_dir() and path.name not in keep and path.name != LEDGER_DIR:
            shutil.rmtree(path)
    for path in sorted((folder / LEDGER_DIR).glob("*.parquet")):
        if path.stem not in keep:
            path.unlink()
    shutil.rmtree(home / "releases" / partition, ignore_errors=True)
    forget_calls(cache_db, since)


def plan_order(samples: tuple[int, ...]) -> list[int]:
    """The plans of a seed, fixed sizes smallest first, then the default (0), whose cache the run
    finds as a user's run would."""
    return sorted(set(samples), key=lambda n: (n == 0, n))


def forget_calls(cache_db: Path, since: float) -> None:
    """Delete the cache entries written since ``since`` (an earlier plan's sample calls), so that
    each plan of a seed measures its own sample at a cold cache, as a first plan does."""
    import sqlite3

    if not cache_db.exists():
        return
    con = sqlite3.connect(cache_db, timeout=60)
    try:
        con.execute("DELETE FROM calls WHERE created >= ?", (since,))
        con.commit()
    finally:
        con.close()


def tag_of(n: int, sizes: list[int]) -> str:
    """The prefix of a sample size's figures: ``n<N>_``, ``default_`` for the default plan, none
    when the bench plans one size."""
    if len(sizes) == 1:
        return ""
    return "default_" if n == 0 else f"n{n}_"


def fleet_default(name: str) -> Any:
    """The simulated fleet's default for one of its options (``FleetSimulator``'s signature)."""
    import inspect

    from ragsft_assets.bench.fleet_sim import FleetSimulator

    return inspect.signature(FleetSimulator).parameters[name].default


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


SUMMARY = (
    "calls_error",
    "tokens_error",
    "wall_error",
    "wall_low_error",
    "wall_high_error",
    "stage_error_weighted",
    "in_range_share",
)


def run(
    size: int | None = None,
    workdir: str | None = None,
    *,
    pairs: int | None = None,
    sample: int = DEFAULT_SAMPLE,
    samples: tuple[int, ...] = (),
    seeds: int = 3,
    cases: tuple[str, ...] = ("warm", "dead", "load"),
    time_scale: float = 0.25,
    **fleet_options: Any,
) -> dict[str, object]:
    """Plan, then run, generated snapshots against the simulated fleet, ``seeds`` times, then the
    warm-cache, dead-fleet and load-dependent cases; the closing key=value pairs.

    ``samples`` (default: ``(sample,)``) are the sample sizes planned before each seed's one run;
    with more than one, each figure is prefixed ``n<N>_``. ``fleet_options`` go to
    ``FleetSimulator`` (``replicas``, ``slots``, ``prefill_tok_s``, ``decode_tok_s``,
    ``error_rate``, ...), its defaults otherwise."""
    n_pairs = pairs or size or DEFAULT_PAIRS
    sizes = plan_order(samples or (sample,))
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-plan-"))
    root.mkdir(parents=True, exist_ok=True)
    fleet_kw: dict[str, Any] = {"time_scale": time_scale, **fleet_options}
    per_seed = [_case(n_pairs, tuple(sizes), root, seed, fleet_kw) for seed in range(1, seeds + 1)]
    values: dict[str, object] = {"pairs": n_pairs, "seeds": seeds}
    passed = True
    for n in sizes:
        tag = tag_of(n, sizes)
        seeds_n = [case[n] for case in per_seed]
        values[f"{tag}sample"] = n
        values[f"{tag}sample_items_median"] = _median([float(v["sample_items"]) for v in seeds_n])  # type: ignore[arg-type]
        values[f"{tag}saturation_median"] = round(_median([float(v["saturation"]) for v in seeds_n]), 3)  # type: ignore[arg-type]
        for key in SUMMARY:
            series = [float(v[key]) for v in seeds_n]  # type: ignore[arg-type]
            worst = min(series) if key == "in_range_share" else max(series)
            values[f"{tag}{key}_median"] = round(_median(series), 4)
            values[f"{tag}{key}_worst"] = round(worst, 4)
        worst_seed = max(seeds_n, key=lambda v: float(v["stage_error_weighted"]))  # type: ignore[arg-type]
        values[f"{tag}worst_stage"] = worst_seed["worst_stage"]
        values[f"{tag}worst_stage_error"] = worst_seed["worst_stage_error"]
        # what the plan itself said: its 95% half-widths and the sample its own spread asks for
        for key in ("calls_halfwidth", "tokens_halfwidth", "sample_needed"):
            values[f"{tag}{key}_median"] = round(_median([float(v[key]) for v in seeds_n]), 3)  # type: ignore[arg-type]
        values[f"{tag}calls_inside_halfwidth"] = round(
            sum(float(v["calls_error"]) <= float(v["calls_halfwidth"]) for v in seeds_n) / len(seeds_n),  # type: ignore[arg-type]
            3,
        )
        values[f"{tag}plan_s_median"] = round(_median([float(v["plan_s"]) for v in seeds_n]), 1)  # type: ignore[arg-type]
        passed = passed and (
            float(values[f"{tag}calls_error_worst"]) <= CALLS_BAR  # type: ignore[arg-type]
            and float(values[f"{tag}tokens_error_worst"]) <= TOKENS_BAR  # type: ignore[arg-type]
            and float(values[f"{tag}stage_error_weighted_worst"]) <= CALLS_BAR  # type: ignore[arg-type]
            and float(values[f"{tag}wall_error_worst"]) <= WALL_BAR  # type: ignore[arg-type]
        )
    values["run_s_median"] = round(_median([float(c[n]["run_s"]) for c in per_seed for n in sizes]), 1)  # type: ignore[arg-type]
    if "warm" in cases:
        warm = _case(n_pairs, (sizes[0],), root, 1, fleet_kw, warm=True)[sizes[0]]
        values.update({k: v for k, v in warm.items() if k.startswith("warm_hits_")})
        values["warm_calls_error"] = warm["calls_error"]
    if "dead" in cases:
        values.update(_dead_case(n_pairs, sizes[0] or DEFAULT_SAMPLE, root, 1))
        passed = passed and bool(values["dead_refused"])
    if "load" in cases:
        load = _case(n_pairs, (sizes[0],), root, 1, {**fleet_kw, "batch_floor": 0.1})[sizes[0]]
        values["load_wall_error"] = load["wall_error"]
        values["load_calls_error"] = load["calls_error"]
    values["time_scale"] = time_scale
    values["load_avg"] = round(os.getloadavg()[0], 2)
    values["passed"] = passed
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    return {**values, **machine_values()}
