"""``ragsft bench fleet``: the multihop and rag_sft chains against a simulated vLLM fleet over HTTP.

What it measures: whether the LLM client keeps a production fleet busy, loses nothing and
repeats nothing, at production volume. In one run:

1. a generated snapshot: ``bench.corpus.generate`` writes realistic frwiki records (real
   sentences and anchors, real record sizes; about 1.05 bridge pairs per record), the
   ``corpus_job`` builds abstracts, link graph and ``pairs`` bridge pairs (default 20,000);
2. a simulated fleet (``bench.fleet_sim.FleetSimulator``: ``replicas`` x ``slots`` sequence slots,
   latency from per-sequence prefill and decode rates, 429 + Retry-After when a replica is full,
   1% of attempts failing with a 500 or a connection reset, scripted answers passing each stage
   at the seed funnels' rates) in its own process;
3. ``multihop_job`` (drafts, checks, distractors, the ablation cascade, caps, the four filter
   configs) then ``rag_sft_job``, materialized in this process with every LLM role on the real
   ``openai`` backend pointed at the fleet, a fresh LLM cache. ``stream`` is
   ``question_drafts``' setting: ``auto`` streams each pair from its draft through the cascade and
   the judges after it, in small batches of ready questions (``defs/multihop/stream.py``), ``off`` runs them
   stage at a time (the baseline).

Closing line (``bench=fleet ...``), ending with ``regime``, ``utilization_e2e``, ``lost``,
``duplicated``, ``swapped`` and ``passed``:

- ``regime`` / ``client_limit``: the client's per-URL limit, 0.5x / 1x / 2x the replicas' slots;
- ``utilization_e2e``: slot-seconds busy / (slots x the whole job's wall time, first request to
  last answer, the non-LLM stages included). Bars: 0.85 at 20,000 pairs in every regime, 0.80
  at 5,000 pairs with ``over``;
- ``swapped``: cache entries whose answer belongs to another request (``check_answers``: the
  fleet's answer id carries the body hash, and the text must be what it sent for that body);
- ``rejected_share`` / ``rejected_share_steady``: 429s per attempt, overall and after each
  stage's first answer (bar: steady at most 0.05);
- ``utilization``: slot-seconds busy / (slots x the LLM stages' wall time), where a stage's wall
  time runs from its first request reaching the fleet to its last answer (the union over stages;
  the non-LLM stages in between do not count).
- ``max_in_flight``, ``requests`` (HTTP attempts), ``retries`` (429s, 500s and resets the client
  had to retry), ``rejected_429``;
- ``client_cpu_ms_per_request``: this process's CPU time (user + system) during the two LLM jobs
  per request answered: the client, cache, parsing and the stages' own work, an upper bound
  of the client's share (the fleet runs in another process and is not counted);
- ``peak_rss_mb``: this process's peak RSS (bar: under 2048);
- ``<stage>_s``: each LLM stage's wall seconds at the fleet; ``jobs_s``: the two jobs' wall time;
- ``lost``: request bodies the fleet answered 200 that no cache entry holds (per body);
  ``duplicated``: 200 answers beyond the first to one body (a request sent again after it was
  answered), plus bodies held by two entries. Bar: both 0, and ``swapped`` 0.
- ``gave_up``: results the client ended as ``error`` (the stages' ``*/errors`` metadata).
- ``hung_up``: answers the fleet had ready just as their client hung up (a straggler cut or a
  timeout racing the answer): never delivered, so not answers, and the client's retry of the
  request is not a duplicate; ``aborted`` counts the sequences stopped before their answer.

Latencies default to a 24B-35B model on one GPU per replica under full batching: 500 prompt
tokens/s prefill and 30 tokens/s decode per sequence (an ablation call about 1.5 s, a draft
call about 8 s). ``time_scale`` shrinks them for quick runs (the client then has to sustain a
proportionally higher request rate). Options: ``pairs`` (``--pairs``), ``replicas``, ``slots``,
``prefill_tok_s``, ``decode_tok_s``, ``error_rate``, ``time_scale``, ``seed``.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragsft_assets.bench import machine_values

PARTITION = "bench.fr"
DEFAULT_PAIRS = 20_000
RECORDS_PER_PAIR = 1.1  # the generated records give about 1.05 bridge pairs each: a margin over it
UTILIZATION_BAR = 0.85  # utilization_e2e, every regime, at 20,000 pairs
OVER_SMALL_BAR = 0.80  # utilization_e2e with --regime over at 5,000 pairs (or fewer)
REJECTED_STEADY_BAR = 0.05  # 429s after each stage's first answer, per attempt
RSS_BAR_MB = 2048
# The client's per-URL limit as a share of each replica's slots.
REGIMES = {"under": 0.5, "equal": 1.0, "over": 2.0}
TIMEOUT_S = 120.0  # the client's per-attempt timeout at time_scale 1 (LLMResource's default)
LLM_ROLES = ("generator", "judge", "annotator", "base_model")


def make_snapshot(home: Path, pairs: int, workdir: Path, seed: int = 1) -> Path:
    """Generate (or reuse from ``workdir``) a dump big enough for ``pairs`` and install it as ``bench.fr``."""
    from ragsft_assets.bench import corpus
    from ragsft_assets.cli.snapshots import install_snapshot

    records = int(pairs * RECORDS_PER_PAIR) + 200
    src = workdir / f"fleet-dump-{records}-v{corpus.GENERATOR_VERSION}-s{seed}"
    dump = src / "frwiki_namespace_0_0.jsonl"
    if not dump.is_file():
        src.mkdir(parents=True, exist_ok=True)
        tmp = dump.with_suffix(".tmp")
        corpus.generate(tmp, records, seed=seed)
        tmp.rename(dump)
    return install_snapshot(PARTITION, src, home)


@contextmanager
def fresh_home(root: Path) -> Iterator[Path]:
    """A new ``RAGSFT_HOME`` under ``root`` (fresh assets and LLM cache) for the block; the previous
    value comes back after it."""
    home = root / f"home-{time.time_ns()}"
    home.mkdir()
    old_home = os.environ.get("RAGSFT_HOME")
    os.environ["RAGSFT_HOME"] = str(home)
    try:
        yield home
    finally:
        if old_home is None:
            os.environ.pop("RAGSFT_HOME", None)
        else:
            os.environ["RAGSFT_HOME"] = old_home


def llm_resources(
    home: Path, base_urls: list[str], model: str, concurrency: int, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    """Every LLM role on the ``openai`` backend at the fleet, one cache under ``home``."""
    from ragsft_assets.resources.llm import LLMResource

    return {
        role: LLMResource(
            backend="openai",
            base_urls=list(base_urls),
            model=model,
            concurrency=concurrency,
            timeout_s=timeout_s,
            backoff_s=0.5,
            cache_dir=str(home / "llm_cache"),
            role=role,
            progress_every_s=30.0,
        )
        for role in LLM_ROLES
    }


def _resources(home: Path, llm: dict[str, Any]) -> dict[str, Any]:
    from ragsft_assets.resources.catalog import CatalogResource
    from ragsft_assets.resources.embedder import EmbeddingResource
    from ragsft_assets.resources.snapshots import SnapshotSource
    from ragsft_assets.resources.store import ArtifactStore

    return {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        "embedder": EmbeddingResource(cache_dir=str(home / "llm_cache")),  # bound; these jobs embed nothing
        **llm,
    }


def _run_job(defs: Any, instance: Any, job: str, run_config: dict[str, Any] | None = None) -> Any:
    result = defs.resolve_job_def(job).execute_in_process(
        partition_key=PARTITION, instance=instance, run_config=run_config or {}, raise_on_error=False
    )
    if not result.success:
        failures = [e.message for e in result.all_events if e.is_step_failure]
        raise RuntimeError(f"bench fleet: {job} failed: {failures[:3]}")
    return result


def _gave_up(results: list[Any]) -> int:
    """Results the client ended as errors, from the stages' ``<role>/errors`` metadata."""
    total = 0
    for result in results:
        for event in result.all_events:
            if not event.is_step_materialization:
                continue
            md = event.event_specific_data.materialization.metadata
            for key, value in md.items():
                if key.endswith("/errors") and isinstance(getattr(value, "value", None), int):
                    total += value.value
    return total


