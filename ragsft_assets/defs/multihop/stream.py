"""The multihop chain streamed from the drafts to the last judge, in small batches of ready items.

Stage at a time, the fleet idles at every stage's tail (its slowest call), between the cascade's
rounds and during the CPU stages between them (checks, distractor search, caps). Here
``question_drafts`` starts a :class:`Prefetch` in the background: each bridge pair's draft call,
then its drafts' deterministic checks, then the ablation cascade (``ablations.run_cascade``) and
every judge of the run downstream (``first_hop``, ``criteria_annotation``, ``bridge_judge``,
``language_judge``, ``publishability_score``, ``descriptor_check``: their ``JudgedStage.judge``)
on the questions the stage before kept, each batch on to its next call as soon as its own
answers come. Pairs and questions go in small batches (``BackgroundStream.batched``), in three
lines (:data:`LINES`: the drafts, the cascade, the judges after it): a line's few workers each
take every item waiting, up to 16, so a batch is one item while the stream keeps up and grows when
items pile up (less CPU per request, a thread per batch, not per question; ``defs/streaming.py``
says why). Drafts go first (the cascade's workers start once every pair is taken, the judges'
once every question the caps kept is), so the draft phase ends about as soon as stage at a time;
the cascade and the judges then fill the fleet while ``question_drafts`` writes, and while
``question_checks`` and ``distractors`` run on the CPU.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.defs.multihop.judged import JUDGED_STAGES, JudgeCall, JudgedStage
from ragsft_assets.defs.streaming import (
    MODES,
    BackgroundStream,
    Budget,
    Registry,
    SingleFlight,
    StreamCounts,
    in_flight,
    op_config,
    usable,
)
from ragsft_assets.ids import question_id
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import ablations, caps, generation
from ragsft_assets.multihop import question_checks as checks_logic
from ragsft_assets.multihop.recipes import MultihopRecipe
from ragsft_assets.prompts import PromptTemplate

__all__ = ["MODES", "Budget", "SingleFlight", "in_flight", "op_config", "usable"]

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
# ours: drafts start before any later stage's task (the questions then wait for the fleet, which
# the drafts fill); the cascade then fills the draft phase's tail and the CPU stages after it, and
# the judges take the questions the cascade kept once its own line has none waiting
LINES = ("draft", "cascade", "judges")
# ours: a cascade batch makes rounds on fewer and fewer questions (AB, then B, then A on those each
# kept), each round waiting for its slowest answer: few requests in flight per batch on average,
# against 16 for a draft batch. With as many workers as the draft line and the judges in the same
# batch after the cascade, the fleet ran at 0.75-0.8 after the drafts (bench fleet, under); with
# twice as many, at 0.9-1.0 but in waves: the workers' batches went through their judges' rounds
# on a few kept questions together, every 30 s. The judges now take the kept questions of several
# cascade batches together (a batch of up to 16, a round per judge).
CASCADE_WORKERS_FACTOR = 2


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

    def run(self, pairs: Sequence[generation.Pair], model: ChatModel, log: Any) -> tuple[pa.Table, Any]:
        """``pairs``' drafts as ``question_drafts`` writes them, and the batch's stats."""
        return generation.generate_drafts(
            pairs,
            self.docs,
            model,
            self.template,
            self.per_pair,
            self.params,
            log=log,
            max_words=self.max_words,
            max_chars=self.max_chars,
        )


@dataclass(frozen=True, slots=True)
class CapsStep:
    """The caps ``distractors`` applies before the judge (its seed and recipe's limits): the stream
    sends a question to the cascade once the caps keep it, deciding in their seeded order."""

    seed: int
    max_per_bridge: int
    max_per_source: int
    near_dup_jaccard: float


@dataclass(slots=True)
class StreamReport(StreamCounts):
    """What the prefetch did, for the metadata."""

    pairs: int = 0
    questions: int = 0  # questions that entered the cascade
    stages: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # judge -> why it does not stream
    drafts_wall_s: float = 0.0
    # calls for questions the stage then did not judge: an upper bound, since a batch's calls are
    # not split by question (all count when one of its questions was not judged)
    speculative_calls: int = 0
    cut: int = 0  # questions whose calls in line were not sent (not judged after all)
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
            **({"stream/stopped": self.stopped} if self.stopped else {}),
        }


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


class Prefetch(BackgroundStream[StreamReport]):
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
        report = StreamReport(stages=[s.stage.name for s in stages] if cascade else [])
        super().__init__(
            report, lines=LINES, log=log, limit=limit, finished=finished, noun="pair or question"
        )
        self.drafts, self.cascade, self.stages = drafts, cascade, list(stages)
        if drafts is not None and cascade is not None and cap is None:
            raise ValueError("stream: from the drafts, the cascade needs the caps (CapsStep)")
        self._caps = _CapsOrder(cap, drafts.pairs, drafts.per_pair) if drafts and cascade and cap else None
        self.abstracts, self.partition = abstracts, partition
        self._allowed: set[str] | None = None
        self._drafted = threading.Event()
        self._calls_of: dict[tuple[str, ...], int] = {}  # a batch's question ids -> its calls
        self._chained: set[str] = set()
        self._drafts_done = 0
        self._doc_rows = _index(abstracts, "id")
        self._judge = judge
        for m in [
            *([drafts.model] if drafts else []),
            *([judge] if judge else []),
            *(s.model for s in stages),
        ]:
            self.flight(m)

    # -- per question ------------------------------------------------------------------------------

    def allowed(self, item: Any) -> bool:
        """``item``: a batch's question ids (a tuple); whether any of them may still be sent."""
        return any(self._judged(q) for q in item)

    def _judged(self, qid: str) -> bool:
        allowed = self._allowed
        return allowed is None or qid in allowed

    def counted(self, item: Any, calls: int) -> None:
        self._calls_of[item] = self._calls_of.get(item, 0) + calls

    def stopped(self) -> None:
        self._drafted.set()

    def progress(self) -> str:
        """A progress line for the log: pairs drafted, questions sent on, calls made."""
        with self._lock:
            return (
                f"stream: {self._drafts_done} of {self.report.pairs} pairs drafted,"
                f" {self._caps.decided if self._caps else 0} questions through the caps,"
                f" {self.report.questions} sent on through the cascade and judges,"
                f" {self.report.calls} calls made, {time.monotonic() - self._started:.0f}s"
            )

    # -- the work ----------------------------------------------------------------------------------

    def start(self, items: Sequence[ablations.JudgeItem] = (), drafts: pa.Table | None = None) -> Prefetch:
        """Start drafting every pair (or, without drafts, chaining ``items``, whose rows are in the
        ``drafts`` table); returns at once."""
        self.batched("draft", self._draft)
        self.batched("cascade", self._cascade, workers_factor=CASCADE_WORKERS_FACTOR)
        self.batched("judges", self._judges)
        if self.drafts is not None:
            self.report.pairs = len(self.drafts.pairs)
            if not self.drafts.pairs:
                self._drafted_one(0)
            pairs = list(self.drafts.pairs)
            if self._caps is not None:  # the caps decide in their order: draft in it
                pairs.sort(key=lambda p: self._caps.first_position[p.id])
            for pair in pairs:
                self.put("draft", pair)
        else:
            self._drafted.set()
            if self.cascade is not None and items:
                if drafts is None:
                    raise ValueError("stream: questions to chain without their drafts table")
                for item in sorted(items, key=lambda it: it.id):
                    self.put("cascade", (item, drafts))
        self.watch()
        return self

    def _drafted_one(self, n: int) -> None:
        with self._lock:
            self._drafts_done += n
            done = self._drafts_done >= self.report.pairs
        if done:
            self.report.drafts_wall_s = time.monotonic() - self._started
            self._drafted.set()

    def _draft(self, pairs: list[generation.Pair]) -> None:
        """A batch of pairs: their draft calls, their checks, then the questions the caps now
        decide go on (each pair's as :class:`_CapsOrder` allows)."""
        d = self.drafts
        assert d is not None
        found: dict[tuple[str, str], list[Any]] = {}
        try:
            try:
                table, _ = d.run(pairs, self.flight(d.model), self.quiet)
            finally:
                self._drafted_one(len(pairs))
            if self._caps is not None and not self._halt.is_set():
                for c in self._candidates(table):
                    found.setdefault((c[0].a_id, c[0].b_id), []).append(c)
        finally:
            # whatever happened, the pairs are known now (a failure: no candidate), so the
            # questions waiting on their documents go on
            if self._caps is not None and not self._halt.is_set():
                for pair in pairs:
                    ids = [question_id(pair.a_id, pair.b_id, i) for i in range(d.per_pair)]
                    for item, drafts_table in self._caps.add(ids, found.get((pair.a_id, pair.b_id), [])):
                        self.put("cascade", (item, drafts_table))

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

    def _cascade(self, batch: list[tuple[ablations.JudgeItem, pa.Table]]) -> None:
        """A batch of questions the caps kept: the cascade; those it keeps go on to the judges."""
        assert self.cascade is not None and self._judge is not None
        items = sorted((it for it, _ in batch if self._judged(it.id)), key=lambda it: it.id)
        if not items:
            return
        self.item = tuple(it.id for it in items)
        with self._lock:
            self.report.questions += len(items)
            self._chained.update(it.id for it in items)
        self.raise_if_stopped()
        result = self.cascade(items, self.flight(self._judge), self.quiet)
        if not self.stages:
            return
        table_of = {it.id: t for it, t in batch}
        for q in sorted(q for q, o in result.outcome.items() if o.verdict == "kept"):
            self.put("judges", (q, table_of[q]))

    def _judges(self, batch: list[tuple[str, pa.Table]]) -> None:
        """A batch of questions the cascade kept: each judge after it, in :data:`CHAIN`'s order."""
        kept = sorted(q for q, _ in batch if self._judged(q))
        if not kept:
            return
        self.item = tuple(kept)
        self.raise_if_stopped()
        tables_of = list({id(t): t for _, t in batch}.values())  # a pair's drafts, or the whole table
        drafts = tables_of[0] if len(tables_of) == 1 else pa.concat_tables(tables_of)
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
                store=store,  # type: ignore[arg-type]  # a TableReader over the batch's tables
                partition=self.partition,
                recipe=s.recipe,
                config=s.config,
                model=self.flight(s.model),
                template=s.template,
                log=self.quiet,  # type: ignore[arg-type]
            )
            tables[s.stage.name] = s.stage.judge(call).table

    # -- what the stages call ----------------------------------------------------------------------

    def wait_drafts(self, log: Any = None) -> None:
        """Block until every pair's draft call has answered (or failed); progress in the log."""
        self.wait(self._drafted, log=log)

    def restrict(self, ids: set[str]) -> None:
        """Judge only ``ids`` from now on: calls in line for other questions are not sent."""
        with self._lock:
            self._allowed = set(ids)

    def join(self, every_s: float | None = None, log: Any = None) -> StreamReport:
        """Wait for every call in line; the report, with what was sent for questions the stage
        does not judge (:meth:`restrict`)."""
        report = super().join(log=log) if every_s is None else super().join(every_s, log)
        allowed = self._allowed
        with self._lock:
            if allowed is not None:
                # a batch's calls are not split by question: all count when one was not judged
                report.speculative_calls = sum(
                    n for batch, n in self._calls_of.items() if any(q not in allowed for q in batch)
                )
                report.speculative_ids = self._chained - allowed
                report.cut = len(report.speculative_ids)
        return report


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
RUNNING: Registry[Prefetch] = Registry()


def register(run_id: str, partition: str, prefetch: Prefetch) -> None:
    RUNNING.register((run_id, partition), prefetch)


def running(run_id: str, partition: str) -> bool:
    """Whether this run's stream for ``partition`` is running in this process."""
    return RUNNING.running((run_id, partition))


def take(run_id: str, partition: str) -> Prefetch | None:
    """The prefetch this run started for ``partition`` in this process (removed), if any."""
    return RUNNING.take((run_id, partition))
