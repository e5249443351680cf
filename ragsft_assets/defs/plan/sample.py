"""``ragsft plan``'s Dagster side: run the missing deterministic stages, then the job on a seeded
sample in a scratch home, and hand the measures to the Dagster-free forecast (``plan/``).

The sample run shares the LLM cache of the real home (its calls are reused by the real run) but
writes its artifacts, ledgers and release under ``$RAGSFT_HOME/plans/<key>/scratch``, never to
the partition's assets. The deterministic stages that are missing (a snapshot's corpus stage, a
QA source's questions) run in the real home: they are cheap and the real run reuses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq

from ragsft_assets.home import llm_cache_dir, ragsft_home
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.plan import forecast as fc
from ragsft_assets.plan import measure, scale, spread
from ragsft_assets.storage import LEDGER_DIR


@dataclass(frozen=True)
class JobKind:
    """How a job's input is counted and sampled."""

    partition_set: str
    deterministic: tuple[str, ...]  # asset keys run (when missing) in the real home first
    input_asset: str  # the asset whose rows are the job's input items
    sample_op: str  # the op whose config takes the sample size
    sample_field: str
    skip_stages: tuple[str, ...] = ()  # ledger stages that are not part of the sampled funnel
    store_partitions: tuple[str, ...] = ()  # ledger folders beside the key's ("{key}" is the key)
    # The sample knob sits on the deterministic asset itself (recall's oasst_pairs takes the first
    # N pairs): the sample runs it again in the scratch home instead of reusing the real one.
    resample_deterministic: bool = False


# A snapshot's run: the corpus stage is deterministic, its bridge pairs the input, drafts the sample.
_SNAPSHOT = JobKind(
    "snapshot",
    ("abstracts", "link_graph", "bridge_pairs"),
    "bridge_pairs",
    "question_drafts",
    "max_pairs",
    ("abstracts", "link_graph", "bridge_pairs"),
)
JOB_KINDS: dict[str, JobKind] = {
    "full_job": _SNAPSHOT,
    "multihop_job": _SNAPSHOT,
    "qa_sft_job": JobKind("qa_source", ("qa/questions",), "questions", "qa__rag_prompts", "max_questions"),
    "recall_job": JobKind(
        "base_model",
        ("oasst_pairs",),
        "oasst_pairs",
        "oasst_pairs",
        "max_examples",
        ("oasst_pairs",),
        ("recall", "recall-{key}"),
        resample_deterministic=True,
    ),
}
DEFAULT_JOB = {"snapshot": "full_job", "qa_source": "qa_sft_job", "base_model": "recall_job"}


def scratch_home(key: str, home: Path | None = None) -> Path:
    """Where a plan's sample run writes: ``$RAGSFT_HOME/plans/<key>/scratch``."""
    return (home or ragsft_home()) / "plans" / key / "scratch"


def plan_file(key: str, home: Path | None = None) -> Path:
    """The last plan of a partition, as JSON: ``$RAGSFT_HOME/plans/<key>/plan.json``."""
    return (home or ragsft_home()) / "plans" / key / "plan.json"


def ledger_upstreams(
    parents: Mapping[str, Iterable[str]], stages: Iterable[str], inputs: Iterable[str] = ()
) -> dict[str, str | None]:
    """For each ledger stage, the nearest ledger stage above it in the asset graph.

    ``parents`` maps an asset name to its parents' names. Stages in ``inputs`` (the
    deterministic ones) count as the run's input: a stage whose nearest ledger stage is one of
    them, or that has none, gets ``None``. Among equally near stages the latest in pipeline
    order wins (a filter reads the questions of the stage just before it).
    """
    stages, inputs = set(stages), set(inputs)
    out: dict[str, str | None] = {}
    for stage in sorted(stages):
        frontier, seen, found = set(parents.get(stage, ())), {stage}, None
        while frontier and found is None:
            hits = [p for p in frontier if p in stages]
            if hits:
                found = max(hits, key=lambda s: (measure.stage_rank(s), s))
                break
            seen |= frontier
            frontier = {q for p in frontier for q in parents.get(p, ()) if q not in seen}
        out[stage] = None if found is None or found in inputs else found
    return out