def request_from_record(record: dict[str, Any]) -> Any:
    """The ``Request`` a cache entry's request record was made from (what the backend sent)."""
    from ragsft_assets.llm.backends.base import Request
    from ragsft_assets.llm.types import SamplingParams

    params = dict(record["params"])
    params["stop"] = tuple(params.get("stop") or ())
    return Request(
        messages=record["messages"],
        params=SamplingParams(**params),
        json_schema=record.get("json_schema"),
        chat_template_kwargs=record.get("chat_template_kwargs"),
        prompt=record.get("prompt"),
    )


def check_answers(
    cache_dir: Path, answers: dict[str, str], body_of: Callable[[Any], dict[str, Any]]
) -> dict[str, int]:
    """Check every cached answer against the request it is stored for, and every answer the
    fleet gave against the cache.

    ``answers``: the fleet's body SHA-256 -> SHA-256 of the text it sent (``FleetSimulator.
    answers``); ``body_of``: the HTTP body the backend sends for a ``Request``. Returns
    ``checked`` (cache entries), ``swapped`` (entries whose answer id is not their own request's
    body hash, or whose text is not what the fleet sent for that body), ``lost`` (bodies the fleet
    answered that no cache entry holds) and ``shared`` (bodies held by more than one entry).
    """
    import hashlib

    import orjson

    from ragsft_assets.bench.fleet_sim import body_digest
    from ragsft_assets.llm.cache import LLMCache

    cache = LLMCache(cache_dir)
    held: dict[str, int] = {}
    checked = swapped = 0
    try:
        for request, response in cache._conn().execute("SELECT request, response FROM calls"):
            checked += 1
            resp = orjson.loads(response)
            digest = body_digest(body_of(request_from_record(orjson.loads(request)))).hex()
            text_sha = hashlib.sha256((resp.get("text") or "").encode()).hexdigest()
            if resp.get("response_id") != f"chatcmpl-{digest}" or answers.get(digest) != text_sha:
                swapped += 1
                continue
            held[digest] = held.get(digest, 0) + 1
    finally:
        cache.close()
    return {
        "checked": checked,
        "swapped": swapped,
        "lost": sum(1 for d in answers if d not in held),
        "shared": sum(n - 1 for n in held.values()),
    }


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _print(msg: str) -> None:
    print(f"bench fleet: {msg}", flush=True)


