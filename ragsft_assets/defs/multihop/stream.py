"""The multihop chain streamed: the ablation cascade and the judges after it run chunk by chunk.

Stage at a time, the fleet idles at every stage's tail (its slowest call), between the cascade's
rounds and during the CPU steps between stages. Here ``ablation_verdicts`` first cuts the
questions it judges (sorted by id) into chunks and, in a pool of worker threads, runs each
chunk through the very functions the assets run: the cascade (``ablations.run_cascade``), then
every judge of the run downstream (``first_hop``, ``criteria_annotation``, ``bridge_judge``,
``language_judge``, ``publishability_score``, ``descriptor_check``: their ``JudgedStage.judge``)
on the chunk's questions that the stage before kept. While one chunk is in the cascade, others
are at the judges: several stages and roles are in flight at once.

The chunks only fill the content-addressed LLM cache; they write nothing. Then every asset runs
as before, stage at a time on all its items, and finds each of its calls in the cache. So each
asset file, ledger row and cache entry is the stage-at-a-time run's (the same code builds every
request, from the same inputs), a crash resumes from the cache, and a chunk that fails (a
transport error, a bug) costs only time: its requests are sent again by the stage that needs them.

What streams: a judge whose asset this run materializes, whose inputs stream too (``reads``),
with no global budget in its config (``max_questions``: which questions get it depends on all of
them), and whose model has a cache on an HTTP backend (``auto``; ``on`` needs only the cache).
The questions a judge reads are the cascade's kept ones (``multihop_questions`` keeps exactly
those; the judges read only their id, question, answer and split).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.defs.multihop.judged import JUDGED_STAGES, JudgeCall, JudgedStage
from ragsft_assets.llm.types import BatchResult, ChatModel, ChatResult, Request
from ragsft_assets.multihop import ablations
from ragsft_assets.multihop.recipes import MultihopRecipe
from ragsft_assets.prompts import PromptTemplate

# The judges after the cascade, in the order a chunk goes through them (each after its inputs).
CHAIN = (
    "first_hop",
    "criteria_annotation",
    "bridge_judge",
    "language_judge",
    "publishability_score",
    "descriptor_check",
)
BASE_INPUTS = frozenset({"multihop_questions", "question_drafts", "abstracts"})
MODES = ("auto", "on", "off")
# ours: 64 questions a chunk, 64 chunks at once. A chunk goes through about ten batches one after
# the other (four cascade rounds, six judges), each ending with its slowest call: about 25 s on the
# bench fleet. The questions in flight (chunk x workers) must cover that: 256 slots do about 85
# questions a second (3 busy slot-seconds each), so about 2,000 or more; 1,024 (16 chunks) left
# bench fleet's stream at 97-117 s, 4,096 took 87 s. A chunk's stragglers hold only that chunk.
CHUNK = 64
WORKERS = 64


@dataclass(frozen=True, slots=True)
class StreamStage:
    """A judge the chunks go through: its stage, run config, recipe, model and prompt."""

    stage: JudgedStage
    config: Any
    recipe: MultihopRecipe
    model: ChatModel
    template: PromptTemplate


@dataclass(slots=True)
class StreamReport:
    """What the stream did, for the metadata: chunks, judges streamed, wall time, failed chunks."""

    chunks: int = 0
    questions: int = 0
    stages: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # judge -> why it does not stream
    wall_s: float = 0.0
    failed_chunks: int = 0
    errors: list[str] = field(default_factory=list)  # the first few failures, masked by the client

    def metadata(self) -> dict[str, Any]:
        return {
            "stream/chunks": self.chunks,
            "stream/questions": self.questions,
            "stream/judges": ", ".join(self.stages),
            "stream/skipped": ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())),
            "stream/wall_s": round(self.wall_s, 3),
            "stream/failed_chunks": self.failed_chunks,
        }


def cached_http(model: Any) -> bool:
    """Whether ``model`` answers from an LLM cache and over HTTP (an ``openai`` fleet), where
    concurrent batches are what the backend is built for."""
    from ragsft_assets.llm.backends.openai_backend import OpenAIBackend
    from ragsft_assets.llm.client import ChatClient

    if isinstance(model, ChatClient):
        return model.cache is not None and isinstance(model.backend, OpenAIBackend)
    return bool(getattr(model, "use_cache", False)) and getattr(model, "backend", "") == "openai"


def has_cache(model: Any) -> bool:
    from ragsft_assets.llm.client import ChatClient

    if isinstance(model, ChatClient):
        return model.cache is not None
    return bool(getattr(model, "use_cache", False))


def usable(model: Any, mode: str) -> str | None:
    """None when ``model`` can stream in ``mode``, else why not.

    Raises:
        ValueError: ``mode`` is not one of :data:`MODES`, or ``on`` with a model without a cache
            (streaming would send every request twice).
    """
    if mode not in MODES:
        raise ValueError(f"stream must be one of {MODES}, got {mode!r}")
    if mode == "off":
        return "stream off"
    if mode == "on":
        if not has_cache(model):
            raise ValueError(
                "stream='on' needs an LLM cache for every streamed role (the chunks only fill the cache"
                " that the stages then read); set use_cache=true or stream='off'"
            )
        return None
    return None if cached_http(model) else "model without a cache on an HTTP backend"


class _Tables:
    """A table reader over in-memory tables (a chunk's inputs), with the store's ``read``/``files``."""

    def __init__(self, tables: dict[str, pa.Table]) -> None:
        self.tables = tables

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table:
        if part is not None or asset not in self.tables:
            raise KeyError(f"stream: a judge read {asset!r} (part {part!r}), which the chunk does not hold")
        return self.tables[asset]

    def files(self, partition: str, asset: str) -> list[Path]:
        return [Path(asset)] if asset in self.tables else []


class _QuietLog:
    """The stage functions' log inside a chunk: per-batch info lines dropped (a chunk's batches are
    many and small), warnings and errors kept."""

    def __init__(self, log: Any) -> None:
        self._log = log

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        pass

    info = debug

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._log.warning(f"stream: {msg}")

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._log.error(f"stream: {msg}")


class SingleFlight(ChatModel):
    """A ``ChatModel`` over another that sends a request only once while it is in flight: a
    thread asking what another thread has in flight waits for it, then reads it (from the cache).
    Two chunks can ask the same prompt (the cascade shares identical prompts between questions);
    the stage-at-a-time run sends it once, and so does the stream. ``chat`` is the protocol's own
    (a batch of ``Request``s through ``run``)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._flying: dict[bytes, threading.Event] = {}

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        keys = [
            orjson.dumps(
                [
                    [dict(m) for m in r.messages],
                    r.params.to_dict(),
                    r.json_schema,
                    r.template_version or template_version,
                    r.chat_template_kwargs,
                    r.prompt,
                ],
                option=orjson.OPT_SORT_KEYS,
            )
            for r in requests
        ]
        mine: dict[bytes, threading.Event] = {}
        theirs: dict[bytes, threading.Event] = {}
        with self._lock:
            for k in keys:
                if k in mine or k in theirs:
                    continue
                if k in self._flying:
                    theirs[k] = self._flying[k]
                else:
                    mine[k] = self._flying[k] = threading.Event()

        def ask(idx: list[int]) -> BatchResult:
            return self.model.run([requests[i] for i in idx], template_version=template_version, log=log)

        results: list[ChatResult | None] = [None] * len(keys)
        first = [i for i, k in enumerate(keys) if k in mine]
        try:
            batch = ask(first) if first else BatchResult()
        finally:
            with self._lock:
                for k, event in mine.items():
                    self._flying.pop(k, None)
                    event.set()
        for i, res in zip(first, batch.results, strict=True):
            results[i] = res
        later = [i for i, k in enumerate(keys) if k in theirs]
        if later:
            for event in theirs.values():
                event.wait()
            second = ask(later)  # answered from the cache now (or sent again if it failed there)
            for i, res in zip(later, second.results, strict=True):
                results[i] = res
            batch = BatchResult(results=[], stats=batch.stats.add(second.stats))
        return BatchResult(results=[r for r in results if r is not None], stats=batch.stats)