def _asset_parents(job_def: dg.JobDefinition) -> dict[str, set[str]]:
    graph = job_def.asset_layer.asset_graph
    return {k.path[-1]: {p.path[-1] for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()}


def _rows(folder: Path) -> int:
    return sum(
        pq.ParquetFile(p).metadata.num_rows
        for p in sorted(folder.glob("*.parquet"))
        if not p.name.startswith(".")
    )


def _release_rows(release_folder: Path) -> dict[str, int]:
    if not release_folder.is_dir():
        return {}
    return {
        d.name: _rows(d)
        for d in sorted(release_folder.iterdir())
        if d.is_dir()
        and not d.name.startswith(".")
        and d.name not in NOT_CONFIGS
        and any(d.glob("*.parquet"))
    }


NOT_CONFIGS = ("provenance", "plots")  # release folders that hold no config's data


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` mirrors ``src`` with hard links (a copy where linking fails): no bytes duplicated."""
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def step_seconds(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """Seconds per step of a finished run, keyed by the asset name (the step key's last part)."""
    started: dict[str, float] = {}
    out: dict[str, float] = {}
    for record in instance.all_logs(run_id):
        ev = record.dagster_event
        if ev is None or not ev.step_key:
            continue
        name = ev.step_key.split("__")[-1]
        if ev.event_type_value == "STEP_START":
            started[name] = record.timestamp
        elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and name in started:
            out[name] = record.timestamp - started[name]
    return out


def llm_time(result: dg.ExecuteInProcessResult) -> dict[str, tuple[float, float, float, float]]:
    """Per asset of a run: its LLM batches' wall seconds, request-seconds in flight and requests sent
    to a model, from the ``<prefix>/wall_s``, ``<prefix>/in_flight_mean`` and ``<prefix>/calls``
    metadata the LLM stages attach (``BatchStats``; a ``wall_s`` without its ``in_flight_mean`` is
    not a batch's: the stream's), and the requests of other stages its step waited on
    (``stream/calls``, the multihop prefetch that ``ablation_verdicts`` joins)."""
    out: dict[str, tuple[float, float, float, float]] = {}
    for event in result.get_asset_materialization_events():
        md = event.materialization.metadata

        def number(key: str, md: Mapping[str, Any] = md) -> float:
            return float(getattr(md.get(key), "value", 0.0) or 0.0)

        wall = busy = 0.0
        calls = -1.0
        for key in md:
            prefix = key[: -len("/wall_s")]
            if not key.endswith("/wall_s") or f"{prefix}/in_flight_mean" not in md:
                continue
            w = number(key)
            wall += w
            busy += w * number(f"{prefix}/in_flight_mean")
            if f"{prefix}/calls" in md:
                calls = max(calls, 0.0) + number(f"{prefix}/calls")
        streamed = number("stream/calls")
        if wall > 0 or streamed > 0:
            out[event.asset_key.path[-1]] = (wall, busy, calls, streamed)
    return out


def run_sample(
    key: str,
    *,
    job: str | None = None,
    sample: int = 50,
    run_config: Mapping[str, Any] | None = None,
    home: Path | None = None,
    instance: dg.DagsterInstance | None = None,
    fleet: fc.Fleet | None = None,
    budgets: Mapping[str, int | None] | None = None,
    resources: Mapping[str, Any] | None = None,
    log: Any = None,
    earlier: Mapping[str, Mapping[str, float]] | None = None,
) -> fc.Plan:
    """Forecast ``job`` on partition ``key`` from a sample run of ``sample`` input items.

    ``resources`` are the run's (default: the project's, roles as configured from the
    environment); the sample run gets the same resources with its store and catalog in the
    scratch home. ``run_config`` is the run's config (its ``max_pairs`` / ``max_questions`` /
    ``max_examples``, when set, caps the forecast input as it will cap the run). ``earlier`` is an
    earlier sample's ``measured`` timing per stage (``record.measured``): with it the fleet's load
    curve is fitted (``plan/wall.py``).

    Raises:
        ValueError: a job this command cannot sample, or a sample size below 1.
        RuntimeError: a failed deterministic or sample run (the message names the failed steps).
    """
    from ragsft_assets.resources.catalog import CatalogResource
    from ragsft_assets.resources.store import ArtifactStore

    if sample < 1:
        raise ValueError("--sample must be at least 1")
    home = home or ragsft_home()
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.resources import default_resources

    base_resources = dict(resources if resources is not None else default_resources())
    defs = build_definitions(base_resources)
    partition_set = _partition_set(defs, job) if job else None
    job = job or DEFAULT_JOB.get(partition_set or "snapshot", "full_job")
    if job not in JOB_KINDS:
        raise ValueError(f"ragsft plan samples {sorted(JOB_KINDS)}; {job!r} is not one of them")
    kind = JOB_KINDS[job]
    instance = instance or dg.DagsterInstance.ephemeral()
    run_config = dict(run_config or {})
    say = log or (lambda _msg: None)

    real = ArtifactStore(home=str(home))
    job_def = defs.resolve_job_def(job)
    # 1. the deterministic stages, in the real home, when missing
    if kind.deterministic and not real.files(_store_partition(kind, key), kind.input_asset):
        say(f"plan: running the missing deterministic stages {', '.join(kind.deterministic)} of {key}")
        selection = [dg.AssetKey(k.split("/")) for k in kind.deterministic]
        result = _execute(job_def, key, instance, run_config, selection)
        if not result.success:
            raise RuntimeError(f"plan: the deterministic stages of {key} failed: {_failed(result)}")
    input_items = _input_items(real, kind, key, run_config)
    if input_items == 0:
        raise RuntimeError(
            f"plan: {key} has no input item ({kind.input_asset} is empty, or the run config takes "
            "none): a run would make no call and ship no row"
        )

    # 2. the sample, in a fresh scratch home that sees the deterministic assets through hard links
    scratch = scratch_home(key, home)
    if scratch.exists():
        shutil.rmtree(scratch)
    for asset in () if kind.resample_deterministic else kind.deterministic:
        name = asset.split("/")[-1]
        src = (
            home
            / "assets"
            / _store_partition(kind, key)
            / (kind.input_asset if asset.startswith("qa/") else name)
        )
        if src.is_dir():
            _link_tree(src, scratch / "assets" / _store_partition(kind, key) / src.name)
    sample_resources = {
        **base_resources,
        "store": ArtifactStore(home=str(scratch)),
        "catalog": CatalogResource(home=str(scratch)),
    }
    sample_job = build_definitions(sample_resources).resolve_job_def(job)
    sample_config = _merge(run_config, {"ops": {kind.sample_op: {"config": {kind.sample_field: sample}}}})
    # a sample that releases no question is a forecast of 0 rows to show, not a failed plan: its
    # blocking checks on empty output warn (a dead fleet is told apart by dead_fleet, below)
    sample_config = _merge(
        sample_config,
        {"ops": {"multihop_questions": {"config": {"overrides": {"allow_empty_output": True}}}}},
    )
    graph_parents = _asset_parents(sample_job)
    keys = [
        k
        for k in sample_job.asset_layer.asset_graph.get_all_asset_keys()
        if kind.resample_deterministic or k.to_user_string() not in kind.deterministic
    ]
    say(f"plan: sample run of {job} on {sample} input items of {key} (scratch: {scratch})")
    started = time.time()
    with no_step_retries():
        result = _execute(sample_job, key, instance, sample_config, keys)
    dead = dead_fleet(result)  # first: a dead fleet also fails the checks of the empty stages after it
    if dead:
        raise RuntimeError(f"plan: {dead}")
    if not result.success:
        raise RuntimeError(f"plan: the sample run failed: {_failed(result)}")
    sampled_inputs = min(sample, input_items) if input_items else sample

    # 3. measure and extrapolate
    folders = [scratch / "assets" / p.format(key=key) for p in (kind.store_partitions or ("{key}",))]
    seconds = step_seconds(instance, result.run_id)
    counts: dict[str, Any] = {}
    for folder in folders:
        counts.update(measure.ledger_counts(folder))
    llm_stages = job_llm_stages(sample_job)
    unreached = sorted(s for s in llm_stages if s not in counts and s not in kind.skip_stages)
    upstream = ledger_upstreams(graph_parents, [*counts, *unreached], kind.skip_stages)
    samples = []
    for folder in folders:
        samples += measure.stage_samples(
            folder,
            llm_cache_dir(),
            upstream,
            before=started,
            wall_s=seconds,
            llm_time=llm_time(result),
            skip=kind.skip_stages,
        )
    samples += [
        fc.StageSample(
            stage, upstream[stage], 0, 0, 0, 0, 0, max_calls_per_item=MAX_CALLS_PER_ITEM.get(stage, 1.0)
        )
        for stage in unreached
    ]
    samples = [
        dataclasses.replace(s, max_calls_per_item=MAX_CALLS_PER_ITEM.get(s.name, 1.0))
        if s.name in llm_stages and not s.max_calls_per_item
        else s
        for s in samples
    ]
    real_folders = [home / "assets" / p.format(key=key) for p in (kind.store_partitions or ("{key}",))]
    previous = _previous_run_inputs(real_folders)
    factors, previous_factors = _cap_factors(
        kind, key, home, scratch, sampled_inputs, input_items, run_config, previous
    )
    # the caps bind harder on the whole partition: of the requests a sample or a smaller earlier run
    # made below a capping stage, the run asks again only those of the items its own caps keep
    survival = {
        s.name: (factors[cap], previous_factors.get(cap, 1.0))
        for s in samples
        for cap in factors
        if _below(s.name, cap, upstream)
    }
    hits = partition_cache_hits(folders, real_folders, llm_cache_dir(), [s.name for s in samples], survival)
    spreads = unit_spreads(folders, llm_cache_dir(), sampled_inputs, input_items, kind.skip_stages)
    release = {name: 0 for name in job_configs(sample_job, scratch / "releases" / key)}
    release.update(_release_rows(scratch / "releases" / key))
    if "corpus" in release:  # the whole corpus ships whatever the sample: its real size, not a scaling
        release.pop("corpus")
    plan = fc.forecast(
        samples,
        sampled_inputs,
        input_items,
        partition=key,
        job=job,
        fleet=fleet,
        config_rows=release,
        budgets=budgets if budgets is not None else _budgets(base_resources),
        keep_factors=factors,
        cache_hits=hits,
        spreads=spreads,
        earlier=earlier,
    )
    corpus_rows = _rows(home / "assets" / key / "abstracts") if kind.partition_set == "snapshot" else 0
    if corpus_rows:  # a corpus config holds documents of the corpus: never more than it
        for name, rows in plan.configs.items():
            if name.startswith("corpus"):
                plan.configs[name] = {k: min(v, float(corpus_rows)) for k, v in rows.items()}
        plan.configs["corpus"] = {
            "rows": float(corpus_rows),
            "rows_low": float(corpus_rows),
            "rows_high": float(corpus_rows),
        }
    return plan


# The most requests one item of an LLM stage may cost, for the high end of a stage no sample item
# reached: the four-ablation cascade asks at most 4 (A+B, B, A, none); every other LLM stage 1.
MAX_CALLS_PER_ITEM = {"ablation_verdicts": 4.0}


def job_llm_stages(job_def: dg.JobDefinition) -> set[str]:
    """The names of the job's LLM stages: its assets in the ``gpu`` pool (``multihop_asset(llm=True)``
    and the other families' LLM stages), by the asset name's last part (the ledger's stage)."""
    graph = job_def.asset_layer.asset_graph
    out = set()
    for key in graph.get_all_asset_keys():
        assets_def = graph.assets_def_for_key(key)
        if getattr(getattr(assets_def, "op", None), "pool", None) == "gpu":
            out.add(key.path[-1])
    return out


def job_configs(job_def: dg.JobDefinition, release_folder: Path) -> list[str]:
    """Every release config a run of the job ships, under the names the release gives them: the
    sample release's ``provenance/configs.json``, else the configs whose asset the job builds."""
    from ragsft_assets.release.layout import CONFIGS_FILE, PROVENANCE, RELEASE_CONFIGS, read_configs

    if (release_folder / PROVENANCE / CONFIGS_FILE).is_file():
        return sorted(read_configs(release_folder))
    graph = job_def.asset_layer.asset_graph
    names = {k.to_user_string() for k in graph.get_all_asset_keys()}
    if "release" not in names:
        return []
    return sorted(c.name for c in RELEASE_CONFIGS if c.asset in names)


# Where a ledger candidate comes from: (asset, column naming its parent). A draft's bridge pair, a
# RAG example's question; a candidate with no parent is an input item (a pair, a QA question).
UNIT_PARENTS = (("question_drafts", "pair_id"), ("rag_prompts", "question_id"))


def unit_spreads(
    folders: Iterable[Path], cache_dir: Path, sampled: int, input_items: int, skip: Iterable[str] = ()
) -> dict[str, dict[str, float]]:
    """``plan/spread.spreads`` of the sample: every ledger candidate traced to its input item, each
    stage's items, kept, requests and tokens summed per input item. A stage whose candidates trace
    to more input items than the sample holds (not traced to them) is left out: its range stays
    the binomial one."""
    parents: dict[str, str] = {}
    rows: list[tuple[str, str, bool, list[str]]] = []
    skip = set(skip)
    for folder in folders:
        for asset, column in UNIT_PARENTS:
            files = sorted((folder / asset).glob("[!.]*.parquet"))
            if files and column in pq.read_schema(files[0]).names:
                table = pq.read_table(files, columns=["id", column])
                parents.update(zip(table["id"].to_pylist(), table[column].to_pylist(), strict=True))
        rows += [r for r in measure.ledger_rows(folder) if r[0] not in skip]
    tokens = measure.key_tokens(cache_dir, (k for r in rows for k in r[3]))
    per_unit = spread.unit_sums(rows, spread.roots(parents), tokens)
    traced = {stage: units for stage, units in per_unit.items() if len(units) <= sampled}
    return spread.spreads(traced, sampled, input_items)


def partition_cache_hits(
    sample_folders: Iterable[Path],
    real_folders: Iterable[Path],
    cache_dir: Path,
    stages: Iterable[str],
    survival: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, float]:
    """Per stage, the partition's own request keys that are in the cache: the sample's (the run
    makes the same requests for those items) and those a previous run of the partition recorded in
    its ledger. Counted, never extrapolated from the sample's share; ``survival`` (per stage, the
    sample's and the previous run's share of items the run keeps too, at most 1) weighs the keys
    of a stage below the caps."""

    def keys_of(folders: Iterable[Path]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for folder in folders:
            for stage, c in measure.ledger_counts(folder).items():
                out.setdefault(stage, set()).update(c["keys"])  # type: ignore[arg-type]
        return out

    sampled, previous = keys_of(sample_folders), keys_of(real_folders)
    out = {}
    for stage in stages:
        mine, theirs = (min(1.0, f) for f in (survival or {}).get(stage, (1.0, 1.0)))
        before = previous.get(stage, set())
        only_sample = sorted(sampled.get(stage, set()) - before)
        out[stage] = (
            mine * measure.cache_tokens(cache_dir, only_sample)["found"]
            + theirs * (measure.cache_tokens(cache_dir, sorted(before))["found"])
        )
    return out


def _below(stage: str, ancestor: str, upstream: Mapping[str, str | None]) -> bool:
    """Whether ``ancestor`` is above ``stage`` in the funnel (``upstream`` links, stage excluded)."""
    node, hops = upstream.get(stage), 0
    while node is not None and hops < len(upstream):
        if node == ancestor:
            return True
        node, hops = upstream.get(node), hops + 1
    return False


def _previous_run_inputs(real_folders: Iterable[Path]) -> int:
    """Bridge pairs an earlier run of the partition drafted (0: none): the first of the seeded
    order, as a run with ``max_pairs`` takes them."""
    pairs: set[str] = set()
    for folder in real_folders:
        files = sorted((folder / "question_drafts").glob("[!.]*.parquet"))
        if files and "pair_id" in pq.read_schema(files[0]).names:
            pairs.update(pq.read_table(files, columns=["pair_id"])["pair_id"].to_pylist())
    return len(pairs)


@contextlib.contextmanager
def no_step_retries() -> Iterator[None]:
    """Steps run once meanwhile: the LLM stages' retry policy (30 s, 60 s, 120 s of backoff) would
    make a plan on a dead fleet wait minutes before saying so; a plan run again resumes from the
    cache. Dagster reads a step's policy from its job definition when the step fails (the subset
    job of an asset selection included), so the lookup is replaced for the sample run only."""
    original = dg.JobDefinition.get_retry_policy_for_handle
    dg.JobDefinition.get_retry_policy_for_handle = lambda self, handle: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        dg.JobDefinition.get_retry_policy_for_handle = original  # type: ignore[method-assign]


def dead_fleet(result: dg.ExecuteInProcessResult) -> str:
    """Why the sample's fleet looks dead (every request that reached a model failed: HTTP 5xx,
    refused connections, timeouts), or "" when at least one call succeeded or none was made."""
    calls = errors = 0
    roles = set()
    for event in result.get_asset_materialization_events():
        md = event.materialization.metadata
        for name, value in md.items():
            if not name.endswith("/errors"):
                continue
            prefix = name[: -len("/errors")]
            made = int(getattr(md.get(f"{prefix}/calls"), "value", 0) or 0)
            failed = int(getattr(value, "value", 0) or 0)
            calls += made
            errors += failed
            if failed:
                roles.add(f"{prefix} ({event.asset_key.to_user_string()}: {failed} of {made})")
    if calls and errors >= calls:
        return (
            f"every LLM call of the sample failed ({errors} of {calls}; {', '.join(sorted(roles))}): "
            "the fleet answered none (HTTP errors, refused connections or timeouts). A dead fleet is "
            "not a plan of 0 rows: check the roles' RAGSFT_<ROLE>_BASE_URLS / backends and run "
            "`ragsft plan` again"
        )
    return ""


def _cap_factors(
    kind: JobKind,
    key: str,
    home: Path,
    scratch: Path,
    sampled: int,
    input_items: int,
    run_config: Mapping[str, Any],
    previous: int = 0,
) -> tuple[dict[str, float], dict[str, float]]:
    """The keep-rate multiplier of the capping stage of a snapshot's run (``plan/scale.py``), and the
    run's keep against that of an earlier run of the first ``previous`` pairs (0: none)."""
    if kind.input_asset != "bridge_pairs" or sampled >= input_items:
        return {}, {}  # the sample took every pair: the caps bound it as they bind the run
    folder = scratch / "assets" / key
    capping = measure.stages_with_reasons(folder, scale.CAP_REASONS)
    drafts_folder = folder / "question_drafts"
    if not capping or not drafts_folder.is_dir():
        return {}, {}
    drafts = pq.read_table(
        sorted(drafts_folder.glob("*.parquet")), columns=["id", "a_id", "b_id"]
    ).to_pylist()
    seed = int(
        ((((run_config.get("ops") or {}).get("question_drafts") or {}).get("config") or {}).get("seed"))
        or DEFAULT_SEED
    )
    pairs_files = sorted((home / "assets" / key / "bridge_pairs").glob("*.parquet"))
    names = set(pq.read_schema(pairs_files[0]).names)
    pairs_table = pq.read_table(pairs_files, columns=["a_id", "b_id", *(["draw"] if "draw" in names else [])])
    if "draw" in names:  # the seeded order whose first N a run with max_pairs takes
        pairs_table = pairs_table.sort_by("draw")
    all_pairs = list(zip(pairs_table["a_id"].to_pylist(), pairs_table["b_id"].to_pylist(), strict=True))
    all_pairs = all_pairs[:input_items]
    out, earlier = {}, {}
    for stage, ids in capping.items():
        per_pair: dict[tuple[str, str], int] = {}
        for d in drafts:
            pair = (d["a_id"], d["b_id"])
            per_pair[pair] = per_pair.get(pair, 0) + (d["id"] in ids)
        pairs = sorted(per_pair)
        by_size = scale.cap_keep_factors(pairs, [per_pair[p] for p in pairs], all_pairs, seed, [previous])
        out[stage] = by_size[len(all_pairs)]
        earlier[stage] = by_size.get(previous, 1.0)
    return out, earlier


def _partition_set(defs: dg.Definitions, job: str) -> str:
    pd = defs.resolve_job_def(job).partitions_def
    return getattr(pd, "name", "") or "snapshot"


def _execute(
    job_def: dg.JobDefinition,
    key: str,
    instance: dg.DagsterInstance,
    run_config: Mapping[str, Any],
    selection: list[dg.AssetKey],
) -> dg.ExecuteInProcessResult:
    pd = job_def.partitions_def
    if (
        isinstance(pd, dg.DynamicPartitionsDefinition)
        and pd.name
        and not instance.has_dynamic_partition(pd.name, key)
    ):
        instance.add_dynamic_partitions(pd.name, [key])
    ops = set(job_def.asset_layer.asset_graph.get_all_asset_keys()) & set(selection)
    wanted = {op for op in (k.to_python_identifier() for k in ops)}
    config = dict(run_config)
    if "ops" in config:
        config["ops"] = {k: v for k, v in config["ops"].items() if k in wanted}
    return job_def.execute_in_process(
        partition_key=key,
        instance=instance,
        run_config=config,
        asset_selection=sorted(ops),
        raise_on_error=False,
    )


def _failed(result: dg.ExecuteInProcessResult) -> str:
    """The failed steps, each with the first line of its error (what the user must fix)."""
    out: dict[str, str] = {}
    for e in result.all_events:
        if e.event_type_value != "STEP_FAILURE" or not e.step_key:
            continue
        error = getattr(getattr(e, "event_specific_data", None), "error", None)
        while getattr(error, "cause", None) is not None:  # the user's exception, not Dagster's wrapper
            error = error.cause  # type: ignore[union-attr]
        message = (getattr(error, "message", "") or "").strip().splitlines()
        out.setdefault(e.step_key, message[0] if message else "")
    return "; ".join(f"{k}: {v}" if v else k for k, v in sorted(out.items())) or "see the run's log"


def _store_partition(kind: JobKind, key: str) -> str:
    return kind.store_partitions[0].format(key=key) if kind.store_partitions else key


def run_input_cap(kind: JobKind, run_config: Mapping[str, Any]) -> int | None:
    """How many input items the run takes, resolved as the run resolves its config, defaults
    included (None: every one). A snapshot's ``question_drafts`` builds its ``MultihopConfig``:
    ``max_pairs`` when set, else its recipe's ``pairs_drawn`` (the card's 200,000); the other kinds'
    ``max_questions`` / ``max_examples`` take every item at 0."""
    op_config = ((run_config.get("ops") or {}).get(kind.sample_op) or {}).get("config") or {}
    if kind.sample_op == "question_drafts":
        from ragsft_assets.defs.multihop.assets import MultihopConfig

        cfg = MultihopConfig(**op_config)
        return cfg.max_pairs if cfg.max_pairs is not None else cfg.resolved("question_drafts").pairs_drawn
    cap = op_config.get(kind.sample_field)
    return int(cap) if cap else None


def _input_items(store: Any, kind: JobKind, key: str, run_config: Mapping[str, Any]) -> int:
    cap = run_input_cap(kind, run_config)
    if not kind.input_asset:
        return int(cap or 0)
    folder = store.root / _store_partition(kind, key) / kind.input_asset
    n = _rows(folder)
    return min(n, cap) if cap is not None else n


def _budgets(resources: Mapping[str, Any]) -> dict[str, int | None]:
    """The smallest ``budget_calls`` / ``budget_tokens`` any LLM role sets."""
    out: dict[str, int | None] = {"budget_calls": None, "budget_tokens": None}
    for res in resources.values():
        for name in out:
            value = getattr(res, name, None)
            if isinstance(value, int) and (out[name] is None or value < out[name]):
                out[name] = value
    return out


def ledger_folder(key: str, home: Path | None = None) -> Path:
    """A partition's ledger folder in the real home."""
    return (home or ragsft_home()) / "assets" / key / LEDGER_DIR
