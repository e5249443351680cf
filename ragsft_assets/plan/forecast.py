"""The cost forecast of a run: per-stage measures of a small sample, extrapolated through the funnel.

Dagster-free. A run's LLM stages form a tree: each stage decides the items that its upstream
stage kept (the first stages decide the partition's input items: bridge pairs, questions,
examples). From a sample run on ``n`` input items, each stage gives its *fan-out* (items decided
per upstream item kept), its keep rate, its requests per item and tokens per request. The
forecast applies them stage after stage from the partition's whole input, so a stage's input is
its upstream's forecast output and a stage that keeps nothing forecasts nothing downstream.

Ranges come, when the caller gives them (``spreads``, from ``plan/spread.py``), from the spread
of each stage's figures between the sample's input items: a 95% interval of the total with the
finite-population correction, the total's own from the per-item sums over every stage. Without
them, from the keep rates' binomial uncertainty (Wilson interval, 95%), propagated down the tree:
``*_low`` uses every upstream's low keep rate, ``*_high`` the high ones. A stage no sample item
reached forecasts 0, its range up to its upstream's high output times the stage's most calls per
item (``max_calls_per_item``).

Cache hits are counted, not extrapolated: the caller gives, per stage, how many of the partition's
own request keys are in the cache (the sample's, which the run makes again, and those a previous
run of the partition recorded in its ledger). Wall time comes from the sample's measured
throughput (requests per LLM second at the sample's load): an engine whose per-request speed falls
as more requests run (the embedded engine, a ``vllm serve`` near capacity) gains nothing from more
slots, so ``wall_s`` assumes none; ``wall_s_low`` is Little's law with the fleet's slots, what a
fleet whose latency does not depend on load would take.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ragsft_assets.plan.spread import TARGET_ERROR, Z95, sample_needed


@dataclass(frozen=True)
class StageSample:
    """What one LLM stage did on the sample (from its ledger rows and the cache)."""

    name: str
    upstream: str | None  # the stage whose kept items this one decides; None = the input items
    items: int  # candidates decided
    kept: int
    requests: int  # LLM requests behind those decisions (cache keys)
    prompt_tokens: int
    completion_tokens: int
    cached_before: int = 0  # of ``requests``, those already in the cache before the sample ran
    wall_s: float = 0.0  # the stage's step wall time in the sample
    role: str = ""
    llm_wall_s: float = 0.0  # of ``wall_s``, the time its LLM batches ran
    request_s: float = 0.0  # request-seconds in flight during those batches (concurrency x time)
    # the most requests one item may cost (an LLM stage 1, the four-ablation cascade 4): the high
    # end of a stage no sample item reached
    max_calls_per_item: float = 0.0


@dataclass(frozen=True)
class Fleet:
    """What the run will be served by: request slots in flight at once, GPUs behind them."""

    slots: int = 256
    gpus: int = 0  # replicas x GPUs per replica; 0 = unknown (no GPU-hours)


@dataclass
class StageForecast:
    name: str
    upstream: str | None
    items: float
    kept: float
    keep_rate: float
    keep_low: float
    keep_high: float
    calls: float
    calls_low: float
    calls_high: float
    prompt_tokens: float
    completion_tokens: float
    cache_hits: float
    wall_s: float
    items_low: float = 0.0
    items_high: float = 0.0
    kept_low: float = 0.0
    kept_high: float = 0.0
    wall_s_low: float = 0.0  # Little's law with the fleet's slots: a load-independent fleet's time
    reached: bool = True  # False: no sample item reached the stage (its figures are bounds only)
    # the 95% half-width of ``calls`` relative to it, from the spread between sampled input items
    # (-1: not known, the range is the Wilson one)
    error_95: float = -1.0


@dataclass
class Plan:
    """A forecast: per stage, the totals, the release configs' rows and the budget warnings."""

    partition: str
    job: str
    sample_items: int
    input_items: int
    stages: dict[str, StageForecast]
    configs: dict[str, dict[str, float]] = field(default_factory=dict)
    fleet: Fleet = field(default_factory=Fleet)
    warnings: list[str] = field(default_factory=list)
    # the whole run's 95% half-widths (relative): ``calls``, ``tokens``; ``sample_needed``, the input
    # items a sample needs for ``target`` on the total and on every stage of 5% of the tokens, from
    # ``cv``, the largest per-item coefficient of variation among them (empty: an exact sample)
    precision: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> dict[str, float]:
        keys = (
            "calls",
            "calls_low",
            "calls_high",
            "prompt_tokens",
            "completion_tokens",
            "cache_hits",
            "wall_s",
            "wall_s_low",
        )
        out = {k: float(sum(getattr(s, k) for s in self.stages.values())) for k in keys}
        if "calls" in self.precision:  # the interval of the total, not the sum of the stages' bounds
            unseen = sum(s.calls_high for s in self.stages.values() if not s.reached)
            out["calls_low"] = out["calls"] * max(0.0, 1 - self.precision["calls"])
            out["calls_high"] = out["calls"] * (1 + self.precision["calls"]) + unseen
        if self.fleet.gpus:
            out["gpu_hours"] = out["wall_s"] / 3600.0 * self.fleet.gpus
        return out

    def to_json(self) -> dict[str, Any]:
        """The plan as one JSON object (``ragsft plan --json``), figures rounded to integers."""

        def rounded(d: Mapping[str, Any]) -> dict[str, Any]:
            return {
                k: (round(v) if isinstance(v, float) and not k.startswith(UNROUNDED) else v)
                for k, v in d.items()
            }

        return {
            "partition": self.partition,
            "job": self.job,
            "sample_items": self.sample_items,
            "input_items": self.input_items,
            "fleet": asdict(self.fleet),
            "stages": {n: rounded(asdict(s)) for n, s in self.stages.items()},
            "total": rounded(self.total),
            "configs": {n: rounded(v) for n, v in self.configs.items()},
            "precision": {k: round(v, 4) for k, v in self.precision.items()},
            "warnings": list(self.warnings),
        }


