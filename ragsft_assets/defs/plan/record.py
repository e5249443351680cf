"""Plans on disk and on runs: make one, tag a run with it, compare it with what the run did."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import orjson

from ragsft_assets.home import llm_cache_dir, ragsft_home
from ragsft_assets.ids import sha256_hex
from ragsft_assets.plan import forecast as fc
from ragsft_assets.plan import measure
from ragsft_assets.plan.spread import TARGET_ERROR, sample_needed
from ragsft_assets.storage import atomic_write_bytes

PLAN_TAG = "ragsft/plan"  # a run's tag: the digest of the plan it was launched under


def fleet_slots(resources: Mapping[str, Any]) -> int:
    """Requests the configured roles serve at once: the largest per-URL concurrency x URLs of any
    HTTP role (the offline engines: ``max_num_seqs``, else vLLM's default of 256)."""
    best = 0
    for res in resources.values():
        urls = getattr(res, "base_urls", None)
        if urls:
            best = max(best, int(getattr(res, "concurrency", 0) or 0) * len(urls))
        elif getattr(res, "max_num_seqs", None):
            best = max(best, int(res.max_num_seqs))
    return best or 256


def save(plan: Mapping[str, Any], key: str, home: Path | None = None) -> str:
    """Write the plan as ``plans/<key>/plan.json`` and ``plans/<key>/<digest>.json``; its digest."""
    from ragsft_assets.defs.plan.sample import plan_file

    data = orjson.dumps(dict(plan), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    digest = sha256_hex(data.decode())[:24]
    latest = plan_file(key, home)
    atomic_write_bytes(latest.parent / f"{digest}.json", data)
    atomic_write_bytes(latest, data)
    return digest


def load(key: str, digest: str | None = None, home: Path | None = None) -> dict[str, Any] | None:
    """A saved plan of ``key`` (the latest when ``digest`` is None), or None."""
    from ragsft_assets.defs.plan.sample import plan_file

    latest = plan_file(key, home)
    path = latest if digest is None else latest.parent / f"{digest}.json"
    return orjson.loads(path.read_bytes()) if path.exists() else None


def plan_tags(key: str, home: Path | None = None) -> dict[str, str]:
    """``{PLAN_TAG: digest}`` of the partition's latest plan, for a run's tags ({} without one)."""
    plan = load(key, home=home)
    if plan is None:
        return {}
    data = orjson.dumps(plan, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    return {PLAN_TAG: sha256_hex(data.decode())[:24]}


MAX_SAMPLE = 2_000  # ours: the largest sample --target-error grows to (its calls are the run's, cached)
DEFAULT_SAMPLE = 50  # ours: the first sample of a default plan, grown to TARGET_ERROR from there
PILOT_SHARE = 4  # ours: a fixed sample of n runs a pilot of n / 4 first, for a second load
MIN_PILOT = 5
# ours: a grown sample adds at least a tenth (its half-width is then within 5% of the target): the
# new items are what the wall time is measured on
GROW_AT_LEAST = 1.1


def resolve_sample(sample: int | None, target_error: float | None) -> tuple[int, float | None]:
    """The first sample and the target error of a plan: no ``sample`` is the default, a sample of
    ``DEFAULT_SAMPLE`` grown until its own 95% half-width is ``TARGET_ERROR`` (unless
    ``target_error`` says otherwise); a ``sample`` given is kept as given unless a ``target_error``
    is given too. A target of 0 is none."""
    if sample is None:
        target = TARGET_ERROR if target_error is None else target_error
        return DEFAULT_SAMPLE, target or None
    return sample, target_error or None


def make_plan(
    key: str,
    *,
    sample: int | None = None,
    slots: int | None = None,
    gpus: int = 0,
    resources: Mapping[str, Any] | None = None,
    budgets: Mapping[str, int | None] | None = None,
    target_error: float | None = None,
    max_sample: int = MAX_SAMPLE,
    **options: Any,
) -> dict[str, Any]:
    """Forecast a job on ``key`` (``defs/plan/sample.run_sample``, which takes ``options``: ``job``,
    ``run_config``, ``instance``, ``log``, ``home``), save it, return its JSON.

    ``budgets`` given (not None) replace the roles' ``budget_calls`` / ``budget_tokens``. The
    sample and its target come from :func:`resolve_sample`: with a target (the default, 0.15), a
    sample whose own spread says it is too small for it is grown to the size it asks for (at most
    ``max_sample``) and run again: the first items' calls come from the cache, so only the new
    items cost. Every plan runs at least two samples of different sizes, so that the fleet's load
    curve is fitted on two loads (``plan/wall.py``): a sample that is not grown runs a pilot of a
    quarter of its items first (no extra call: the sample finds them in the cache).
    """
    from ragsft_assets.defs.plan.sample import _budgets, run_sample

    if resources is None:
        from ragsft_assets.defs.resources import default_resources

        resources = default_resources()
    sample, target_error = resolve_sample(sample, target_error)
    fleet = fc.Fleet(slots=slots or fleet_slots(resources), gpus=gpus)
    limits = _budgets(resources)
    limits.update({k: v for k, v in (budgets or {}).items() if v is not None})
    say = options.get("log") or (lambda _m: None)

    def run(n: int, earlier: Mapping[str, Any] | None) -> dict[str, Any]:
        return run_sample(
            key, resources=resources, sample=n, fleet=fleet, budgets=limits, earlier=earlier, **options
        ).to_json()

    earlier: dict[str, Any] | None = None
    if target_error is None and sample // PILOT_SHARE >= MIN_PILOT:
        pilot = run(sample // PILOT_SHARE, None)
        if pilot["input_items"] > sample:  # a sample of every item is exact: no pilot needed
            earlier = measured(pilot)
            say(f"plan: a pilot of {sample // PILOT_SHARE} measured the fleet at a second load")
    while True:
        plan = run(sample, earlier)
        precision = plan.get("precision") or {}
        if target_error is None or not precision or sample >= max_sample:
            break
        needed = min(sample_needed(precision["cv"], plan["input_items"], target_error), max_sample)
        if needed <= GROW_AT_LEAST * sample:  # close enough: a few more items would measure nothing
            break
        say(
            f"plan: a sample of {sample} gives +/-{100 * precision['calls']:.0f}% on the calls; "
            f"growing it to {needed} for +/-{100 * target_error:.0f}%"
        )
        earlier = measured(plan) or earlier
        sample = needed
    plan["digest"] = save(plan, key, options.get("home"))
    return plan


def measured(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Per stage, the ``measured`` timing of a plan's sample (stages that made no request: left out)."""
    return {name: f["measured"] for name, f in plan.get("stages", {}).items() if f.get("measured")}


def compare_run(key: str, run_id: str, instance: dg.DagsterInstance | None = None) -> dict[str, Any]:
    """Forecast against actual per stage for run ``run_id`` of partition ``key``.

    The plan is the one in the run's ``ragsft/plan`` tag, else the partition's latest. The actual
    figures are the partition's ledger and cache (requests, tokens, kept items) and the run's step
    times.

    Raises:
        ValueError: no such run, or no plan for the partition.
    """
    instance = instance or dg.DagsterInstance.get()
    run = instance.get_run_by_id(run_id)
    if run is None:
        raise ValueError(f"no run {run_id!r} in the instance at {instance.root_directory}")
    plan = load(key, run.tags.get(PLAN_TAG)) or load(key)
    if plan is None:
        raise ValueError(f"no plan for {key}: run `ragsft plan {key}` first")
    actual = run_actuals(ragsft_home() / "assets" / key, llm_cache_dir(), plan["stages"], instance, run_id)
    return fc.compare(plan, actual)


def run_actuals(
    partition_folder: Path, cache_dir: Path, stages: Iterable[str], instance: dg.DagsterInstance, run_id: str
) -> dict[str, dict[str, float]]:
    """What run ``run_id`` did per stage: its ledger and cache figures (``measure.actual_by_stage``)
    with each stage's step seconds as ``wall_s``."""
    from ragsft_assets.defs.plan.sample import step_seconds

    actual = measure.actual_by_stage(partition_folder, cache_dir, stages)
    for stage, seconds in step_seconds(instance, run_id).items():
        if stage in actual:
            actual[stage]["wall_s"] = seconds
    return actual
