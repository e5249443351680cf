"""How sure a forecast is: the spread of the sample's figures between its input items.

Dagster-free. A plan's sample is a simple random sample of ``n`` of the partition's ``N`` input
items (the first ``n`` of a seeded order), and every figure of a stage (items decided, kept,
requests, tokens) is a sum over input items: each ledger candidate descends from one input item
(a question from its bridge pair, a RAG example from its question). So the forecast of a stage is
the sample's per-item mean times ``N``, and its standard error is the textbook one of that
estimator, finite-population correction included (an item's questions rise and fall together,
which per-stage binomial intervals ignore):

    SE(total) = N * sqrt((1 - n / N) * s^2 / n),  s^2 the variance of the per-item sums.

From the same variance comes the sample that a wanted precision needs:
``n = 1 / ((t / (z * cv))^2 + 1 / N)`` for a relative half-width ``t`` at ``z``, ``cv = s / mean``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
METRICS = ("items", "kept", "calls", "tokens")
TARGET_ERROR = 0.15  # ours: the relative half-width (95%) `plan` gives the sample size for (the bench bar)


def mean_var(values: Sequence[float], n: int) -> tuple[float, float]:
    """Mean and sample variance of ``values`` padded with zeros to ``n`` (input items of the sample
    that gave nothing to a stage hold no row)."""
    if n <= 0:
        return 0.0, 0.0
    total = math.fsum(values)
    mean = total / n
    if n == 1:
        return mean, 0.0
    sq = math.fsum((v - mean) ** 2 for v in values) + (n - len(values)) * mean * mean
    return mean, sq / (n - 1)


def relative_se(values: Sequence[float], n: int, population: int) -> float:
    """The relative standard error of ``population * mean(values)`` (0 when the mean is 0 or the
    sample is the whole population)."""
    mean, var = mean_var(values, n)
    if mean <= 0 or n >= population:
        return 0.0
    return math.sqrt((1 - n / population) * var / n) / mean


def coefficient_of_variation(values: Sequence[float], n: int) -> float:
    mean, var = mean_var(values, n)
    return math.sqrt(var) / mean if mean > 0 else 0.0


def sample_needed(cv: float, population: int, target: float = TARGET_ERROR, z: float = Z95) -> int:
    """Input items a sample needs so that the 95% half-width of a total is ``target`` (relative)."""
    if cv <= 0:
        return 1
    return min(population, math.ceil(1.0 / ((target / (z * cv)) ** 2 + 1.0 / population)))


def unit_sums(
    rows: Iterable[tuple[str, str, bool, Sequence[str]]],
    root: Mapping[str, str],
    key_tokens: Mapping[str, int],
) -> dict[str, dict[str, dict[str, float]]]:
    """``{stage: {input item: {items, kept, calls, tokens}}}`` from ledger rows
    ``(stage, candidate id, kept, cache keys)``; ``root`` maps a candidate to its input item
    (a candidate it does not name is its own), ``key_tokens`` a cache key to its tokens. A request
    is counted once per stage and input item."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    seen: dict[tuple[str, str], set[str]] = {}
    for stage, candidate, kept, keys in rows:
        unit = root.get(candidate, candidate)
        sums = out.setdefault(stage, {}).setdefault(unit, dict.fromkeys(METRICS, 0.0))
        sums["items"] += 1
        sums["kept"] += bool(kept)
        done = seen.setdefault((stage, unit), set())
        for k in keys:
            if k and k not in done:
                done.add(k)
                sums["calls"] += 1
                sums["tokens"] += key_tokens.get(k, 0)
    return out


def roots(parents: Mapping[str, str]) -> dict[str, str]:
    """Each id's input item: its parent's parent, and so on, to an id without a parent."""
    out: dict[str, str] = {}
    for start in parents:
        node, hops = start, 0
        while node in parents and hops < 16:  # the chains are 2 deep; 16 guards against a cycle
            node, hops = parents[node], hops + 1
        out[start] = node
    return out


def spreads(
    per_unit: Mapping[str, Mapping[str, Mapping[str, float]]], n: int, population: int
) -> dict[str, dict[str, float]]:
    """Per stage, then ``total`` (every stage's calls and tokens summed per input item): the relative
    standard error of each metric's forecast (``<metric>``) and the per-item coefficient of
    variation (``cv_<metric>``)."""
    out: dict[str, dict[str, float]] = {}
    total: dict[str, dict[str, float]] = {}
    for stage, units in per_unit.items():
        row: dict[str, float] = {}
        for m in METRICS:
            values = [u[m] for u in units.values()]
            row[m] = relative_se(values, n, population)
            row[f"cv_{m}"] = coefficient_of_variation(values, n)
        out[stage] = row
        for unit, sums in units.items():
            t = total.setdefault(unit, {"calls": 0.0, "tokens": 0.0})
            t["calls"] += sums["calls"]
            t["tokens"] += sums["tokens"]
    row = {}
    for m in ("calls", "tokens"):
        values = [t[m] for t in total.values()]
        row[m] = relative_se(values, n, population)
        row[f"cv_{m}"] = coefficient_of_variation(values, n)
    out["total"] = row
    return out