def _op_config(run_config: Mapping[str, Any], name: str) -> dict[str, Any]:
    return dict(((run_config.get("ops") or {}).get(name) or {}).get("config") or {})


def stream_stages(
    selected: set[str],
    run_config: Mapping[str, Any],
    mode: str,
    role_models: Callable[[JudgedStage, str], ChatModel],
    template: Callable[[JudgedStage], PromptTemplate],
) -> tuple[list[StreamStage], dict[str, str]]:
    """The judges of :data:`CHAIN` that stream in this run, in order, and why each other does not.

    ``selected``: the assets the run materializes; ``run_config``: the run's (each judge's op
    config); ``role_models(stage, role)``: the model of a role; ``template(stage)``: its prompt.
    """
    streamed: list[StreamStage] = []
    skipped: dict[str, str] = {}
    have = set(BASE_INPUTS)
    for name in CHAIN:
        stage = JUDGED_STAGES.get(name)
        if stage is None:
            skipped[name] = "not declared"
            continue
        if name not in selected:
            skipped[name] = "not in this run"
            continue
        missing = sorted(set(stage.reads) - have)
        if missing:
            skipped[name] = f"its inputs {missing} do not stream"
            continue
        config = stage.config(**_op_config(run_config, name))
        if getattr(config, "max_questions", None) is not None:
            skipped[name] = "max_questions set (a budget over all questions)"
            continue
        recipe = config.resolved(name)
        model = role_models(stage, stage.role(recipe))
        why = usable(model, mode)
        if why is not None:
            skipped[name] = why
            continue
        streamed.append(StreamStage(stage, config, recipe, model, template(stage)))
        have.add(name)
    return streamed, skipped


