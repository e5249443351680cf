"""The rag_sft chain streamed in small batches: the generator calls, then the verdict judging.

Stage at a time, ``rag_responses`` sends every prompt's generator call as one batch, then
``rag_verdicts`` judges every response as another: the fleet idles at the generator batch's tail
(its slowest calls), while ``rag_responses`` writes and between the two steps. Here
``rag_responses`` starts a :class:`Prefetch` in the background: per prompt, its generator call
(the stage's own ``generate_stage`` on a small batch of prompts: every prompt waiting, up to 16,
``BackgroundStream.batched``) and, as soon as they answer, those examples' verdict judging
(``judge_stage`` on them, under ``rag_verdicts``' own config): the
deterministic checks, then the factual, refusal or language judges it needs. ``rag_responses``
waits for the generator calls, then runs as before and reads them from the cache;
``rag_verdicts`` waits for the judges, then runs as before and reads its calls from the cache.

A call's cache key is its own request (messages, sampling, schema, template version), whatever
batch it goes in: ``judge_examples`` on some examples sends exactly the requests it sends for them
in the whole batch, and ``generate_responses`` on some prompts sends their requests
when every prompt has one language (the batch's template version is its first prompt's; a mixed
batch does not stream). So every file, ledger row and cache entry is the stage-at-a-time run's, a
crash resumes from the cache, nothing is speculative (every example streamed is one the stage
judges) and a call that fails in the prefetch costs only time: the stage that needs it sends it.

What streams: both roles usable in the chain's ``stream`` mode (``defs/multihop/stream.py``'s
``usable``: ``auto`` = a cache on an HTTP backend, ``on`` = a cache), when this run materializes
``rag_verdicts``. The requests in flight, the threads and one request sent once are the
streams' (``defs/streaming.py``: ``Budget``, ``in_flight``, ``SingleFlight``, ``BackgroundStream``). The
prefetch lives in this process (the definitions run every job in-process), found by run id,
partition and chain (:func:`register`, :func:`take`); a prefetch whose run has ended stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.defs.streaming import BackgroundStream, Registry, StreamCounts
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.rag_sft.examples import RagPrompt

# (prompts, model, log) -> the generator's table for them (``rag_responses``' step on them)
GenerateFn = Callable[[Sequence[RagPrompt], ChatModel, Any], pa.Table]
# (their responses table, prompts, model, log) -> anything (``rag_verdicts``' step on them)
JudgeFn = Callable[[pa.Table, Sequence[RagPrompt], ChatModel, Any], Any]


@dataclass(slots=True)
class StreamReport(StreamCounts):
    """What the prefetch did, for the metadata."""

    prompts: int = 0
    judged: int = 0  # examples whose verdict judging ran in the stream
    generated_wall_s: float = 0.0  # until every prompt's generator call had answered (or failed)

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


class Prefetch(BackgroundStream[StreamReport]):
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
        super().__init__(
            StreamReport(prompts=len(self.prompts)),
            lines=("example",),
            log=log,
            limit=limit,
            finished=finished,
            noun="example",
        )
        self.generate, self.judge_examples = generate, judge_examples
        self._generated = threading.Event()
        self._left = len(self.prompts)
        self._generator = self.flight(generator)
        self._judge = self.flight(judge) if judge is not None and judge_examples is not None else None

    def _examples(self, prompts: list[RagPrompt]) -> None:
        """A batch of prompts: their generator calls, then those examples' verdict judging."""
        try:
            table = self.generate(prompts, self._generator, self.quiet)
        finally:
            self._generated_some(len(prompts))
        if self._judge is not None and self.judge_examples is not None:
            self.raise_if_stopped()
            self.judge_examples(table, prompts, self._judge, self.quiet)
            with self._lock:
                self.report.judged += len(prompts)

    def _generated_some(self, n: int) -> None:
        with self._lock:
            self._left -= n
            done = self._left <= 0
        if done:
            self.report.generated_wall_s = time.monotonic() - self._started
            self._generated.set()

    def stopped(self) -> None:
        self._generated.set()

    def progress(self) -> str:
        with self._lock:
            return (
                f"stream: {self.report.prompts - self._left} of {self.report.prompts} prompts generated,"
                f" {self.report.judged} judged, {self.report.calls} calls made,"
                f" {time.monotonic() - self._started:.0f}s"
            )

    # -- what the stages call ----------------------------------------------------------------------

    def start(self) -> Prefetch:
        """Put every prompt in line (by id); returns at once."""
        if not self.prompts:
            self._generated.set()
        # two rounds per batch (the generator's, then the judges' on what it answered): twice the
        # workers of a one-round line keep the budget's requests in flight (``workers_factor``)
        self.batched("example", self._examples, workers_factor=2)
        for p in self.prompts:
            self.put("example", p)
        self.watch()
        return self

    def wait_generated(self, log: Any = None) -> None:
        """Block until every prompt's generator call has answered (or failed, or the prefetch
        stopped); progress in the log."""
        self.wait(self._generated, log=log)


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
RUNNING: Registry[Prefetch] = Registry()


def register(run_id: str, partition: str, chain: str, prefetch: Prefetch) -> None:
    RUNNING.register((run_id, partition, chain), prefetch)


def take(run_id: str, partition: str, chain: str) -> Prefetch | None:
    """The prefetch this run started for ``partition``'s ``chain`` in this process (removed), if any."""
    return RUNNING.take((run_id, partition, chain))
