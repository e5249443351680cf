"""Wall time of a run from a model of the fleet, not from the sample's raw throughput.

Dagster-free. A sample of 50 input items keeps far fewer requests in flight than the run's slots,
and on a fleet whose per-request latency grows with the sequences it runs (vLLM's continuous
batching: each decode step costs more with a larger batch; the embedded engine out of cores) the
sample's throughput is not the run's. So each stage's LLM time is rebuilt from three measures of
its own batches in the sample (requests made ``m``, mean requests in flight ``k``, mean latency
``L``, both by Little's law from request-seconds over the batches' seconds) and a load curve

    latency(k) = a * (1 + r * k)

fitted on two measures of the same stage at different loads (``fit_load``: the plan's two sample
runs, the smaller first). ``r = 0`` is a fleet whose latency does not depend on load (Little's law
with the slots); ``r -> inf`` a saturated one, whose throughput does not grow with more requests in
flight (the sample's throughput, what the plan assumed before). The run makes ``C`` requests with
at most ``K = min(C, slots)`` in flight; it keeps on average ``K * phi`` in flight when ``C <= K``
(``phi``, the sample's mean over its peak: a batch's tail), else ``C / ((C - K) / K + 1 / phi)``
(full waves, then one tail), and takes ``C * latency(k_run) / k_run``.

The rest of a stage's step (prompts, checks, writes, Dagster's step) is not LLM time: it is kept
as measured, not scaled with the calls (a 0.7 s step overhead is not 4,000 x 0.7 s on 4,000 times
the items), except in a step that waited on calls streamed by another step (``stream_calls``: the
multihop chain's prefetch), where it is LLM time at the sample's throughput and scales with the
calls. A stage whose batches report no concurrency (an engine without ``in_flight_mean``) keeps its
batches' seconds per request (saturated).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SATURATED = math.inf  # r of a fleet whose throughput does not grow with load
MIN_LOAD_RATIO = 1.5  # ours: two measures whose loads differ less than this fit no curve (noise)
RELIABLE_LOAD = 0.5  # ours: the curve is read at most 2x beyond the sample's load (else: the ends)


@dataclass(frozen=True)
class Timing:
    """What a stage's own LLM batches did in a sample (seconds; requests made, not cached)."""

    made: float  # requests the sample made for the stage (not in the cache before it)
    step_s: float  # the stage's step seconds
    llm_wall_s: float = 0.0  # seconds its own LLM batches ran
    request_s: float = 0.0  # request-seconds in flight during them (0: not reported)
    batch_calls: float = -1.0  # requests its batches sent to a model (-1: not reported)
    stream_calls: float = 0.0  # requests of other stages it waited on (a streamed prefetch)

    @property
    def in_flight(self) -> float:
        """Mean requests in flight during the stage's batches (0: not reported)."""
        return self.request_s / self.llm_wall_s if self.llm_wall_s > 0 and self.request_s > 0 else 0.0

    @property
    def sent(self) -> float:
        """Requests behind the batches' request-seconds: those sent to a model."""
        return self.batch_calls if self.batch_calls > 0 else self.made

    @property
    def latency_s(self) -> float:
        """Mean seconds a request was in flight (Little's law; 0: not reported)."""
        return self.request_s / self.sent if self.request_s > 0 and self.sent > 0 else 0.0

    @property
    def has_load(self) -> bool:
        """Whether the batches measured a latency at a concurrency (what the load curve needs)."""
        return self.in_flight > 0 and self.latency_s > 0 and self.batch_calls != 0


def fit_load(first: tuple[float, float], second: tuple[float, float]) -> float | None:
    """``r`` of ``latency(k) = a (1 + r k)`` through two ``(in flight, latency)`` measures of one
    stage, or None when their loads are too close to tell (``MIN_LOAD_RATIO``). Clipped to
    ``[0, SATURATED]``: a latency that fell with load is noise around a load-free fleet, one that
    grew at least as fast as the load is a saturated fleet."""
    (k1, l1), (k2, l2) = sorted([first, second])
    if k1 <= 0 or l1 <= 0 or l2 <= 0 or k2 < MIN_LOAD_RATIO * k1:
        return None
    if l2 <= l1:
        return 0.0
    denominator = l1 * k2 - l2 * k1
    if denominator <= 0:  # latency grew at least in proportion to the load: no throughput gained
        return SATURATED
    return (l2 - l1) / denominator


