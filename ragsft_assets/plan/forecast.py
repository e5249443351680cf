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
run of the partition recorded in its ledger). Wall time comes from a model of the fleet
(``plan/wall.py``): each stage's latency and requests in flight in the sample, on the fleet's load
curve fitted from two samples of different sizes, read at the load the run will keep (its requests,
at most the slots). ``wall_s_low`` is a fleet whose latency does not grow with load (Little's law
with the slots), ``wall_s_high`` a saturated one (the sample's throughput, the point estimate when
no curve could be fitted: an engine whose speed falls as more requests run gains nothing from more
slots).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ragsft_assets.plan.spread import TARGET_ERROR, Z95, sample_needed
from ragsft_assets.plan.wall import (
    Timing,
    fit_stages,
    pooled_fill,
    stage_wall,
    stage_wall_bounds,
    stage_wall_point,
    timing_of,
)


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
    batch_calls: float = -1.0  # requests its own batches sent to a model (-1: not reported)
    stream_calls: float = 0.0  # requests of other stages its step waited on (a streamed prefetch)


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
    wall_s_high: float = 0.0  # the sample's throughput: a saturated fleet's time
    reached: bool = True  # False: no sample item reached the stage (its figures are bounds only)
    # the 95% half-width of ``calls`` relative to it, from the spread between sampled input items
    # (-1: not known, the range is the Wilson one)
    error_95: float = -1.0
    # what the sample's LLM batches measured (requests ``made``, ``llm_wall_s``, ``request_s``,
    # ``wall_s``, mean ``in_flight`` and ``latency_s``), for the wall-time model and ``--compare``
    measured: dict[str, float] = field(default_factory=dict)


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
    # the fleet's load curve fitted on two samples (``plan/wall.py``): ``r``, ``saturation``,
    # ``stages_fitted`` (empty: one sample, the wall time is the saturated end)
    load: dict[str, float] = field(default_factory=dict)

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
            "wall_s_high",
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
                k: (
                    v
                    if not isinstance(v, float) or k.startswith(UNROUNDED)
                    else round(v, 2)
                    if k.startswith("wall_s")  # seconds: a small run's steps take fractions of one
                    else round(v)
                )
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
            "load": {k: round(v, 6) for k, v in self.load.items()},
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


def timing(sample: StageSample) -> Timing:
    """The sample's timing of a stage, for the wall-time model (``plan/wall.py``)."""
    return Timing(
        made=float(max(sample.requests - sample.cached_before, 0)),
        step_s=sample.wall_s,
        llm_wall_s=sample.llm_wall_s,
        request_s=sample.request_s,
        batch_calls=sample.batch_calls,
        stream_calls=sample.stream_calls,
    )


def sample_timing(sample: StageSample) -> dict[str, float]:
    """The sample's own timing of a stage: requests it made (not cached before), its step seconds,
    its LLM batches' seconds, request-seconds and calls sent, the calls of other stages it waited
    on, the mean requests in flight and the mean latency (Little's law); ``{}`` when it made none."""
    t = timing(sample)
    if t.made <= 0:
        return {}
    out = {
        "made": t.made,
        "wall_s": t.step_s,
        "llm_wall_s": t.llm_wall_s,
        "request_s": t.request_s,
        "batch_calls": t.batch_calls,
        "stream_calls": t.stream_calls,
    }
    if t.has_load:
        out["in_flight"] = t.in_flight
        out["latency_s"] = t.latency_s
    return out


def stage_wall_s(
    calls: float, sample: StageSample, slots: int, r: float | None = None, fill: float | None = None
) -> float:
    """A stage's wall time for ``calls`` requests to make on ``slots``, from the sample's timing and
    the fleet's load curve ``r`` (``plan/wall.stage_wall``; None: not fitted, the saturated end:
    the sample's throughput, no speed-up from more requests in flight)."""
    return stage_wall(calls, timing(sample), slots, r, fill)


def stage_wall_s_low(calls: float, sample: StageSample, slots: int) -> float:
    """The fast end: a fleet whose latency does not grow with load serves ``min(calls, slots)``
    at once at the sample's latency (Little's law; ``r = 0``)."""
    return stage_wall_bounds(calls, timing(sample), slots)[0]


