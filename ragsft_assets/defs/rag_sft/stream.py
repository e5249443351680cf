"""The rag_sft chain streamed example by example: its generator call, then its verdict judging.

Stage at a time, ``rag_responses`` sends every prompt's generator call as one batch, then
``rag_verdicts`` judges every response as another: the fleet idles at the generator batch's tail
(its slowest calls), while ``rag_responses`` writes and between the two steps. Here
``rag_responses`` starts a :class:`Prefetch` in the background: per prompt, its generator call
(the stage's own ``generate_stage`` on that one prompt) and, as soon as it answers, that example's
verdict judging (``judge_stage`` on that one example, under ``rag_verdicts``' own config): the
deterministic checks, then the factual, refusal or language judges it needs. ``rag_responses``
waits for the generator calls, then runs as before and reads them from the cache;
``rag_verdicts`` waits for the judges, then runs as before and reads its calls from the cache.

A call's cache key is its own request (messages, sampling, schema, template version), whatever
batch it goes in: ``judge_examples`` on one example sends exactly the requests it sends for that
example in the whole batch, and ``generate_responses`` on one prompt sends that prompt's request
when every prompt has one language (the batch's template version is its first prompt's; a mixed
batch does not stream). So every file, ledger row and cache entry is the stage-at-a-time run's, a
crash resumes from the cache, nothing is speculative (every example streamed is one the stage
judges) and a call that fails in the prefetch costs only time: the stage that needs it sends it.

What streams: both roles usable in the chain's ``stream`` mode (``defs/multihop/stream.py``'s
``usable``: ``auto`` = a cache on an HTTP backend, ``on`` = a cache), when this run materializes
``rag_verdicts``. The requests in flight, the fleet's window and one request sent once are the
multihop stream's (``Budget``, ``window_of``, ``in_flight``, ``SingleFlight``, ``_Metered``). The
prefetch lives in this process (the definitions run every job in-process), found by run id,
partition and chain (:func:`register`, :func:`take`); a prefetch whose run has ended stops.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.defs.multihop.stream import (
    POLL_S,
    PROGRESS_S,
    Budget,
    SingleFlight,
    _Metered,
    _QuietLog,
    window_of,
)
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.rag_sft.examples import RagPrompt

# (prompts, model, log) -> the generator's table for them (``rag_responses``' step on them)
GenerateFn = Callable[[Sequence[RagPrompt], ChatModel, Any], pa.Table]
# (their responses table, prompts, model, log) -> anything (``rag_verdicts``' step on them)
JudgeFn = Callable[[pa.Table, Sequence[RagPrompt], ChatModel, Any], Any]


@dataclass(slots=True)
class StreamReport:
    """What the prefetch did, for the metadata."""

    prompts: int = 0
    judged: int = 0  # examples whose verdict judging ran in the stream
    generated_wall_s: float = 0.0  # until every prompt's generator call had answered (or failed)
    wall_s: float = 0.0
    calls: int = 0  # requests the prefetch sent to a model (not served from the cache)
    failed: int = 0  # examples whose prefetch raised (their stages send the calls)
    errors: list[str] = field(default_factory=list)  # the first few failures, masked by the client
    stopped: str = ""  # why it stopped early, if it did

    def metadata(self) -> dict[str, Any]:
        return {
            "stream/prompts": self.prompts,
            "stream/judged": self.judged,
            "stream/generated_wall_s": round(self.generated_wall_s, 3),
            "stream/wall_s": round(self.wall_s, 3),
            "stream/calls": self.calls,
            "stream/failed": self.failed,
            **({"stream/stopped": self.stopped} if self.stopped else {}),
        }


class _Stopped(Exception):
    """The prefetch was stopped (its run ended, or its step was retried)."""


class Prefetch:
    """Prompt by prompt, in the background: the generator call, then the example's judging; the
    cache only.

    ``generate(prompts, model, log)``: ``rag_responses``' step on some prompts, its table;
    ``judge_examples(responses, prompts, model, log)``: ``rag_verdicts``' step on them (None: only
    the generator calls stream); ``limit``: requests in flight (``in_flight``); ``finished()``: True
    once the run that started it has ended (the prefetch then stops).
    """

    def __init__(
        self,
        *,
        prompts: Sequence[RagPrompt],
        generator: ChatModel,
        judge: ChatModel | None,
        generate: GenerateFn,
        judge_examples: JudgeFn | None,
        log: Any,
        limit: int,
        finished: Callable[[], bool] | None = None,
    ) -> None:
        self.prompts = sorted(prompts, key=lambda p: p.id)
        self.generate, self.judge_examples = generate, judge_examples
        self.log, self.finished = log, finished
        self.budget = Budget(limit)
        self.report = StreamReport(prompts=len(self.prompts))
        self._quiet = _QuietLog(log)
        self._lock = threading.RLock()  # progress() reads under it while join waits on _idle
        self._idle = threading.Condition(self._lock)
        self._halt = threading.Event()
        self._generated = threading.Event()
        self._left = len(self.prompts)
        self._started = time.monotonic()
        flights: dict[int, ChatModel] = {}
        for m in [generator, *([judge] if judge is not None and judge_examples is not None else [])]:
            if id(m) not in flights:
                m.model_identity()  # a lazily made client is made here, once, not by racing threads
                # in the order they ask (the multihop stream's default): judges of the first
                # examples go out between the later prompts' generator calls
                flights[id(m)] = SingleFlight(_Metered(m, self.budget, False, self))  # type: ignore[arg-type]
        self._generator = flights[id(generator)]
        self._judge = flights.get(id(judge)) if judge is not None else None
        self._pool = ThreadPoolExecutor(
            max_workers=int(self.budget.limit * 1.25) + 16, thread_name_prefix="ragsft-stream"
        )
        self._line: deque[RagPrompt] = deque()
        self._pending = 0  # examples not finished, in line or running
        self._running = 0
        self._joined = False

    # -- bookkeeping (``_Metered`` calls the first two) --------------------------------------------

    def count(self, calls: int) -> None:
        with self._lock:
            self.report.calls += calls

    def raise_if_stopped(self) -> None:
        if self._halt.is_set():
            raise _Stopped("stopped")

    def _tasks_cap(self) -> int:
        """Examples running at once: the budget's cap with room for those between calls (CPU), so
        the threads follow what the fleet takes, not the configured ceiling."""
        return int(self.budget.cap() * 1.25) + 16

    def _feed(self) -> None:
        with self._lock:
            while not self._halt.is_set() and self._line and self._running < self._tasks_cap():
                p = self._line.popleft()
                self._running += 1
                try:
                    self._pool.submit(self._guarded, p)
                except RuntimeError:  # the pool is shut down: the prefetch was stopped
                    self._running -= 1
                    self._pending -= 1

    def _guarded(self, p: RagPrompt) -> None:
        try:
            try:
                table = self.generate([p], self._generator, self._quiet)
            finally:
                self._generated_one()
            if self._judge is not None and self.judge_examples is not None:
                self.raise_if_stopped()
                self.judge_examples(table, [p], self._judge, self._quiet)
                with self._lock:
                    self.report.judged += 1
        except _Stopped:
            pass
        except Exception as exc:  # the prefetch only warms the cache: the stages redo what it did not
            with self._lock:
                self.report.failed += 1
                if len(self.report.errors) < 3:
                    self.report.errors.append(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            with self._lock:
                self._running -= 1
            self._feed()
            with self._idle:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def _generated_one(self) -> None:
        with self._lock:
            self._left -= 1
            done = self._left <= 0
        if done:
            self.report.generated_wall_s = time.monotonic() - self._started
            self._generated.set()

    # -- what the stages call ----------------------------------------------------------------------

    def start(self) -> Prefetch:
        """Put every prompt in line (by id); returns at once.

        Arrow's default allocator becomes the system's for the process, as the multihop stream's
        (mimalloc keeps about 1 MB per thread that allocated)."""
        if pa.default_memory_pool().backend_name != "system":
            pa.set_memory_pool(pa.system_memory_pool())
        with self._lock:
            self._line.extend(self.prompts)
            self._pending += len(self.prompts)
        if not self.prompts:
            self._generated.set()
        self._feed()
        if self.finished is not None:
            threading.Thread(target=self._watch_run, name="ragsft-stream-watch", daemon=True).start()
        return self

    def _watch_run(self) -> None:
        while not self._halt.wait(POLL_S) and not self._joined:
            try:
                ended = self.finished is not None and self.finished()
            except Exception:  # the instance went away with its run
                ended = True
            if ended:
                self.stop("its run ended")
                return

    def progress(self) -> str:
        with self._lock:
            return (
                f"stream: {self.report.prompts - self._left} of {self.report.prompts} prompts generated,"
                f" {self.report.judged} judged, {self.report.calls} calls made,"
                f" {time.monotonic() - self._started:.0f}s"
            )

    def wait_generated(self, every_s: float = PROGRESS_S, log: Any = None) -> None:
        """Block until every prompt's generator call has answered (or failed, or the prefetch
        stopped); a progress line every ``every_s`` seconds."""
        while not self._generated.wait(every_s):
            (log or self.log).info(self.progress())

    def join(self, every_s: float = PROGRESS_S, log: Any = None) -> StreamReport:
        """Wait for every example in line; returns the report (the pool is shut down)."""
        with self._idle:
            while self._pending > 0 and not self._halt.is_set():
                if not self._idle.wait(every_s):
                    (log or self.log).info(self.progress())
        self._joined = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.report.wall_s = time.monotonic() - self._started
        if self.report.failed:
            self.log.warning(
                f"stream: {self.report.failed} example(s) failed in the prefetch"
                f" ({'; '.join(self.report.errors)}); the stages send what it did not"
            )
        return self.report

    def stop(self, why: str) -> None:
        """Send nothing more (calls in flight finish); the pool winds down in the background."""
        if self._halt.is_set():
            return
        self.report.stopped = why
        self._halt.set()
        self._generated.set()
        with self._lock:
            self._pending -= len(self._line)
            self._line.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._idle:  # a join waiting returns
            self._idle.notify_all()


class _Responses:
    """A reader of the responses ``judge_stage`` judges (the rows of ``rag_responses``)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table:
        if asset != "rag_responses" or part is not None:
            raise KeyError(f"stream: the judging read {asset!r} (part {part!r}); it holds rag_responses only")
        return self.table

    def files(self, partition: str, asset: str) -> list[Path]:
        return [Path(asset)] if asset == "rag_responses" else []