def pooled_load(fits: Iterable[tuple[float, float]]) -> float | None:
    """One ``r`` for the fleet from per-stage ``(r, weight)`` fits (the weight: the stage's LLM
    seconds), as the weighted median of ``r / (1 + r)`` (so a saturated stage counts as 1, not as
    infinity); None without a fit."""
    points = sorted((r / (1 + r) if math.isfinite(r) else 1.0, w) for r, w in fits if w > 0)
    if not points:
        return None
    half, seen = sum(w for _, w in points) / 2, 0.0
    for share, w in points:
        seen += w
        if seen >= half:
            return SATURATED if share >= 1.0 else share / (1 - share)
    return None  # unreachable: the weights sum to 2 * half


def latency_ratio(k_from: float, k_to: float, r: float) -> float:
    """``latency(k_to) / latency(k_from)`` on the curve ``1 + r k`` (``r = SATURATED``: in
    proportion to the load)."""
    if not math.isfinite(r):
        return k_to / k_from
    return (1 + r * k_to) / (1 + r * k_from)


def run_in_flight(calls: float, slots: int, fill: float) -> float:
    """Mean requests in flight of ``calls`` requests on ``slots`` at once, each batch's tail
    filling ``fill`` of its peak on average: one partial wave, or full waves then one tail."""
    fill = min(1.0, max(fill, 1e-3))
    peak = min(calls, float(slots))
    if calls <= slots:
        return peak * fill
    return calls / ((calls - peak) / peak + 1 / fill)


def stage_wall(calls: float, timing: Timing, slots: int, r: float | None, fill: float | None = None) -> float:
    """Seconds of a stage's step for ``calls`` requests to make, from its sample ``timing``.

    ``r`` is the fleet's load curve (None: not fitted, the saturated end is taken, as safe). The
    batches' seconds come from the curve at the run's load when they measured one, else at the
    sample's seconds per request; the step's other seconds are kept, or scaled with the calls for
    a step that waited on streamed calls (see the module docstring). A stage whose batches report
    no concurrency while others did (``fill``, their mean requests in flight over their peak) is
    taken as one batch of its requests at that fill: its seconds the batches' (or, with no batch
    figure at all, the step's).
    """
    if calls <= 0 or timing.made <= 0 or timing.step_s <= 0:
        return 0.0
    scale = calls / timing.made
    batches = min(timing.llm_wall_s, timing.step_s)
    other = timing.step_s - batches
    other_s = other * scale if timing.stream_calls > 0 else other
    if timing.batch_calls == 0:  # its calls were answered from the cache: made elsewhere (streamed)
        return other_s + batches
    if timing.has_load:
        k_s, latency_s = timing.in_flight, timing.latency_s
    elif fill is None:  # no concurrency known anywhere: the sample's seconds per request (saturated)
        if batches <= 0:
            return timing.step_s * scale
        return batches * calls / timing.sent + other_s
    else:
        if batches <= 0:  # no batch figure: the whole step is its LLM time
            batches, other_s = timing.step_s, 0.0
        k_s = max(fill * min(timing.sent, float(slots)), 1.0)
        latency_s = batches * k_s / timing.sent
    run_fill = k_s / min(timing.sent, float(slots))
    k_run = max(run_in_flight(calls, slots, run_fill), 1e-9)
    curve = SATURATED if r is None else r
    latency = latency_s * latency_ratio(k_s, k_run, curve)
    return calls * latency / k_run + other_s


