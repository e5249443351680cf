"""What the background streams of a chain share (``defs/multihop/stream.py``,
``defs/rag_sft/stream.py``).

A stream runs items through the very functions the later stages run, each item on to its next
call as soon as its own answer comes, in a pool of threads, and only fills the content-addressed
LLM cache; the stages then run as before, stage at a time, and find their calls in the cache. This
module holds the parts that do not depend on the chain: which roles may stream (:func:`usable`),
how many requests it keeps in flight (:class:`Budget`, :func:`in_flight`), one request sent once
(:class:`SingleFlight`), the task lines and the thread cap (:class:`BackgroundStream`), and the
registry through which a later step of the same run finds the stream (:class:`Registry`).

Why threads are few and start slowly: the client's event loop shares the GIL with them; a
thousand threads made runnable at once starved it, and the fleet emptied for seconds (``bench
fleet``'s occupancy profile showed it). So the threads follow the tasks running (a cap that ramps
up), a budget release wakes only as many waiters as it frees, and the SQLite cache keeps a small
page cache per thread (``llm/cache.py``).

Why items go in small batches (:meth:`BackgroundStream.batched`): one task per item cost 5-6 ms
of this process's CPU per request (a thread, an HTTP batch, Arrow tables and cache lookups for
each item) against 2.4 stage at a time, more than one core at the cascade's request rate, and a
thread per item in flight held 2.3 GB. A line's few workers each take every item waiting, up to
a batch: while the stream keeps up, batches stay small (an item goes on at once); when items
pile up, batches grow and each costs less per item.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson
import pyarrow as pa

from ragsft_assets import heap
from ragsft_assets.llm.client import each_answer
from ragsft_assets.llm.types import BatchResult, ChatModel, ChatResult, Request

MODES = ("auto", "on", "off")
# ours: requests a stream keeps in flight when the role does not say (a model without a per-URL
# limit, as the test doubles); an HTTP role's is its window's ceiling times its URLs
IN_FLIGHT = 64
RAMP_PER_S = 256  # tasks a stream may add per second from its start (64 at once)
POLL_S = 1.0  # how often a stream looks whether its run has ended
# ours: how often a running stream gives the C heap's free pages back (heap.release_free_memory).
# The stream's threads free large blocks that glibc keeps: bench fleet at 20,000 pairs peaked at
# 2,424 MB resident with 1,304 MB of it free in the arenas
TRIM_EVERY_S = 5.0
# ours: a batched line's workers and the most items one takes (batched): workers x batch is about
# twice the requests in flight, so the fleet stays full while a batch waits for its slowest call
BATCH_ITEMS = 16
# ours: the most workers a batched line has, whatever its budget: 128 batches of up to 16 items
# fill a fleet of 1,024 slots with one-round batches (bench fleet's 256 slots with the cascade's);
# a thread costs memory, and at twice the slots (over) the lines had 1,024 workers
MAX_LINE_WORKERS = 128
PROGRESS_S = 30.0  # a progress line while a stage waits for the stream


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
                "stream='on' needs an LLM cache for every streamed role (the stream only fills the"
                " cache that the stages then read); set use_cache=true or stream='off'"
            )
        return None
    return None if cached_http(model) else "model without a cache on an HTTP backend"


def in_flight(model: Any) -> int:
    """Requests a stream keeps in flight for ``model``: twice an HTTP role's most in flight over
    its URLs (its window's ceiling, ``LLMResource.window_ceiling``, as it probes past
    ``concurrency``), else :data:`IN_FLIGHT`. Twice: the requests past the window wait in the
    client's line, so a freed slot is refilled at once, not when a worker has built its next
    batch (the client's own window still bounds what reaches a server). Twice was measured
    when a batch held its share until its slowest call answered (at exactly the ceiling, ``under``
    kept the fleet at about 0.58); each request now gives its share back as it answers
    (:class:`Metered`), and 1x has not been measured since. (Sizing it to the capacity the fleet
    was found to have moved peak RSS little: the memory was glibc's free pages, see ``heap``.)"""
    urls = getattr(model, "base_urls", None) or []
    ceiling = getattr(model, "window_ceiling", None)
    per_url = ceiling() if callable(ceiling) else getattr(model, "concurrency", None)
    if isinstance(per_url, int) and per_url > 0 and urls:
        return 2 * per_url * len(urls)
    return IN_FLIGHT


def op_config(run_config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The config a run gives op ``name`` (empty when none)."""
    return dict(((run_config.get("ops") or {}).get(name) or {}).get("config") or {})


def run_finished(context: Any) -> Callable[[], bool]:
    """A ``finished()`` for a stream a step of ``context``'s run starts: True once that run has
    ended (or is gone), so that a stream whose run failed elsewhere stops."""
    instance, run_id = context.instance, context.run_id

    def finished() -> bool:
        run = instance.get_run_by_id(run_id)
        return run is None or run.is_finished

    return finished


class QuietLog:
    """The stage functions' log inside a stream: per-batch info lines dropped (its batches are
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
    Two items can ask the same prompt (the cascade shares identical prompts between questions);
    the stage-at-a-time run sends it once, and so does the stream. ``chat`` is the protocol's own
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
    """A stream's requests in flight, at most ``limit``, in the order they ask. A release wakes as
    many waiters as it frees slots, not every thread."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.used = 0
        self._cond = threading.Condition(threading.Lock())

    def acquire(self, n: int) -> int:
        """Wait for ``n`` slots (at most ``limit``); returns how many were taken."""
        n = max(1, min(n, self.limit))
        with self._cond:
            while self.used + n > self.limit:
                self._cond.wait()
            self.used += n
            if self.used < self.limit:
                self._cond.notify(self.limit - self.used)
        return n

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify(self.limit - self.used)


class Stopped(Exception):
    """The stream was stopped (its run ended, its step was retried), or the item was cut."""


class _Holding:
    """A call's share of the budget, given back request by request as they settle (thread-safe:
    they settle on whichever thread the backend reports answers on)."""

    def __init__(self, budget: Budget, held: int) -> None:
        self.budget, self.left = budget, held
        self._lock = threading.Lock()

    def settle(self, n: int) -> None:
        with self._lock:
            n = min(n, self.left)
            self.left -= n
        if n:
            self.budget.release(n)


class Metered(ChatModel):
    """A model's calls through a stream's :class:`Budget`, each counted by the stream. A request
    holds its budget while it is in flight, not until its call's slowest request answers
    (``llm.client.each_answer``): a batch of 16 waiting on one straggler held 16 slots, and the
    fleet ran at 0.8 in ``bench fleet``'s cascade phase with its budget all held."""

    def __init__(self, model: ChatModel, stream: BackgroundStream[Any]) -> None:
        self.model, self.stream = model, stream

    def model_identity(self) -> dict[str, str]:
        return self.model.model_identity()

    def run(self, requests: Sequence[Request], *, template_version: str = "", log: Any = None) -> BatchResult:
        self.stream.raise_if_stopped()
        holding = _Holding(self.stream.budget, self.stream.budget.acquire(len(requests)))
        try:
            self.stream.raise_if_stopped()  # it may have stopped while this call waited its turn
            with each_answer(holding.settle):
                batch = self.model.run(requests, template_version=template_version, log=log)
        finally:
            holding.settle(holding.left)
        self.stream.count(batch.stats.calls)
        return batch


@dataclass(slots=True)
class _Batching:
    """A batched line: its function, the most items a batch takes, its workers and their items."""

    fn: Callable[[list[Any]], None]
    size: int
    workers: int
    items: deque[Any] = field(default_factory=deque)
    active: int = 0  # workers in line or running


@dataclass(slots=True)
class StreamCounts:
    """What every stream reports: its calls, failures and why it stopped early."""

    wall_s: float = 0.0
    calls: int = 0  # requests the stream's calls sent to a model (not served from the cache)
    failed: int = 0  # items whose task raised (their stages send the calls)
    errors: list[str] = field(default_factory=list)  # the first few failures, masked by the client
    stopped: str = ""  # why it stopped early, if it did


ReportT = TypeVar("ReportT", bound=StreamCounts)


class BackgroundStream(Generic[ReportT]):
    """Tasks in named lines (served in ``lines``' order), run in one pool of threads, at most
    :meth:`tasks_cap` at once; every model call through one :class:`Budget` (``limit`` requests
    in flight) and :class:`SingleFlight` (:meth:`flight`). ``finished()``: True once the run that
    started it has ended (it then stops). Subclasses make their lines batched (:meth:`batched`),
    put items in them (:meth:`put`), say how far they are (:meth:`progress`) and may refuse an
    item's calls (:meth:`allowed`)."""

    def __init__(
        self,
        report: ReportT,
        *,
        lines: Sequence[str],
        log: Any,
        limit: int,
        finished: Callable[[], bool] | None = None,
        noun: str = "item",
    ) -> None:
        self.report, self.log, self.finished, self.noun = report, log, finished, noun
        self.budget = Budget(limit)
        self.quiet = QuietLog(log)
        self._order = tuple(lines)
        self._lines: dict[str, deque[tuple[Callable[..., None], tuple[Any, ...]]]] = {
            k: deque() for k in self._order
        }
        self._lock = threading.RLock()  # progress() reads under it while join waits on _idle
        self._idle = threading.Condition(self._lock)
        self._halt = threading.Event()  # stopped early: send nothing more
        self.trims, self.trim_s = 0, 0.0  # heap trims while it ran, and their seconds (TRIM_EVERY_S)
        self._pending = 0  # tasks not finished, in line or running
        self._running = 0
        self._joined = False
        self._started = time.monotonic()
        self._local = threading.local()  # the item a thread works on (``item``)
        self._flights: dict[int, ChatModel] = {}
        self._batches: dict[str, _Batching] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=int(self.budget.limit * 1.25) + 16, thread_name_prefix="ragsft-stream"
        )
        # mimalloc keeps about 1 MB per thread that allocated (1,000 threads held 1.16 GB against
        # 0.16 GB with the system allocator): Arrow's default becomes the system's for the process
        if pa.default_memory_pool().backend_name != "system":
            pa.set_memory_pool(pa.system_memory_pool())

    # -- what subclasses use -----------------------------------------------------------------------

    def flight(self, model: ChatModel) -> ChatModel:
        """``model`` as the stream's tasks call it: metered, each request in flight once."""
        if id(model) not in self._flights:
            model.model_identity()  # a lazily made client is made here, once, not by racing threads
            self._flights[id(model)] = SingleFlight(Metered(model, self))
        return self._flights[id(model)]

    @property
    def item(self) -> Hashable | None:
        """The item this thread's task works on (its calls are counted and cut by it)."""
        return getattr(self._local, "item", None)

    @item.setter
    def item(self, value: Hashable | None) -> None:
        self._local.item = value

    def allowed(self, item: Hashable) -> bool:
        """Whether ``item``'s calls may still be sent (a subclass cuts items the stage will not see)."""
        return True

    def counted(self, item: Hashable, calls: int) -> None:
        """``calls`` sent for ``item`` (a subclass keeps them per item)."""

    def batched(
        self, line: str, fn: Callable[[list[Any]], None], items: int = BATCH_ITEMS, workers_factor: int = 1
    ) -> None:
        """Make ``line`` a batched line: :meth:`put` items in it and ``fn`` runs on lists of them,
        at most ``items`` each (and no more than the requests in flight), in at most
        ``max(4, 2 x workers_factor x limit / items)`` tasks at once, and no more than
        :data:`MAX_LINE_WORKERS` (a limit set far past the fleet's slots then costs no memory).
        ``workers_factor`` > 1 for a line whose batch makes rounds of calls one after another on
        fewer and fewer of its items (a funnel), each round waiting for its slowest answer: such a
        batch has few requests in flight on average, so the line needs more workers to keep the
        budget's in flight."""
        size = max(1, min(items, self.budget.limit))
        workers = max(4, min(MAX_LINE_WORKERS, 2 * workers_factor * self.budget.limit // size))
        self._batches[line] = _Batching(fn, size, workers)

    def put(self, line: str, item: Any) -> None:
        """Put ``item`` in batched ``line``: a worker of the line takes it with every item waiting
        (up to the batch); a worker is started when the line has fewer than its workers and no
        earlier line has items waiting (earlier lines go first)."""
        b = self._batches[line]
        with self._lock:
            if self._halt.is_set():
                return
            b.items.append(item)
            self._pending += 1
            self._start(line, 1)
        self._feed()

    def _earlier_waiting(self, line: str) -> bool:
        for k in self._order:
            if k == line:
                return False
            if self._lines[k] or (k in self._batches and self._batches[k].items):
                return True
        return False

    def _start(self, line: str, n: int) -> None:
        """Up to ``n`` more workers for batched ``line`` (under the lock)."""
        b = self._batches[line]
        while n > 0 and b.items and b.active < b.workers and not self._earlier_waiting(line):
            b.active += 1
            self._pending += 1
            self._lines[line].append((self._drain, (line,)))
            n -= 1

    def _drain(self, line: str) -> None:
        """One batch of ``line``: every item waiting, up to the batch; then the worker goes back in
        line while items wait, or ends. A worker whose earlier lines have items waiting takes
        nothing and ends: the earlier line starts it again once its own items are all taken."""
        b = self._batches[line]
        with self._lock:
            if self._earlier_waiting(line):
                taken: list[Any] = []
            else:
                taken = [b.items.popleft() for _ in range(min(b.size, len(b.items)))]
                if not b.items:  # all taken: the later lines' turn (drafts first, then the rest)
                    later = self._order[self._order.index(line) + 1 :]
                    for k in later:
                        if k in self._batches:
                            self._start(k, -(-len(self._batches[k].items) // self._batches[k].size))
        try:
            if taken and not self._halt.is_set():
                b.fn(taken)
        finally:
            with self._lock:
                if b.items and not self._halt.is_set() and not self._earlier_waiting(line):
                    self._pending += 1
                    self._lines[line].append((self._drain, (line,)))
                else:
                    b.active -= 1
            with self._idle:
                self._pending -= len(taken)
                if self._pending == 0:
                    self._idle.notify_all()

    def progress(self) -> str:  # pragma: no cover - every subclass says its own
        raise NotImplementedError

    def watch(self) -> None:
        """Stop when the run that started the stream has ended (``finished``), and give the C
        heap's free pages back every :data:`TRIM_EVERY_S` while it runs."""
        threading.Thread(target=self._watch_run, name="ragsft-stream-watch", daemon=True).start()

    # -- what the metered calls use ----------------------------------------------------------------

    def count(self, calls: int) -> None:
        item = self.item
        with self._lock:
            self.report.calls += calls
            if item is not None:
                self.counted(item, calls)

    def raise_if_stopped(self) -> None:
        if self._halt.is_set():
            raise Stopped("stopped")
        item = self.item
        if item is not None and not self.allowed(item):
            raise Stopped("cut")

    # -- the lines ---------------------------------------------------------------------------------

    def tasks_cap(self) -> int:
        """Tasks running at once: the budget with room for those between calls (CPU), reached in
        a ramp (:data:`RAMP_PER_S`)."""
        ramp = 64 + int((time.monotonic() - self._started) * RAMP_PER_S)
        return min(int(self.budget.limit * 1.25) + 16, ramp)

    def _feed(self) -> None:
        with self._lock:
            while not self._halt.is_set() and self._running < self.tasks_cap():
                line = next((self._lines[k] for k in self._order if self._lines[k]), None)
                if line is None:
                    return
                fn, args = line.popleft()
                self._running += 1
                try:
                    self._pool.submit(self._guarded, fn, *args)
                except RuntimeError:  # the pool is shut down: the stream was stopped
                    self._running -= 1
                    self._pending -= 1

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Stopped:
            pass
        except Exception as exc:  # a stream only warms the cache: the stages redo what it did not
            with self._lock:
                self.report.failed += 1
                if len(self.report.errors) < 3:
                    self.report.errors.append(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self.item = None
            with self._lock:
                self._running -= 1
            self._feed()
            with self._idle:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def _watch_run(self) -> None:
        trimmed = time.monotonic()
        while not self._halt.wait(POLL_S) and not self._joined:
            if time.monotonic() - trimmed >= TRIM_EVERY_S:
                t0 = time.monotonic()
                heap.release_free_memory()
                trimmed = time.monotonic()
                self.trims += 1
                self.trim_s += trimmed - t0
            try:
                ended = self.finished is not None and self.finished()
            except Exception:
                # an instance this thread cannot read (an in-memory one, bound to the run's thread):
                # not a sign the run ended. Stopping here once cut a live stream short under load;
                # the stream then only runs to its end unwatched
                ended = False
            if ended:
                self.stop("its run ended")
                return

    # -- what the stages call ----------------------------------------------------------------------

    def wait(self, event: threading.Event, every_s: float = PROGRESS_S, log: Any = None) -> None:
        """Block until ``event`` is set (or the stream stopped); a progress line every ``every_s``."""
        while not event.wait(every_s) and not self._halt.is_set():
            (log or self.log).info(self.progress())

    def join(self, every_s: float = PROGRESS_S, log: Any = None) -> ReportT:
        """Wait for every task in line; returns the report (the pool is shut down)."""
        with self._idle:
            while self._pending > 0 and not self._halt.is_set():
                if not self._idle.wait(every_s):
                    (log or self.log).info(self.progress())
        self._joined = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.report.wall_s = time.monotonic() - self._started
        heap.release_free_memory()  # what the stream's threads freed, before the stages go on
        self.log.debug(f"stream: {self.trims} heap trims while it ran, {self.trim_s:.2f}s in all")
        if self.report.failed:
            self.log.warning(
                f"stream: {self.report.failed} {self.noun}(s) failed in the stream"
                f" ({'; '.join(self.report.errors)}); the stages send what it did not"
            )
        return self.report

    def stop(self, why: str) -> None:
        """Send nothing more (calls in flight finish); the pool winds down in the background."""
        if self._halt.is_set():
            return
        self.report.stopped = why
        self._halt.set()
        self.stopped()
        with self._lock:
            for line in self._lines.values():
                self._pending -= len(line)
                line.clear()
            for b in self._batches.values():
                self._pending -= len(b.items)
                b.items.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._idle:  # a join waiting returns
            self._idle.notify_all()

    def stopped(self) -> None:
        """What a subclass releases when the stream stops (events its stages wait on)."""


StreamT = TypeVar("StreamT", bound=BackgroundStream[Any])


class Registry(Generic[StreamT]):
    """The streams running in this process, by key (run id, partition, ...): a later step of the
    same run finds the one an earlier step started."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, ...], StreamT] = {}
        self._lock = threading.Lock()

    def register(self, key: tuple[str, ...], stream: StreamT) -> None:
        with self._lock:
            old = self._running.pop(key, None)
            self._running[key] = stream
        if old is not None:  # a retried step: the earlier attempt's stream stops
            old.stop("its step was retried")

    def running(self, key: tuple[str, ...]) -> bool:
        with self._lock:
            return key in self._running

    def take(self, key: tuple[str, ...]) -> StreamT | None:
        """The stream registered under ``key`` (removed), if any."""
        with self._lock:
            return self._running.pop(key, None)