def _index(table: pa.Table, column: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, v in enumerate(table[column].to_pylist()):
        out.setdefault(v, []).append(i)
    return out


def run_stream(
    items: Sequence[ablations.JudgeItem],
    cascade: Callable[[Sequence[ablations.JudgeItem], ChatModel, Any], Any],
    judge: ChatModel,
    stages: Sequence[StreamStage],
    drafts: pa.Table,
    abstracts: pa.Table,
    partition: str,
    log: Any,
    chunk: int = CHUNK,
    workers: int = WORKERS,
) -> StreamReport:
    """Run ``items`` (sorted by id) chunk by chunk through ``cascade(chunk, judge, log)`` and then
    ``stages``, ``workers`` chunks at once; fill the LLM cache only. Never raises for a chunk:
    its failure is counted and logged (the stages then send what it did not)."""
    started = time.monotonic()
    ordered = sorted(items, key=lambda it: it.id)
    chunks = [ordered[i : i + chunk] for i in range(0, len(ordered), max(1, chunk))]
    report = StreamReport(chunks=len(chunks), questions=len(ordered), stages=[s.stage.name for s in stages])
    flights: dict[int, SingleFlight] = {}
    for m in [judge, *(s.model for s in stages)]:
        if id(m) not in flights:
            m.model_identity()  # a lazily made client is made here, once, not by racing threads
            flights[id(m)] = SingleFlight(m)
    quiet = _QuietLog(log)
    draft_rows = _index(drafts, "id")
    doc_rows = _index(abstracts, "id")
    lock = threading.Lock()

    def one(part: Sequence[ablations.JudgeItem]) -> None:
        result = cascade(part, flights[id(judge)], quiet)
        kept = sorted(q for q, o in result.outcome.items() if o.verdict == "kept")
        if not kept or not stages:
            return
        d = drafts.take([i for q in kept for i in draft_rows[q]])
        rows = d.select(["id", "question", "answer", "split", "a_id", "b_id"]).to_pylist()
        ids = sorted({r[k] for r in rows for k in ("a_id", "b_id")})
        tables = {
            "question_drafts": d,
            "abstracts": abstracts.take([i for x in ids for i in doc_rows.get(x, [])]),
            "multihop_questions": pa.table(
                {c: [r[c] for r in rows] for c in ("id", "question", "answer", "split")}
            ),
        }
        store = _Tables(tables)
        for s in stages:
            call = JudgeCall(
                store=store,  # type: ignore[arg-type]  # a TableReader over the chunk's tables
                partition=partition,
                recipe=s.recipe,
                config=s.config,
                model=flights[id(s.model)],  # type: ignore[arg-type]
                template=s.template,
                log=quiet,  # type: ignore[arg-type]
            )
            tables[s.stage.name] = s.stage.judge(call).table

    def guarded(part: Sequence[ablations.JudgeItem]) -> None:
        try:
            one(part)
        except Exception as exc:  # a chunk only warms the cache: the stages redo what it did not
            with lock:
                report.failed_chunks += 1
                if len(report.errors) < 3:
                    report.errors.append(f"{type(exc).__name__}: {exc}"[:500])

    if chunks:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="ragsft-stream") as pool:
            list(pool.map(guarded, chunks))
    report.wall_s = time.monotonic() - started
    if report.failed_chunks:
        log.warning(
            f"stream: {report.failed_chunks} of {report.chunks} chunk(s) failed ({'; '.join(report.errors)});"
            " the stages send what they did not"
        )
    return report