# a stage's step, its recipe and its seed: ``step(reader, partition, recipe, prompts, model, seed,
# log)``, as the stage calls it (``steps.generate_stage``, ``steps.judge_stage``)
Step = tuple[Callable[..., Any], Any, int]


def stage_steps(partition: str, reader: Any, generate: Step, judge: Step) -> tuple[GenerateFn, JudgeFn]:
    """The two stages' own steps on a few prompts, as the prefetch calls them: ``generate`` under
    ``rag_responses``' recipe and seed (``reader``: its inputs), ``judge`` under ``rag_verdicts``'
    on the responses the generator just gave."""
    gen_step, gen_recipe, gen_seed = generate
    judge_step, judge_recipe, judge_seed = judge

    def run_generate(prompts: Sequence[RagPrompt], model: ChatModel, log: Any) -> pa.Table:
        return gen_step(reader, partition, gen_recipe, list(prompts), model, gen_seed, log).table

    def run_judge(responses: pa.Table, prompts: Sequence[RagPrompt], model: ChatModel, log: Any) -> Any:
        return judge_step(
            _Responses(responses), partition, judge_recipe, list(prompts), model, judge_seed, log
        )

    return run_generate, run_judge


def one_language(prompts: Sequence[RagPrompt]) -> str | None:
    """None when every prompt has one language, else why the generator calls cannot stream: the
    batch's template version is its first prompt's language's (``generate_responses``)."""
    langs = sorted({p.language for p in prompts})
    return None if len(langs) <= 1 else f"prompts in several languages ({', '.join(langs)})"


# (run id, partition, chain) -> the prefetch ``rag_responses`` started in this process
_RUNNING: dict[tuple[str, str, str], Prefetch] = {}
_RUNNING_LOCK = threading.Lock()


def register(run_id: str, partition: str, chain: str, prefetch: Prefetch) -> None:
    with _RUNNING_LOCK:
        old = _RUNNING.pop((run_id, partition, chain), None)
        _RUNNING[(run_id, partition, chain)] = prefetch
    if old is not None:  # a retried step: the earlier attempt's prefetch stops
        old.stop("its step was retried")


def take(run_id: str, partition: str, chain: str) -> Prefetch | None:
    """The prefetch this run started for ``partition`` and ``chain`` in this process (removed)."""
    with _RUNNING_LOCK:
        return _RUNNING.pop((run_id, partition, chain), None)