def run(
    size: int | None = None,
    workdir: str | None = None,
    *,
    pairs: int | None = None,
    replicas: int = 2,
    slots: int = 128,
    prefill_tok_s: float = 500.0,
    decode_tok_s: float = 30.0,
    error_rate: float = 0.01,
    time_scale: float = 1.0,
    seed: int = 1,
    regime: str = "equal",
    stream: str = "auto",
    stream_in_flight: int | None = None,
) -> dict[str, object]:
    """Run the benchmark (``pairs``, else ``size``, else 20,000); returns the closing key=value pairs.

    ``regime``: the client's per-URL limit is half (``under``), equal to (``equal``) or twice
    (``over``) each replica's ``slots``. ``stream``: ``question_drafts``' ``stream`` setting
    (``auto``: each pair streams from its draft through the cascade and the judges after it, question
    by question; ``off``: stage at a time); ``stream_in_flight``: the stream's requests in flight
    (None: its default, the generator's limit times its URLs).
    """
    import dagster as dg

    from ragsft_assets.bench.fleet_sim import FleetSimulator
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.llm.backends.openai_backend import OpenAIBackend
    from ragsft_assets.llm.cache import LLMCache

    if regime not in REGIMES:
        raise ValueError(f"bench fleet: unknown regime {regime!r}; choose one of {sorted(REGIMES)}")
    concurrency = max(1, round(slots * REGIMES[regime]))
    timeout_s = max(10.0, TIMEOUT_S * time_scale)
    n_pairs = pairs or size or DEFAULT_PAIRS
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-fleet-"))
    root.mkdir(parents=True, exist_ok=True)
    with fresh_home(root) as home:
        t0 = time.perf_counter()
        make_snapshot(home, n_pairs, root, seed)
        _print(f"snapshot of about {n_pairs} pairs ready in {time.perf_counter() - t0:.1f}s")
        with FleetSimulator(
            replicas=replicas,
            slots=slots,
            prefill_tok_s=prefill_tok_s,
            decode_tok_s=decode_tok_s,
            error_rate=error_rate,
            seed=seed,
            time_scale=time_scale,
            timeout_s=timeout_s,
        ) as fleet:
            llm = llm_resources(home, fleet.base_urls, fleet.model, concurrency, timeout_s)
            defs = build_definitions(_resources(home, llm))
            instance = dg.DagsterInstance.ephemeral()
            instance.add_dynamic_partitions("snapshot", [PARTITION])
            t0 = time.perf_counter()
            _run_job(
                defs, instance, "corpus_job", {"ops": {"bridge_pairs": {"config": {"max_pairs": n_pairs}}}}
            )
            corpus_s = time.perf_counter() - t0
            from ragsft_assets.resources.store import ArtifactStore

            made = ArtifactStore(home=str(home)).read(PARTITION, "bridge_pairs").num_rows
            _print(f"corpus_job: {made} bridge pairs in {corpus_s:.1f}s; the LLM jobs start")
            fleet.reset_stats()
            cpu0, t0 = _cpu_s(), time.perf_counter()
            stream_shape = {"stream_in_flight": stream_in_flight} if stream_in_flight else {}
            drafts = {
                "ops": {
                    "question_drafts": {"config": {"max_pairs": n_pairs, "stream": stream, **stream_shape}},
                }
            }
            results = [_run_job(defs, instance, "multihop_job", drafts)]
            _print(f"multihop_job done in {time.perf_counter() - t0:.1f}s")
            sft = {"ops": {"rag_responses": {"config": {"stream": stream}}}}  # the rag_sft chain's stream
            results.append(_run_job(defs, instance, "rag_sft_job", sft))
            jobs_s = time.perf_counter() - t0
            cpu_s = _cpu_s() - cpu0
            stats = fleet.stats()
            for name, st in stats["stages"].items():
                mean = st["busy_s"] / max(1, st["ok"])
                _print(
                    f"stage {name}: {st['ok']} answers in {st['wall_s']:.1f}s, mean latency {mean:.2f}s,"
                    f" {st['prompt_tokens'] // max(1, st['ok'])} prompt and"
                    f" {st['completion_tokens'] // max(1, st['ok'])} completion tokens per call"
                )
            again = stats.get("admitted_again") or []
            if again:  # where a duplicate came from: a gap of milliseconds is a cut racing the answer
                _print(
                    "admitted again after their answer (stage, seconds after it): "
                    + ", ".join(f"{st} {gap:.3f}" for st, gap in again)
                )
            occupancy = stats.get("occupancy") or []
            _print(
                "occupancy per 5 s (busy slots / slots, first request to last answer): "
                + " ".join(f"{x:.2f}" for x in occupancy)
            )
            for r in llm.values():
                r.close()
            body_of = OpenAIBackend(fleet.base_urls, fleet.model)._body  # what every role sent
            check = check_answers(home / "llm_cache", fleet.answers(), body_of)
        cache = LLMCache(home / "llm_cache")
        entries = len(cache)
        cache.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stages = {f"{name}_s": round(s["wall_s"], 1) for name, s in stats["stages"].items()}
    calls = {f"{name}_calls": s["ok"] for name, s in stats["stages"].items()}
    rejected = stats["rejected_429"]
    probing = sum(st["rejected_before_ok"] for st in stats["stages"].values())
    steady = (rejected - probing) / max(1, stats["requests"] - probing)
    bar = OVER_SMALL_BAR if regime == "over" and made <= 5000 else UTILIZATION_BAR
    values: dict[str, object] = {
        "pairs": made,
        "regime": regime,
        "client_limit": concurrency,
        "stream": stream,
        **stream_shape,
        "utilization_e2e": round(stats["utilization_e2e"], 3),
        "utilization_bar": bar,
        "lost": check["lost"],
        "duplicated": stats["duplicated"] + check["shared"],
        "swapped": check["swapped"],
        "rejected_share": round(rejected / max(1, stats["requests"]), 4),
        "rejected_share_steady": round(steady, 4),
        "e2e_wall_s": round(stats["e2e_wall_s"], 1),
        "aborted": stats["aborted"],
        "hung_up": stats.get("hung_up", 0),
        "utilization": round(stats["utilization"], 3),
        "max_in_flight": stats["max_in_flight"],
        "slots": stats["slots"],
        "requests": stats["requests"],
        "answered": stats["ok"],
        "retries": stats["retries"],
        "rejected_429": stats["rejected_429"],
        "client_cpu_ms_per_request": round(1000 * cpu_s / max(1, stats["ok"]), 2),
        "peak_rss_mb": round(peak_mb),
        "gave_up": _gave_up(results),
        "cache_entries": entries,
        "checked": check["checked"],
        "llm_wall_s": round(stats["stage_wall_s"], 1),
        "jobs_s": round(jobs_s, 1),
        "corpus_s": round(corpus_s, 1),
        **stages,
        **calls,
        "prefill_tok_s": prefill_tok_s,
        "decode_tok_s": decode_tok_s,
        "time_scale": time_scale,
        "load_avg": round(os.getloadavg()[0], 2),
    }
    values["passed"] = (
        stats["utilization_e2e"] >= bar
        and values["lost"] == 0
        and values["duplicated"] == 0
        and values["swapped"] == 0
        and steady <= REJECTED_STEADY_BAR
        and peak_mb < RSS_BAR_MB
    )
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
    values = {**values, **machine_values("httpx", "aiohttp")}
    # The closing line ends with what the bars read: regime, utilization_e2e, lost, duplicated, swapped.
    tail = ("regime", "utilization_e2e", "lost", "duplicated", "swapped", "passed")
    return {**{k: v for k, v in values.items() if k not in tail}, **{k: values[k] for k in tail}}