def stage_wall_s_high(calls: float, sample: StageSample, slots: int) -> float:
    """The slow end: a saturated fleet, whose throughput is the sample's whatever the load."""
    return stage_wall_bounds(calls, timing(sample), slots)[1]


def load_curve(
    samples: Sequence[StageSample], earlier: Mapping[str, Mapping[str, float]] | None
) -> tuple[float | None, dict[str, float]]:
    """The fleet's load curve ``r`` from the stages measured at two loads (this sample and an
    ``earlier`` one's ``measured``), and what the plan says of it (``load`` in its JSON)."""
    if not earlier:
        return None, {}
    now = {s.name: timing(s) for s in samples}
    before = {name: timing_of(m) for name, m in earlier.items() if m}
    per, r = fit_stages(now, before)
    if r is None:
        return None, {"stages_fitted": 0.0}
    return r, {
        "r": r if math.isfinite(r) else -1.0,
        # the share of the fleet's speed-up lost to load: 0 load-free, 1 saturated
        "saturation": r / (1 + r) if math.isfinite(r) else 1.0,
        "stages_fitted": float(len(per)),
    }


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
    earlier: Mapping[str, Mapping[str, float]] | None = None,
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
    ``Plan.precision`` says the run's expected error. ``earlier`` is, per stage, the ``measured``
    timing of an earlier sample at another size: with it the fleet's load curve is fitted
    (``plan/wall.py``) and the wall time is read on it at the run's load; without, ``wall_s`` is
    the saturated end. A config forecast to hold no row and a stage no sample item reached each add
    a warning.

    Raises:
        ValueError: ``sample_items`` not positive, or stages that do not form a tree.
    """
    if sample_items <= 0:
        raise ValueError("the sample has no input items: nothing to extrapolate from")
    fleet = fleet or Fleet()
    exact = sample_items >= input_items  # the sample ran every input item: no uncertainty left
    r, load = load_curve(samples, earlier)
    fill = pooled_fill((timing(s) for s in samples), fleet.slots)
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
        wall = stage_wall_point(to_make, timing(s), fleet.slots, r, fill)
        wall_low, wall_high = stage_wall_bounds(to_make, timing(s), fleet.slots, fill)
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
            wall_s_low=min(wall, wall_low),
            wall_s_high=max(wall, wall_high),
            reached=reached,
            measured=sample_timing(s),
            **ranges,
        )
    # (partition, job, sample_items, input_items, stages)
    plan = Plan(partition, job, sample_items, input_items, out, fleet=fleet, load=load)
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
    light = light_load_warning(samples, out, fleet.slots, sample_items) if r is None else ""
    if light:
        plan.warnings.append(light)
    held = straggler_warning(samples, fleet.slots)
    if held:
        plan.warnings.append(held)
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


STRAGGLER_FILL = 0.1  # ours: a batch whose mean in flight was under a tenth of its peak waited on a few
STRAGGLER_MIN = 10  # ... among at least this many requests (a batch of 3 has no tail to speak of)


def straggler_warning(samples: Sequence[StageSample], slots: int) -> str:
    """A sentence naming the stages whose sample batch was held by a few slow requests (a stall, a
    timeout and its retry): their mean requests in flight under ``STRAGGLER_FILL`` of the peak.
    Their wall time extrapolates that tail to the run (the bench saw 39 RAG requests take 121 s,
    forecast 126 s for a run that took 1.4 s); plan again, or read the stage's time as an outlier."""
    held = []
    for s in samples:
        t = timing(s)
        if (
            t.has_load
            and t.sent >= STRAGGLER_MIN
            and t.in_flight < STRAGGLER_FILL * min(t.sent, float(slots))
        ):
            held.append(
                f"{s.name} ({t.in_flight:.1f} of {min(t.sent, float(slots)):.0f} in flight, {t.llm_wall_s:.0f} s)"
            )
    if not held:
        return ""
    return (
        "wall time held by a few slow requests in the sample (a stall, a timeout and its retry): "
        + ", ".join(held)
        + "; their wall time extrapolates that tail to the run: plan again to measure them"
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