def pooled_fill(timings: Iterable[Timing], slots: int) -> float | None:
    """The mean requests in flight over their peak of the batches that report it, weighted by
    their requests (None: none does)."""
    pairs = [
        (min(1.0, t.in_flight / min(t.sent, float(slots))), t.sent)
        for t in timings
        if t.has_load and t.sent > 0
    ]
    total = sum(w for _, w in pairs)
    return sum(f * w for f, w in pairs) / total if total > 0 else None


def loads(calls: float, timing: Timing, slots: int, fill: float | None = None) -> tuple[float, float] | None:
    """``(k_sample, k_run)``: the mean requests in flight of the stage's batches in the sample and
    in the run (:func:`stage_wall`'s), or None when the stage's load is not known."""
    if calls <= 0 or timing.made <= 0 or timing.batch_calls == 0:
        return None
    if timing.has_load:
        k_s = timing.in_flight
    elif fill is not None:
        k_s = max(fill * min(timing.sent, float(slots)), 1.0)
    else:
        return None
    k_run = run_in_flight(calls, slots, k_s / min(timing.sent, float(slots)))
    return k_s, k_run


def stage_wall_point(
    calls: float, timing: Timing, slots: int, r: float | None, fill: float | None = None
) -> float:
    """The point estimate of a stage's wall time: on the fitted curve ``r`` when the sample ran at
    least ``RELIABLE_LOAD`` of the run's requests in flight (the curve is then read at most 2x
    beyond what was measured) or the curve is saturated (a fleet whose latency already grew in
    proportion to its load serves no more with more: throughput never grows again past that),
    else the geometric mean of the two ends (load-free and saturated), the point whose error
    factor is the smallest over the whole range (at most ``sqrt(high / low)`` either way), since
    two light samples cannot tell the curve's slope from their noise. With one sample (``r``
    None) there is no curve: the saturated end, the safe side (the embedded engine is saturated).
    """
    low, high = stage_wall_bounds(calls, timing, slots, fill)
    if r is None:
        return high
    k = loads(calls, timing, slots, fill)
    near = k is not None and k[0] >= RELIABLE_LOAD * k[1]
    if near or not math.isfinite(r):
        return min(max(stage_wall(calls, timing, slots, r, fill), low), high)
    return math.sqrt(low * high) if low > 0 else high


def stage_wall_bounds(
    calls: float, timing: Timing, slots: int, fill: float | None = None
) -> tuple[float, float]:
    """``(low, high)``: a fleet whose latency does not grow with load (``r = 0``) and a saturated
    one (``r = SATURATED``)."""
    low = stage_wall(calls, timing, slots, 0.0, fill)
    high = stage_wall(calls, timing, slots, SATURATED, fill)
    return min(low, high), max(low, high)


def timing_of(measured: Mapping[str, float]) -> Timing:
    """A :class:`Timing` from a plan's ``measured`` per stage (``made``, ``wall_s``, ...)."""
    return Timing(
        made=float(measured.get("made", 0.0)),
        step_s=float(measured.get("wall_s", 0.0)),
        llm_wall_s=float(measured.get("llm_wall_s", 0.0)),
        request_s=float(measured.get("request_s", 0.0)),
        batch_calls=float(measured.get("batch_calls", -1.0)),
        stream_calls=float(measured.get("stream_calls", 0.0)),
    )


def fit_stages(
    now: Mapping[str, Timing], earlier: Mapping[str, Timing]
) -> tuple[dict[str, float], float | None]:
    """Per stage measured at two loads (``now`` and an ``earlier`` sample), its ``r``; and the
    pooled ``r`` for the others (weighted by the stages' LLM seconds)."""
    per: dict[str, float] = {}
    weights: list[tuple[float, float]] = []
    for name, t in sorted(now.items()):
        e = earlier.get(name)
        if e is None or not t.has_load or not e.has_load:
            continue
        r = fit_load((e.in_flight, e.latency_s), (t.in_flight, t.latency_s))
        if r is None:
            continue
        per[name] = r
        weights.append((r, t.llm_wall_s + e.llm_wall_s))
    return per, pooled_load(weights)
