"""The multihop chain streamed question by question, from the drafts to the last judge.

Stage at a time, the fleet idles at every stage's tail (its slowest call), between the cascade's
rounds and during the CPU stages between them (checks, distractor search, caps). Here
``question_drafts`` starts a :class:`Prefetch` in the background: each bridge pair's draft call,
then its drafts' deterministic checks, then the ablation cascade (``ablations.run_cascade``) and
every judge of the run downstream (``first_hop``, ``criteria_annotation``, ``bridge_judge``,
``language_judge``, ``publishability_score``, ``descriptor_check``: their ``JudgedStage.judge``)
on the questions the stage before kept, each question on to its next call as soon as its own
answer comes. Drafts go first (a draft waiting for a slot is served before any later call), so
the draft phase ends as soon as stage at a time; the cascade and the judges then fill the fleet
while ``question_drafts`` writes, and while ``question_checks`` and ``distractors`` run on the CPU.
``ablation_verdicts`` tells the prefetch which questions it judges (the caps and the distractor
search drop a few: their calls still in line are not sent) and waits for it.

The prefetch only fills the content-addressed LLM cache; it writes nothing. Every asset runs as
before, stage at a time on all its items, and finds its calls in the cache. So each asset file,
ledger row and cache entry the stages use is the stage-at-a-time run's (the same code builds every
request from the same inputs), a crash resumes from the cache, and a call that fails in the
prefetch (a transport error, a bug) costs only time: the stage that needs it sends it. What it
costs: the cascade and judge calls of the questions the caps then drop, made before the caps ran
(``stream/speculative_calls`` in ``ablation_verdicts``' metadata; the cache keeps them).

What streams: a judge whose asset this run materializes, whose inputs stream too (``reads``),
with no global budget in its config (``max_questions``), and whose model has a cache on an HTTP
backend (``auto``; ``on`` needs only the cache). The cascade streams unless ``max_judged`` is set
(a budget over all questions). The prefetch lives in this process: the definitions run every job
in-process (``definitions.py``), so later steps of the run find it; a step of another run never
does, and a prefetch whose run has ended stops.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.defs.multihop.judged import JUDGED_STAGES, JudgeCall, JudgedStage
from ragsft_assets.ids import question_id
from ragsft_assets.llm.types import BatchResult, ChatModel, ChatResult, Request
from ragsft_assets.multihop import ablations, caps, generation
from ragsft_assets.multihop import question_checks as checks_logic
from ragsft_assets.multihop.recipes import MultihopRecipe
from ragsft_assets.prompts import PromptTemplate

# The judges after the cascade, in the order a question goes through them (each after its inputs).
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
# ours: requests the prefetch keeps in flight when the roles do not say (a model without a
# per-URL limit, as the test doubles); an HTTP role's is its limit times its URLs (``in_flight``).
IN_FLIGHT = 64
# ours: drafts start before any later stage's task (the questions then wait for the fleet, which
# the drafts fill); the later stages then fill the draft phase's tail and the CPU stages after it
DRAFTS_FIRST = True
RAMP_PER_S = 256  # tasks the stream may add per second from its start (64 at once)
# the stream keeps in flight the generator's current window (what the fleet takes) times this,
# plus 8: enough for the client to go on probing for more, few threads waiting in its line
WINDOW_MARGIN = 1.25
WINDOW_POLL_S = 0.5  # a waiter looks again this often (the window may have grown)
POLL_S = 1.0  # how often a prefetch looks whether its run has ended
PROGRESS_S = 30.0  # a progress line while a stage waits for the stream


@dataclass(frozen=True, slots=True)
class StreamStage:
    """A judge the questions go through: its stage, run config, recipe, model and prompt."""

    stage: JudgedStage
    config: Any
    recipe: MultihopRecipe
    model: ChatModel
    template: PromptTemplate


@dataclass(frozen=True, slots=True)
class DraftStep:
    """What the prefetch needs to draft a pair as ``question_drafts`` does, and to check its drafts
    as ``question_checks`` does."""

    pairs: Sequence[generation.Pair]
    docs: Mapping[str, generation.Doc]
    model: ChatModel
    template: PromptTemplate
    per_pair: int
    params: Any
    max_words: int
    max_chars: int


@dataclass(frozen=True, slots=True)
class CapsStep:
    """The caps ``distractors`` applies before the judge (its seed and recipe's limits): the stream
    sends a question to the cascade once the caps keep it, deciding in their seeded order."""

    seed: int
    max_per_bridge: int
    max_per_source: int
    near_dup_jaccard: float


@dataclass(slots=True)
class StreamReport:
    """What the prefetch did, for the metadata."""

    pairs: int = 0
    questions: int = 0  # questions that entered the cascade
    stages: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # judge -> why it does not stream
    drafts_wall_s: float = 0.0
    wall_s: float = 0.0
    calls: int = 0  # requests the prefetch's calls sent to a model (not served from the cache)
    speculative_calls: int = 0  # of them, for questions the caps or the search then dropped
    cut: int = 0  # questions whose calls in line were not sent (not judged after all)
    failed: int = 0  # pairs or questions whose prefetch raised (their stages send the calls)
    errors: list[str] = field(default_factory=list)  # the first few failures, masked by the client
    stopped: str = ""  # why it stopped early, if it did
    speculative_ids: set[str] = field(default_factory=set)  # questions sent on, not judged after all

    def metadata(self) -> dict[str, Any]:
        return {
            "stream/pairs": self.pairs,
            "stream/questions": self.questions,
            "stream/judges": ", ".join(self.stages),
            "stream/skipped": ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())),
            "stream/drafts_wall_s": round(self.drafts_wall_s, 3),
            "stream/wall_s": round(self.wall_s, 3),
            "stream/calls": self.calls,
            "stream/speculative_calls": self.speculative_calls,
            "stream/cut_questions": self.cut,
            "stream/failed": self.failed,
        }


def cached_http(model: Any) -> bool:
    """Whether ``model`` answers from an LLM cache and over HTTP (an ``openai`` fleet), where
    concurrent requests are what the backend is built for."""
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
                "stream='on' needs an LLM cache for every streamed role (the prefetch only fills the"
                " cache that the stages then read); set use_cache=true or stream='off'"
            )
        return None
    return None if cached_http(model) else "model without a cache on an HTTP backend"


def window_of(model: Any) -> Callable[[], int] | None:
    """The current window of ``model``'s HTTP backend (``OpenAIBackend.window``), if it has one."""
    client = model.client() if callable(getattr(model, "client", None)) else model
    window = getattr(getattr(client, "backend", None), "window", None)
    return window if callable(window) else None


def in_flight(model: Any) -> int:
    """Requests the prefetch keeps in flight for ``model``: an HTTP role's most in flight over its
    URLs (its window's ceiling, ``LLMResource.window_ceiling``, as it probes past
    ``concurrency``), else :data:`IN_FLIGHT`."""
    urls = getattr(model, "base_urls", None) or []
    ceiling = getattr(model, "window_ceiling", None)
    per_url = ceiling() if callable(ceiling) else getattr(model, "concurrency", None)
    if isinstance(per_url, int) and per_url > 0 and urls:
        return per_url * len(urls)
    return IN_FLIGHT


class _Tables:
    """A table reader over in-memory tables (a question's inputs), with the store's ``read``/``files``."""

    def __init__(self, tables: dict[str, pa.Table]) -> None:
        self.tables = tables

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table:
        if part is not None or asset not in self.tables:
            raise KeyError(
                f"stream: a judge read {asset!r} (part {part!r}), which the prefetch does not hold"
            )
        return self.tables[asset]

    def files(self, partition: str, asset: str) -> list[Path]:
        return [Path(asset)] if asset in self.tables else []


class _QuietLog:
    """The stage functions' log inside the prefetch: per-batch info lines dropped (its batches are
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


def _request_key(r: Request, template_version: str) -> bytes:
    return orjson.dumps(
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


class SingleFlight(ChatModel):
    """A ``ChatModel`` over another that sends a request only once while it is in flight: a
    thread asking what another thread has in flight waits for it, then reads it (from the cache).
    Two questions can ask the same prompt (the cascade shares identical prompts between questions);
    the stage-at-a-time run sends it once, and so does the prefetch. ``chat`` is the protocol's own
    (a batch of ``Request``s through ``run``)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._flying: dict[bytes, threading.Event] = {}

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        keys = [_request_key(r, template_version) for r in requests]
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


class Budget:
    """The prefetch's requests in flight, at most ``limit``, and at most ``window()`` (what the
    fleet takes now, with a margin so that the client still probes for more) when given; a
    ``first`` caller waiting is served before any other. A release wakes as many waiters as slots
    it frees (of the first kind while any waits), not every thread: a thousand runnable threads
    would starve the client's event loop of the GIL."""

    def __init__(self, limit: int, window: Callable[[], int] | None = None) -> None:
        self.limit = max(1, limit)
        self.window = window
        self.used = 0
        self.first_waiting = 0
        self._lock = threading.Lock()
        self._first = threading.Condition(self._lock)
        self._later = threading.Condition(self._lock)

    def cap(self) -> int:
        """The requests allowed in flight now."""
        if self.window is None:
            return self.limit
        return max(1, min(self.limit, int(self.window() * WINDOW_MARGIN) + 8))

    def acquire(self, n: int, first: bool) -> int:
        n = max(1, min(n, self.limit))
        with self._lock:
            if first:
                self.first_waiting += 1
                try:
                    while self.used + n > max(n, self.cap()):
                        self._first.wait(WINDOW_POLL_S)
                finally:
                    self.first_waiting -= 1
            else:
                while self.used + n > max(n, self.cap()) or self.first_waiting:
                    self._later.wait(WINDOW_POLL_S)
            self.used += n
            self._wake()
        return n

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n
            self._wake()

    def _wake(self) -> None:
        free = self.cap() - self.used
        if free > 0:
            (self._first if self.first_waiting else self._later).notify(free)


class _Metered(ChatModel):
    """A model's calls through the prefetch's :class:`Budget`, counting what each question sent."""

    def __init__(self, model: ChatModel, budget: Budget, first: bool, prefetch: Prefetch) -> None:
        self.model, self.budget, self.first, self.prefetch = model, budget, first, prefetch

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        self.prefetch.raise_if_stopped()
        held = self.budget.acquire(len(requests), self.first)
        try:
            self.prefetch.raise_if_stopped()  # it may have stopped while this call waited its turn
            batch = self.model.run(requests, template_version=template_version, log=log)
        finally:
            self.budget.release(held)
        self.prefetch.count(batch.stats.calls)
        return batch


class _CapsOrder:
    """The caps' decisions as the drafts come in. Every question a pair can have is known before
    its draft (``question_id(a, b, i)``), so is the caps' seeded order over them. A question is
    decided once it is drafted and checked and every question before it in that order with its
    source or its bridge document is decided: the per-document caps are then exactly
    ``caps.apply_caps``'s. A draft that is slow to come holds only the questions of its two
    documents, not every question after it.

    Where this can differ from the stage (the stage decides; a difference costs calls, never
    output): a near duplicate of a question decided later (an earlier one with the same answer
    whose draft came late: rare), and the distractor search's drops (``too_few_distractors``),
    not known here. Both may send a question the judge will not see (counted as speculation).
    """

    def __init__(self, step: CapsStep, pairs: Sequence[generation.Pair], per_pair: int) -> None:
        keyed = sorted(
            (caps.cap_order_key(step.seed, question_id(p.a_id, p.b_id, i)), p)
            for p in pairs
            for i in range(per_pair)
        )
        self.order = [key[1] for key, _ in keyed]
        self.position = {qid: pos for pos, qid in enumerate(self.order)}
        self.first_position: dict[str, int] = {}  # pair id -> where its first question comes
        self._docs: list[tuple[str, str]] = []  # position -> (source, bridge)
        self._waiting: dict[tuple[str, str], list[int]] = {}  # ("a"|"b", doc) -> undecided positions
        for pos, (_, p) in enumerate(keyed):
            self.first_position.setdefault(p.id, pos)
            self._docs.append((p.a_id, p.b_id))
            self._waiting.setdefault(("a", p.a_id), []).append(pos)
            self._waiting.setdefault(("b", p.b_id), []).append(pos)
        for heads in self._waiting.values():
            heads.reverse()  # the next undecided position of a document is the list's last
        self.caps = caps.Caps(step.max_per_bridge, step.max_per_source, step.near_dup_jaccard)
        self.known: dict[int, tuple[caps.CapCandidate, ablations.JudgeItem, pa.Table] | None] = {}
        self.decided = 0
        self._lock = threading.Lock()

    def _ready(self, pos: int) -> bool:
        a, b = self._docs[pos]
        return pos in self.known and self._waiting[("a", a)][-1] == pos and self._waiting[("b", b)][-1] == pos

    def add(
        self, ids: Sequence[str], found: Sequence[tuple[caps.CapCandidate, ablations.JudgeItem, pa.Table]]
    ) -> list[tuple[ablations.JudgeItem, pa.Table]]:
        """Record a drafted and checked pair (its question ``ids``; ``found``: the candidates among
        them); returns the questions now decided ``kept``."""
        out = []
        with self._lock:
            for qid in ids:
                self.known[self.position[qid]] = None
            for c, item, table in found:
                self.known[self.position[c.id]] = (c, item, table)
            todo = sorted(self.position[q] for q in ids)  # a heap: the earliest first
            while todo:
                pos = heapq.heappop(todo)
                if not self._ready(pos):
                    continue
                entry = self.known.pop(pos)
                self.decided += 1
                if entry is not None and self.caps.decide(entry[0], pos) == "kept":
                    out.append((entry[1], entry[2]))
                a, b = self._docs[pos]
                for key in (("a", a), ("b", b)):
                    heads = self._waiting[key]
                    heads.pop()
                    if heads:
                        heapq.heappush(todo, heads[-1])  # the next of this document may be ready now
        return out


class _Stopped(Exception):
    """The prefetch was stopped (its run ended, or the questions it would judge were cut)."""


class Prefetch:
    """Question by question, in the background: draft, check, cascade, judges; the cache only.

    ``drafts``: the pairs to draft (None: start from ``items``, the cascade's questions), in the
    caps' order, each question sent on once ``cap`` keeps it;
    ``cascade(items, model, log)``: the cascade as the stage runs it (None: the cascade does not
    stream, and neither do the judges); ``judge``: its model; ``stages``: the judges after it;
    ``abstracts``: the partition's; ``limit``: requests in flight (:func:`in_flight`).
    ``finished()``: True once the run that started it has ended (the prefetch then stops).
    """

    def __init__(
        self,
        *,
        drafts: DraftStep | None,
        cascade: Callable[[Sequence[ablations.JudgeItem], ChatModel, Any], Any] | None,
        cap: CapsStep | None = None,
        judge: ChatModel | None,
        stages: Sequence[StreamStage],
        abstracts: pa.Table,
        partition: str,
        log: Any,
        limit: int,
        finished: Callable[[], bool] | None = None,
    ) -> None:
        self.drafts, self.cascade, self.stages = drafts, cascade, list(stages)
        if drafts is not None and cascade is not None and cap is None:
            raise ValueError("stream: from the drafts, the cascade needs the caps (CapsStep)")
        self._caps = _CapsOrder(cap, drafts.pairs, drafts.per_pair) if drafts and cascade and cap else None
        self.abstracts, self.partition, self.log = abstracts, partition, log
        self.budget = Budget(limit)
        self.finished = finished
        self.report = StreamReport(stages=[s.stage.name for s in self.stages] if cascade else [])
        self._quiet = _QuietLog(log)
        self._lock = threading.RLock()  # progress() reads under it while join waits on _idle
        self._allowed: set[str] | None = None
        self._halt = threading.Event()  # stopped early: send nothing more
        self._drafted = threading.Event()
        self._calls_of: dict[str, int] = {}
        self._chained: set[str] = set()
        self._drafts_done = 0
        self._local = threading.local()
        self._doc_rows = _index(abstracts, "id")
        self._started = time.monotonic()
        flights: dict[int, ChatModel] = {}
        # no budget priority: the lines order the tasks (``_feed``); a priority on the budget held
        # a thousand later calls that then all woke at the drafts' end
        first: set[int] = set()
        for m in [
            *([drafts.model] if drafts else []),
            *([judge] if judge else []),
            *(s.model for s in stages),
        ]:
            if id(m) not in flights:
                m.model_identity()  # a lazily made client is made here, once, not by racing threads
                flights[id(m)] = SingleFlight(_Metered(m, self.budget, id(m) in first, self))
        self._flight = flights
        self._judge = judge
        # one pool for every task (drafts and the later stages'): its threads serve both, so their
        # number follows the tasks running at once (:meth:`_tasks_cap`), not twice that
        self._pool = ThreadPoolExecutor(
            max_workers=int(self.budget.limit * 1.25) + 16, thread_name_prefix="ragsft-stream"
        )
        self._pending = 0  # tasks not finished, in line or running
        self._running = 0
        self._lines: dict[str, deque[tuple[Callable[..., None], tuple[Any, ...]]]] = {
            "draft": deque(),
            "chain": deque(),
        }
        self._idle = threading.Condition(self._lock)
        self._joined = False
        self._watch: threading.Thread | None = None

    # -- bookkeeping -------------------------------------------------------------------------------

    def count(self, calls: int) -> None:
        qid = getattr(self._local, "qid", None)
        with self._lock:
            self.report.calls += calls
            if qid is not None:
                self._calls_of[qid] = self._calls_of.get(qid, 0) + calls

    def raise_if_stopped(self) -> None:
        if self._halt.is_set():
            raise _Stopped("stopped")
        qid = getattr(self._local, "qid", None)
        allowed = self._allowed
        if qid is not None and allowed is not None and qid not in allowed:
            raise _Stopped("cut")

    def _submit(self, line: str, fn: Callable[..., None], *args: Any) -> None:
        """Put a task in its line; it runs when a thread is free under :meth:`_tasks_cap`."""
        with self._lock:
            if self._halt.is_set():
                return
            self._pending += 1
            self._lines[line].append((fn, args))
        self._feed()

    def _tasks_cap(self) -> int:
        """Tasks running at once: the budget with room for those between calls (CPU), reached in
        a ramp (:data:`RAMP_PER_S`): a thousand threads starting together would starve the
        client's event loop of the GIL (the fleet emptied for 20 s at such a start)."""
        ramp = 64 + int((time.monotonic() - self._started) * RAMP_PER_S)
        return min(int(self.budget.cap() * 1.25) + 16, ramp)

    def _feed(self) -> None:
        order = ("draft", "chain") if DRAFTS_FIRST else ("chain", "draft")
        with self._lock:
            while not self._halt.is_set() and self._running < self._tasks_cap():
                line = next((self._lines[k] for k in order if self._lines[k]), None)
                if line is None:
                    return
                fn, args = line.popleft()
                self._running += 1
                try:
                    self._pool.submit(self._guarded, fn, *args)
                except RuntimeError:  # the pool is shut down: the prefetch was stopped
                    self._running -= 1
                    self._pending -= 1

    def _done_one(self) -> None:
        with self._idle:
            self._pending -= 1
            if self._pending == 0:
                self._idle.notify_all()

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except _Stopped:
            pass
        except Exception as exc:  # the prefetch only warms the cache: the stages redo what it did not
            with self._lock:
                self.report.failed += 1
                if len(self.report.errors) < 3:
                    self.report.errors.append(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self._local.qid = None
            with self._lock:
                self._running -= 1
            self._feed()
            self._done_one()

    # -- the work ----------------------------------------------------------------------------------

    def start(self, items: Sequence[ablations.JudgeItem] = (), drafts: pa.Table | None = None) -> Prefetch:
        """Start drafting every pair (or, without drafts, chaining ``items``, whose rows are in the
        ``drafts`` table); returns at once.

        Arrow's default allocator becomes the system's for the process: mimalloc keeps about 1 MB
        per thread that allocated, and the stream runs up to twice ``limit`` threads (1,000 threads
        held 1.16 GB against 0.16 GB with the system allocator)."""
        if pa.default_memory_pool().backend_name != "system":
            pa.set_memory_pool(pa.system_memory_pool())
        if self.drafts is not None:
            self.report.pairs = len(self.drafts.pairs)
            left = [len(self.drafts.pairs)]

            def drafted() -> None:
                with self._lock:
                    left[0] -= 1
                    self._drafts_done += 1
                    done = left[0] <= 0
                if done:
                    self.report.drafts_wall_s = time.monotonic() - self._started
                    self._drafted.set()

            if not self.drafts.pairs:
                drafted()
            pairs = list(self.drafts.pairs)
            if self._caps is not None:  # the caps decide in their order: draft in it
                pairs.sort(key=lambda p: self._caps.first_position[p.id])
            for pair in pairs:
                self._submit("draft", self._draft, pair, drafted)
        else:
            self._drafted.set()
            if self.cascade is not None and items:
                if drafts is None:
                    raise ValueError("stream: questions to chain without their drafts table")
                for item in sorted(items, key=lambda it: it.id):
                    self._submit("chain", self._chain, item, drafts)
        if self.finished is not None:
            self._watch = threading.Thread(target=self._watch_run, name="ragsft-stream-watch", daemon=True)
            self._watch.start()
        return self

    def _draft(self, pair: generation.Pair, drafted: Callable[[], None]) -> None:
        d = self.drafts
        assert d is not None
        ids = [question_id(pair.a_id, pair.b_id, i) for i in range(d.per_pair)]
        found: list[Any] = []
        try:
            try:
                table, _ = generation.generate_drafts(
                    [pair],
                    d.docs,
                    self._flight[id(d.model)],
                    d.template,
                    d.per_pair,
                    d.params,
                    log=self._quiet,
                    max_words=d.max_words,
                    max_chars=d.max_chars,
                )
            finally:
                drafted()
            if self._caps is not None and not self._halt.is_set():
                found = self._candidates(table)
        finally:
            # whatever happened, the pair is known now (a failure: no candidate), so the
            # questions waiting on its documents go on
            if self._caps is not None and not self._halt.is_set():
                self._caps_add(ids, found)

    def _candidates(self, table: pa.Table) -> list[Any]:
        """The pair's drafts the checks keep, as caps candidates with their cascade items."""
        d = self.drafts
        assert d is not None
        checked = checks_logic.run_checks(table, d.docs, d.max_words, d.max_chars)
        kept = {r["id"] for r in checked.select(["id", "verdict"]).to_pylist() if r["verdict"] == "kept"}
        found = []
        for row in table.to_pylist():
            if row["id"] in kept:
                a, b = d.docs[row["a_id"]], d.docs[row["b_id"]]
                found.append(
                    (
                        caps.CapCandidate(
                            row["id"], row["question"], row["answer"], row["a_id"], row["b_id"]
                        ),
                        ablations.JudgeItem(
                            row["id"], row["question"], row["answer"], a.title, a.text, b.title, b.text
                        ),
                        table,
                    )
                )
        return found

    def _caps_add(self, ids: Sequence[str], found: Sequence[Any]) -> None:
        assert self._caps is not None
        for item, drafts_table in self._caps.add(ids, found):  # each question on its own
            self._submit("chain", self._chain, item, drafts_table)

    def _chain(self, item: ablations.JudgeItem, drafts: pa.Table) -> None:
        assert self.cascade is not None and self._judge is not None
        self._local.qid = item.id
        with self._lock:
            self.report.questions += 1
            self._chained.add(item.id)
        self.raise_if_stopped()
        result = self.cascade([item], self._flight[id(self._judge)], self._quiet)
        kept = sorted(q for q, o in result.outcome.items() if o.verdict == "kept")
        if not kept or not self.stages:
            return
        d = drafts.filter(pc.is_in(drafts["id"], value_set=pa.array(kept)))
        rows = d.select(["id", "question", "answer", "split", "a_id", "b_id"]).to_pylist()
        ids = sorted({r[k] for r in rows for k in ("a_id", "b_id")})
        tables = {
            "question_drafts": d,
            "abstracts": self.abstracts.take([i for x in ids for i in self._doc_rows.get(x, [])]),
            "multihop_questions": pa.table(
                {c: [r[c] for r in rows] for c in ("id", "question", "answer", "split")}
            ),
        }
        store = _Tables(tables)
        for s in self.stages:
            call = JudgeCall(
                store=store,  # type: ignore[arg-type]  # a TableReader over the question's tables
                partition=self.partition,
                recipe=s.recipe,
                config=s.config,
                model=self._flight[id(s.model)],
                template=s.template,
                log=self._quiet,  # type: ignore[arg-type]
            )
            tables[s.stage.name] = s.stage.judge(call).table

    def _watch_run(self) -> None:
        while not self._halt.wait(POLL_S) and not self._joined:
            try:
                ended = self.finished is not None and self.finished()
            except Exception:  # the instance went away with its run
                ended = True
            if ended:
                self.stop("its run ended")
                return

    # -- what the stages call ----------------------------------------------------------------------

    def progress(self) -> str:
        """A progress line for the log: pairs drafted, questions sent on, calls made."""
        with self._lock:
            return (
                f"stream: {self._drafts_done} of {self.report.pairs} pairs drafted,"
                f" {self._caps.decided if self._caps else 0} questions through the caps,"
                f" {self.report.questions} sent on through the cascade and judges,"
                f" {self.report.calls} calls made, {time.monotonic() - self._started:.0f}s"
            )

    def wait_drafts(self, every_s: float = PROGRESS_S, log: Any = None) -> None:
        """Block until every pair's draft call has answered (or failed); a progress line every
        ``every_s`` seconds."""
        while not self._drafted.wait(every_s):
            (log or self.log).info(self.progress())

    def restrict(self, ids: set[str]) -> None:
        """Judge only ``ids`` from now on: calls in line for other questions are not sent."""
        with self._lock:
            self._allowed = set(ids)

    def join(self, every_s: float = PROGRESS_S, log: Any = None) -> StreamReport:
        """Wait for every call in line; returns the report (the pools are shut down)."""
        with self._idle:
            while self._pending > 0 and not self._halt.is_set():
                if not self._idle.wait(every_s):
                    (log or self.log).info(self.progress())
        self._joined = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.report.wall_s = time.monotonic() - self._started
        allowed = self._allowed
        with self._lock:
            if allowed is not None:
                self.report.speculative_calls = sum(n for q, n in self._calls_of.items() if q not in allowed)
                self.report.cut = len(self._chained - allowed)
                self.report.speculative_ids = self._chained - allowed
        if self.report.failed:
            self.log.warning(
                f"stream: {self.report.failed} pair(s) or question(s) failed in the prefetch"
                f" ({'; '.join(self.report.errors)}); the stages send what it did not"
            )
        return self.report

    def stop(self, why: str) -> None:
        """Send nothing more (calls in flight finish); the pools wind down in the background."""
        if self._halt.is_set():
            return
        self.report.stopped = why
        self._halt.set()
        self._drafted.set()
        with self._lock:
            for line in self._lines.values():
                self._pending -= len(line)
                line.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._idle:  # a join waiting returns: cancelled futures never finish
            self._idle.notify_all()


def op_config(run_config: Mapping[str, Any], name: str) -> dict[str, Any]:
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
        config = stage.config(**op_config(run_config, name))
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


# (run id, partition) -> the prefetch ``question_drafts`` started in this process
_RUNNING: dict[tuple[str, str], Prefetch] = {}
_RUNNING_LOCK = threading.Lock()


def register(run_id: str, partition: str, prefetch: Prefetch) -> None:
    with _RUNNING_LOCK:
        old = _RUNNING.pop((run_id, partition), None)
        _RUNNING[(run_id, partition)] = prefetch
    if old is not None:  # a retried step: the earlier attempt's prefetch stops
        old.stop("its step was retried")


def running(run_id: str, partition: str) -> bool:
    """Whether this run's stream for ``partition`` is running in this process."""
    with _RUNNING_LOCK:
        return (run_id, partition) in _RUNNING


def take(run_id: str, partition: str) -> Prefetch | None:
    """The prefetch this run started for ``partition`` in this process (removed), if any."""
    with _RUNNING_LOCK:
        return _RUNNING.pop((run_id, partition), None)