UNROUNDED = ("keep", "error_95")  # JSON fields that are rates, not counts: never rounded to integers


def wilson(kept: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a keep rate ``kept / n``; ``(0, 1)`` when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = kept / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _interval(value: float, relative_se: float) -> tuple[float, float]:
    """``value`` +/- its 95% half-width, from its relative standard error (never below 0)."""
    half = Z95 * relative_se
    return value * max(0.0, 1 - half), value * (1 + half)


def _order(samples: Sequence[StageSample]) -> list[StageSample]:
    """Stages with every upstream before its downstream (ties keep the given order).

    Raises:
        ValueError: an upstream that is not a sampled stage, or a cycle.
    """
    by_name = {s.name: s for s in samples}
    for s in samples:
        if s.upstream is not None and s.upstream not in by_name:
            raise ValueError(f"stage {s.name!r}: upstream {s.upstream!r} is not a sampled stage")
    done: list[StageSample] = []
    seen: set[str] = set()
    pending = list(samples)
    while pending:
        ready = [s for s in pending if s.upstream is None or s.upstream in seen]
        if not ready:
            raise ValueError(f"stages form a cycle: {sorted(s.name for s in pending)}")
        for s in ready:
            done.append(s)
            seen.add(s.name)
        pending = [s for s in pending if s.name not in seen]
    return done


def stage_wall_s(calls: float, sample: StageSample, slots: int) -> float:
    """A stage's wall time for ``calls`` requests at the sample's measured throughput.

    The sample made ``made`` requests in ``llm_wall_s`` seconds of LLM batches (the step's
    ``wall_s`` when the stage reports no LLM time): that throughput, measured at the sample's own
    load, is what the run gets. On an engine whose speed depends on load (the embedded engine runs
    out of cores, a ``vllm serve`` shares its GPU between sequences) more requests in flight do not
    make requests finish sooner, so no speed-up is assumed from ``slots``; only when the sample
    itself was held below its in-flight level by ``slots`` is nothing lost either. The step's other
    work (prompts, checks, writes) scales with the calls. See :func:`stage_wall_s_low` for the
    load-independent bound.
    """
    made = max(sample.requests - sample.cached_before, 0)
    if calls <= 0 or made <= 0 or sample.wall_s <= 0:
        return 0.0
    llm_wall = sample.llm_wall_s if sample.llm_wall_s > 0 else sample.wall_s
    other = max(sample.wall_s - llm_wall, 0.0) * calls / made
    return calls * llm_wall / made + other


def stage_wall_s_low(calls: float, sample: StageSample, slots: int) -> float:
    """A stage's wall time for ``calls`` requests on a fleet that serves ``slots`` at once, when a
    request's latency does not grow with load (the fast end of the wall-time range).

    A request's latency comes from the sample by Little's law: request-seconds in flight over the
    requests made (``request_s / made``). The run keeps ``min(calls, slots)`` in flight, so its
    LLM time is ``calls * latency / min(calls, slots)``; the step's other work (prompts, checks,
    writes) scales with the calls. Without request-seconds (a backend that reports no
    concurrency), one wave of the sample is taken as one request's latency.
    """
    made = max(sample.requests - sample.cached_before, 0)
    if calls <= 0 or made <= 0 or sample.wall_s <= 0:
        return 0.0
    in_flight = min(max(calls, 1.0), slots)
    if sample.request_s > 0:
        llm = calls * (sample.request_s / made) / in_flight
        other = max(sample.wall_s - sample.llm_wall_s, 0.0) * calls / made
        return llm + other
    latency = sample.wall_s * min(made, slots) / made
    return calls * latency / in_flight


def forecast(
    samples: Sequence[StageSample],
    sample_items: int,
    input_items: int,
    *,
    partition: str = "",
    job: str = "",
    fleet: Fleet | None = None,
    config_rows: Mapping[str, int] | None = None,
    budgets: Mapping[str, int | None] | None = None,
    keep_factors: Mapping[str, float] | None = None,
    cache_hits: Mapping[str, int] | None = None,
    spreads: Mapping[str, Mapping[str, float]] | None = None,
) -> Plan:
    """Extrapolate ``samples`` (a sample run on ``sample_items`` inputs) to ``input_items`` inputs.

    ``config_rows`` are the sample release's rows per config; they scale with the input, their
    range with the low/high input of the stages (the widest relative range of the leaf stages).
    ``budgets`` (``budget_calls``, ``budget_tokens``) add a warning when the forecast exceeds one.
    ``keep_factors`` scale the keep rate of stages whose rate depends on the run's size (the caps:
    ``plan/scale.py``), with their range. ``cache_hits`` are, per stage, the partition's request
    keys already in the cache (counted, never scaled); a stage it does not name counts the sample's
    ``cached_before``. ``spreads`` (``plan/spread.spreads``) are, per stage and for ``total``, the
    relative standard errors of ``items``, ``kept``, ``calls`` and ``tokens`` (and the per-item
    coefficients of variation ``cv_*``): the ranges of those stages come from them and
    ``Plan.precision`` says the run's expected error. A config forecast to hold no row and a stage
    no sample item reached each add a warning.

    Raises:
        ValueError: ``sample_items`` not positive, or stages that do not form a tree.
    """
    if sample_items <= 0:
        raise ValueError("the sample has no input items: nothing to extrapolate from")
    fleet = fleet or Fleet()
    exact = sample_items >= input_items  # the sample ran every input item: no uncertainty left
    out: dict[str, StageForecast] = {}
    for s in _order(samples):
        if s.upstream is None:
            up_kept = up_low = up_high = float(input_items)
            up_sample = float(sample_items)
        else:
            u = out[s.upstream]
            up_kept, up_low, up_high = u.kept, u.kept_low, u.kept_high
            up_sample = float(next(x.kept for x in samples if x.name == s.upstream))
        reached = s.items > 0 or up_sample > 0
        fan_out = s.items / up_sample if up_sample > 0 else 0.0
        # not reached: nothing measured; at most one item per upstream item kept, each costing at
        # most ``max_calls_per_item`` requests (the high end only)
        fan_high = fan_out if reached else 1.0
        factor = (keep_factors or {}).get(s.name, 1.0)
        keep = min(1.0, factor * s.kept / s.items) if s.items else 0.0
        k_low, k_high = wilson(s.kept, s.items) if s.items else (0.0, 0.0 if reached else 1.0)
        k_low, k_high = min(1.0, k_low * factor), min(1.0, k_high * factor)
        if exact and reached:  # the sample was the whole input: what it kept is what the run keeps
            k_low = k_high = keep
        per_item = s.requests / s.items if s.items else 0.0
        per_item_high = per_item if reached else s.max_calls_per_item
        items, items_low, items_high = up_kept * fan_out, up_low * fan_out, up_high * fan_high
        calls = items * per_item
        prompt_per = s.prompt_tokens / s.requests if s.requests else 0.0
        completion_per = s.completion_tokens / s.requests if s.requests else 0.0
        hits = (cache_hits or {}).get(s.name, s.cached_before)
        hits = min(float(hits), calls)
        to_make = calls - hits
        wall = stage_wall_s(to_make, s, fleet.slots)
        spread = (spreads or {}).get(s.name) if reached and s.items else None
        if spread is not None:  # the spread between sampled input items, not the funnel's product
            ranges = {
                f"{metric}_{end}": bound
                for metric, value in (("items", items), ("kept", items * keep), ("calls", calls))
                for end, bound in zip(("low", "high"), _interval(value, spread.get(metric, 0.0)), strict=True)
            }
            ranges["error_95"] = Z95 * spread.get("calls", 0.0)
        else:
            ranges = {
                "items_low": items_low,
                "items_high": items_high,
                "kept_low": items_low * k_low,
                "kept_high": items_high * k_high,
                "calls_low": items_low * per_item,
                "calls_high": items_high * per_item_high,
            }
        out[s.name] = StageForecast(
            name=s.name,
            upstream=s.upstream,
            items=items,
            kept=items * keep,
            keep_rate=keep,
            keep_low=k_low,
            keep_high=k_high,
            calls=calls,
            prompt_tokens=calls * prompt_per,
            completion_tokens=calls * completion_per,
            cache_hits=hits,
            wall_s=wall,
            wall_s_low=min(wall, stage_wall_s_low(to_make, s, fleet.slots)),
            reached=reached,
            **ranges,
        )
    # (partition, job, sample_items, input_items, stages)
    plan = Plan(partition, job, sample_items, input_items, out, fleet=fleet)
    if spreads and not exact:
        plan.precision = precision(spreads, out, input_items)
    scale = input_items / sample_items
    leaves = [f for f in out.values() if not any(g.upstream == f.name for g in out.values())]
    lo_ratio = min((f.kept_low / f.kept for f in leaves if f.kept > 0), default=1.0)
    hi_ratio = max((f.kept_high / f.kept for f in leaves if f.kept > 0), default=1.0)
    for name, rows in sorted((config_rows or {}).items()):
        plan.configs[name] = {
            "rows": rows * scale,
            "rows_low": rows * scale * lo_ratio,
            "rows_high": rows * scale * hi_ratio,
        }
    unmeasured = [
        s.name
        for s in samples
        if s.requests and s.cached_before >= s.requests and out[s.name].calls > out[s.name].cache_hits
    ]
    if unmeasured:
        plan.warnings.append(
            f"wall time unknown for {', '.join(unmeasured)}: every request of the sample was already "
            "cached, so no throughput was measured (their wall time shows 0); plan with a --sample "
            "larger than what an earlier run cached"
        )
    light = light_load_warning(samples, out, fleet.slots, sample_items)
    if light:
        plan.warnings.append(light)
    unreached = [f for f in out.values() if not f.reached]
    if unreached:
        plan.warnings.append(
            "no sample item reached "
            + ", ".join(f"{f.name} (up to {f.calls_high:,.0f} calls)" for f in unreached)
            + ": their forecast is 0 and their tokens unknown; a larger --sample measures them"
        )
    empty = sorted(n for n, c in plan.configs.items() if c["rows"] <= 0)
    if empty:
        plan.warnings.append(
            "forecast empty: "
            + ", ".join(f"{n}: 0 rows" for n in empty)
            + " (no sample item reached them: the release would ship these configs without a row)"
        )
    plan.warnings.extend(budget_warnings(plan, budgets or {}))
    return plan


def precision(
    spreads: Mapping[str, Mapping[str, float]],
    stages: Mapping[str, StageForecast],
    input_items: int,
    target: float = TARGET_ERROR,
    share: float = 0.05,
) -> dict[str, float]:
    """The run's 95% half-widths (``calls``, ``tokens``, relative) and ``sample_needed``: the input
    items a sample needs for a half-width of ``target`` (ours: 0.15, the bench's bar) on the total
    calls and tokens and on each stage with at least ``share`` of the forecast tokens."""
    total = spreads.get("total", {})
    out = {m: Z95 * total.get(m, 0.0) for m in ("calls", "tokens")}
    cvs = [total.get("cv_calls", 0.0), total.get("cv_tokens", 0.0)]
    tokens = {n: f.prompt_tokens + f.completion_tokens for n, f in stages.items()}
    all_tokens = sum(tokens.values())
    for name, t in tokens.items():
        if name in spreads and all_tokens > 0 and t >= share * all_tokens:
            cvs += [spreads[name].get("cv_calls", 0.0), spreads[name].get("cv_tokens", 0.0)]
    out["cv"] = max(cvs)  # the largest per-item coefficient of variation: a sample size for any target
    out["sample_needed"] = float(sample_needed(out["cv"], input_items, target))
    out["target"] = target
    return out


def light_load_warning(
    samples: Sequence[StageSample], stages: Mapping[str, StageForecast], slots: int, sample_items: int
) -> str:
    """A sentence when the sample measured its throughput at a much lighter load than the run's: the
    stages holding most of the forecast wall time ran fewer than half as many requests in flight
    (request-seconds over LLM seconds) as the run will keep (its requests to make, at most
    ``slots``). Their ``wall_s`` then holds only if the fleet is saturated (no more throughput
    from more requests in flight); a fleet with room finishes sooner, down to ``wall_s_low``."""
    light, light_wall, k_min, ratio = [], 0.0, math.inf, 1.0
    for s in samples:
        f = stages.get(s.name)
        if f is None or s.llm_wall_s <= 0 or s.request_s <= 0 or f.wall_s <= 0:
            continue
        in_flight = s.request_s / s.llm_wall_s
        run_in_flight = min(max(f.calls - f.cache_hits, 0.0), float(slots))
        if run_in_flight > 2 * in_flight:
            light.append(s.name)
            light_wall += f.wall_s
            k_min = min(k_min, in_flight)
            ratio = max(ratio, run_in_flight / in_flight)
    total = sum(f.wall_s for f in stages.values())
    if not light or light_wall < 0.5 * total:
        return ""
    return (
        f"wall time measured at a lighter load than the run's: {', '.join(light)} ran about "
        f"{k_min:.0f} requests in flight where the run keeps up to {slots}; the wall time holds for "
        "a saturated fleet, one with room finishes sooner (down to the Little's-law figure); a "
        f"--sample of about {math.ceil(sample_items * ratio):,} measures it at the run's load"
    )


def budget_warnings(plan: Plan, budgets: Mapping[str, int | None]) -> list[str]:
    """A sentence per budget (``budget_calls``, ``budget_tokens``) the forecast run would exceed."""
    total = plan.total
    calls = total["calls"] - total["cache_hits"]
    tokens = total["prompt_tokens"] + total["completion_tokens"]
    out = []
    limit = budgets.get("budget_calls")
    if limit is not None and calls > limit:
        out.append(f"budget_calls={limit} would be exceeded: about {calls:,.0f} calls to make")
    limit = budgets.get("budget_tokens")
    if limit is not None and tokens > limit:
        out.append(f"budget_tokens={limit} would be exceeded: about {tokens:,.0f} tokens")
    return out


def compare(plan: Mapping[str, Any], actual: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """Forecast against actual per stage: ``{stage: {metric: {forecast, actual, error, in_range}}}``.

    ``plan`` is a :meth:`Plan.to_json` object; ``actual`` per stage holds ``calls``,
    ``prompt_tokens``, ``completion_tokens``, ``kept`` and optionally ``wall_s``. ``error`` is
    ``(forecast - actual) / actual`` (None when the actual is 0); ``in_range`` says whether the
    actual calls fall inside ``[calls_low, calls_high]``.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, f in plan.get("stages", {}).items():
        a = actual.get(name, {})
        row: dict[str, Any] = {}
        for metric in ("calls", "prompt_tokens", "completion_tokens", "kept", "wall_s"):
            if metric not in a and metric != "calls":
                continue
            fv, av = float(f.get(metric, 0.0)), float(a.get(metric, 0.0))
            row[metric] = {"forecast": fv, "actual": av, "error": (fv - av) / av if av else None}
        av = float(a.get("calls", 0.0))
        row["calls"]["in_range"] = float(f.get("calls_low", 0)) <= av <= float(f.get("calls_high", 0))
        out[name] = row
    return out


def relative_error(forecast_value: float, actual_value: float) -> float:
    """``|forecast - actual| / actual`` (0 when both are 0, infinity when only the actual is)."""
    if actual_value == 0:
        return 0.0 if forecast_value == 0 else math.inf
    return abs(forecast_value - actual_value) / actual_value
