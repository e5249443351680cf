"""A plan as text: the table ``ragsft plan`` prints, and forecast against actual after a run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def _pct(half: float) -> str:
    """A relative 95% half-width as ``12%`` (``-`` when unknown)."""
    return "-" if half < 0 else f"{100 * half:.0f}%"


def precision_line(precision: Mapping[str, float], sample: int, inputs: int) -> str:
    """What the sample's spread says of the forecast: its expected error, and the sample it needs."""
    needed = int(precision.get("sample_needed", 0))
    target = precision.get("target", 0.15)
    line = (
        f"expected error (95%, from the spread between the {sample:,} sampled input items): calls"
        f" +/-{_pct(precision['calls'])}, tokens +/-{_pct(precision['tokens'])}"
    )
    if needed > sample:
        return (
            line
            + f"; +/-{_pct(target)} on the total and on each stage of 5% of the tokens needs --sample {needed:,}"
        )
    return line + f"; --sample {sample:,} is enough for +/-{_pct(target)} (it needs {needed:,} of {inputs:,})"


def plan_table(plan: Mapping[str, Any]) -> str:
    """The plan (:meth:`Plan.to_json`) as an aligned text table with totals, configs and warnings."""
    lines = [
        f"plan for {plan['partition']} ({plan['job']}): {plan['input_items']:,} input items,"
        f" forecast from a sample of {plan['sample_items']:,}",
        "",
        f"{'stage':24s} {'items':>10s} {'keep':>6s} {'calls':>11s} {'calls range':>23s}"
        f" {'+/-':>5s} {'prompt tok':>13s} {'compl. tok':>12s} {'cached':>9s} {'wall':>9s}",
    ]
    for name, s in plan["stages"].items():
        name = name if s.get("reached", True) else name + " (unseen)"
        lines.append(
            f"{name:24s} {_n(s['items']):>10s} {s['keep_rate']:>6.2f} {_n(s['calls']):>11s}"
            f" {_n(s['calls_low']) + ' - ' + _n(s['calls_high']):>23s} {_pct(s.get('error_95', -1.0)):>5s}"
            f" {_n(s['prompt_tokens']):>13s}"
            f" {_n(s['completion_tokens']):>12s} {_n(s['cache_hits']):>9s} {_duration(s['wall_s']):>9s}"
        )
    t = plan["total"]
    lines.append(
        f"{'total':24s} {'':>10s} {'':>6s} {_n(t['calls']):>11s}"
        f" {_n(t['calls_low']) + ' - ' + _n(t['calls_high']):>23s}"
        f" {_pct(plan.get('precision', {}).get('calls', -1.0)):>5s} {_n(t['prompt_tokens']):>13s}"
        f" {_n(t['completion_tokens']):>12s} {_n(t['cache_hits']):>9s} {_duration(t['wall_s']):>9s}"
    )
    precision = plan.get("precision") or {}
    if precision:
        lines.append(precision_line(precision, plan["sample_items"], plan["input_items"]))
    lines += wall_lines(t, plan.get("load") or {})
    if "gpu_hours" in t:
        lines.append(f"GPU-hours: {t['gpu_hours']:,.1f} ({plan['fleet']['gpus']} GPUs)")
    if plan.get("configs"):
        lines += ["", "release configs (rows, low - high):"]
        for name, c in plan["configs"].items():
            lines.append(f"  {name:28s} {_n(c['rows']):>10s}  ({_n(c['rows_low'])} - {_n(c['rows_high'])})")
    for w in plan.get("warnings", []):
        lines.append(f"WARNING: {w}")
    return "\n".join(lines)


def wall_lines(total: Mapping[str, float], load: Mapping[str, float]) -> list[str]:
    """How the wall time was read: on the fleet's load curve fitted on two samples, or at the
    sample's throughput (no curve), with the two ends of the range."""
    low, high = total.get("wall_s_low", total["wall_s"]), total.get("wall_s_high", total["wall_s"])
    if low >= high:
        return []
    how = (
        f"on the fleet's load curve fitted on two samples (saturation {load['saturation']:.2f}:"
        " 0 latency independent of load, 1 throughput fixed)"
        if "saturation" in load
        else "at the sample's measured throughput (one sample: no load curve)"
    )
    return [
        f"wall: {_duration(total['wall_s'])} {how}; {_duration(low)} if the fleet's latency does"
        f" not grow with load, {_duration(high)} if its throughput does not grow with it"
    ]


def compare_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """Forecast against actual per stage (``forecast.compare``) as a text table."""
    lines = [f"{'stage':24s} {'metric':18s} {'forecast':>12s} {'actual':>12s} {'error':>8s} {'in range':>9s}"]
    for stage, metrics in rows.items():
        for metric, v in metrics.items():
            err = "-" if v["error"] is None else f"{100 * v['error']:+.1f}%"
            rng = {True: "yes", False: "no"}.get(v.get("in_range"), "")
            lines.append(
                f"{stage:24s} {metric:18s} {_n(v['forecast']):>12s} {_n(v['actual']):>12s} {err:>8s} {rng:>9s}"
            )
    return "\n".join(lines)
