"""Any OpenAI-compatible server: a ``vllm serve`` fleet or a provider, at fleet speed.

One backend per role (the engine registry keys it by role): its own event loop in a daemon
thread, one aiohttp connection pool, and its own in-flight limit **per base URL**
(``concurrency``, default 128: one vLLM replica batches about that many sequences).

- Capacity probing: while requests wait in line and no 429 says a URL is full, its window grows
  past ``concurrency`` (doubling per round trip) up to ``max_concurrency`` (None here: no
  growth, ``concurrency`` is a hard limit; ``LLMResource`` defaults it to 2 x ``concurrency``).
  A client configured below a gateway's real capacity so finds it within a round trip or two.
- Dispatch: each attempt goes to the URL with the fewest requests outstanding (a retry avoids
  the URL that just failed when another has room). Requests are handed to the loop as slots
  free up, so a batch of 400,000 holds no more tasks than the fleet can run.
- Overload, a full server: a 429 (or a 503 with ``Retry-After``) that comes while the URL still
  runs others of our requests says the server is full at that many; the URL's limit becomes
  that count (capacity probing, no pause: each of our answers frees a slot there, and the
  refused request waits for one), holds there for ``PROBE_HOLD_ANSWERS`` answers, then grows by
  one per round trip, so a full gateway refuses about one attempt per 40 + window (under 2.5%).
- Overload, a rate limit: a 429 (or 503 + ``Retry-After``) with nothing else of ours running
  there pauses that URL for the ``Retry-After`` seconds and halves its in-flight limit (once per
  round trip: answers to requests sent before the cut do not cut again); answers raise it again
  by one per round trip (AIMD) up to ``concurrency`` (past it only while requests wait in line),
  so a provider's rate limit never turns into a retry storm. A 429 does not use up a request's
  ``max_retries`` (it is bounded apart).
- Overload by our own other roles: each role has its own window, but the process counts its
  requests in flight per URL over every role (``_HELD``). A 429 while other roles of this
  process hold requests at that URL says the server is full of our own work, not that this role
  sends too much: the window drops to what this role runs there (at least 1, the URL waiting its
  ``Retry-After`` when that is none) and holds for one round trip of its own answers, but its
  slow-start threshold stays, so the window doubles back per round trip once the other roles'
  work drains. (Halving per round trip instead, a judge streaming behind the drafts fell to one
  request and then grew by one per round trip: a minute of near-empty fleet after the drafts.)
  The process also keeps, per URL, how many of its requests (every role's) the last 429 found it
  full at: while a role has requests in line, each answer raises its window at once by half the
  room the other roles have left there, rather than doubling per round trip (10 s of a
  half-empty fleet as one role took over from another).
- Failures (5xx, timeouts, resets, malformed bodies) are retried with exponential backoff and
  jitter, at most ``max_retries`` times per request, then the request ends with an ``error``
  result: every request ends with a result. A URL failing ``fail_threshold`` times in a row is
  set aside for a cool-down (``cooldown_s``, doubling while it keeps failing) and then probed
  with one request; it comes back at one request in flight, doubling per round trip (slow
  start). The last URL that answers is never set aside, so a failing URL never fails a run
  while others answer.
- Stragglers: once a batch has 50 answers, a first attempt running 5 x their p99 (at least 2 s,
  under ``timeout_s``) is cut, which makes vLLM abort it, and sent again with the full
  ``timeout_s``; it counts as a retry, not as a failure of the URL. A hung request then holds
  its batch seconds, not ``timeout_s``; a long real answer costs one extra attempt. The cut
  waits a few turns of the loop, each reading the sockets, and is dropped once the answer's
  first bytes have come; its last turns wait while bytes wait on the request's own socket (a
  turn's callbacks run before its I/O): an answer that arrived with the deadline, or during the
  cut's turns, is kept. While the fleet
  waits on its last answers (``_Fleet.in_tail``) the cut is 2 x the p99.
- A dead fleet: once every URL has kept failing for ``dead_after_s`` (default
  ``max(2 x timeout_s, 60 s)``) with no answer in between, the batch stops with ``FleetDown``
  (requests in flight are abandoned); the requests answered before are reported, so the client
  has cached them and a rerun resumes. A hung or refusing fleet fails in bounded time, not after
  timeout x retries for every request.
- Identity: ``/v1/models`` is read from every URL (retrying transient failures) when the
  identity is first needed, i.e. before the first call. A model no URL serves, URLs that serve
  different weights (``root``) under one name, or no weights identity at all are errors at
  start. Weights ``unknown`` only when the user sets ``weights_id="unknown"``, and the log and
  the metadata say so.
- OpenAI reasoning models (``reasoning_model=True``): ``max_completion_tokens`` instead of
  ``max_tokens``, no ``temperature`` / ``top_p`` and no ``chat_template_kwargs``;
  ``reasoning_effort`` is sent when set.

The API key is read from the environment variable named ``api_key_env`` at each request and is
never logged, stored in errors, metadata or the cache key. Base URLs are only ever shown masked
(``ragsft_assets.masking``: user-info, credential query values), and every error text is masked.
A base URL may carry a query string (``?api-version=...``): endpoint paths go before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import random
import select
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
import orjson

from ragsft_assets.llm.backends.base import Completion, OnResult, Request, TransportStats
from ragsft_assets.masking import mask_text, mask_url

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 600.0  # a server asking for more is believed only this far
UNKNOWN_WEIGHTS = "unknown"
# ours: a hung request (a stuck sequence, a lost answer) would hold its batch for the whole
# timeout_s. A first attempt that runs STRAGGLER_FACTOR x the p99 of its batch's answers so far
# is cut (closing the connection makes vLLM abort it) and sent again with the full timeout_s, so
# a long but real answer costs one extra attempt, never a failure.
STRAGGLER_FACTOR = 5.0
STRAGGLER_MIN_S = 2.0
# ours: turns of the event loop between a straggler's deadline and its cut, each polling the
# sockets; the cut is dropped once the answer's first bytes are read. Cutting at the deadline
# itself dropped answers that came in the same turn (a loop held by the GIL sees both at once:
# bench fleet's duplicated=2 at 20,000 pairs over). One turn sufficed in the test (the loop held
# over both), under uvloop (timers before I/O) and asyncio (after); three leave a margin.
CUT_DRAIN_ITERATIONS = 3
# ours: turns more a cut may wait while its answer is arriving (bytes on its socket, or read and
# not yet taken by the task): bounded, so a connection that only ever trickles is still cut
CUT_ARRIVING_TURNS = 16
# ours: in a tail (nothing waits in line and this process's requests fill under TAIL_SHARE of the
# URLs' windows, every role together) the fleet idles until the last answers come: a first attempt
# is cut at TAIL_STRAGGLER_FACTOR x the p99 instead. At the end of bench fleet's streams, one stall
# held an idle fleet for 10-20 s (5 x a p99 measured at load).
TAIL_STRAGGLER_FACTOR = 2.0
TAIL_SHARE = 0.125
STRAGGLER_SAMPLES = 50
# ours: a batch with fewer answers than that (a small batch: a streamed chunk's round) takes the p99
# from the backend's recent answers to requests of the same max_tokens (the same task, as a rule).
STRAGGLER_HISTORY = 4096
# ours: a 429 while ours run there (the server full at what ran) holds the window at that count for
# this many answers before it grows past it again, by one per round trip: one refusal per about
# 40 + window attempts in steady state, under 2.5% at any window (issue #36: "no more than about
# 5% of attempts rejected in steady state"); a gateway whose capacity grows is still found.
PROBE_HOLD_ANSWERS = 40


class _Malformed(Exception):
    """A 2xx answer whose body is not what the endpoint promises."""


class GiveUp(Exception):
    """A request that used up its retries (the message says after how many attempts and why)."""


class Refused(Exception):
    """A 4xx answer: the request itself is wrong and no retry can help."""


class ServedModelError(ValueError):
    """The fleet does not serve the configured model consistently (raised before any call)."""


class FleetDown(RuntimeError):
    """Every URL of a role kept failing for ``dead_after_s``: the batch stops (answers so far are kept)."""


def endpoint(base_url: str, path: str) -> str:
    """``path`` (``/chat/completions``) under ``base_url``, before its query string if it has one."""
    base, sep, query = base_url.partition("?")
    return f"{base.rstrip('/')}{path}{sep}{query}"


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries credentials before its host (``http://user:pass@host``)."""
    netloc = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    return "@" in netloc


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, min(float(value), MAX_RETRY_AFTER_S))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, min(when.timestamp() - time.time(), MAX_RETRY_AFTER_S))


_BATCH_DONE = object()  # what a batch's queue holds after its last answer


@dataclass(slots=True)
class _Url:
    """One base URL's slots and health, touched only from the backend's event loop."""

    url: str
    shown: str  # the URL as messages show it (masked)
    cap: int  # the configured in-flight limit (``concurrency``)
    limit: float  # the current (AIMD) limit, 1 <= limit <= ceiling
    ssthresh: float  # below it the limit grows by one per answer (slow start)
    ceiling: int = 0  # ``max_concurrency``: the window passes ``cap`` only while requests wait in line
    full_at: float = 0.0  # the window a 429 found the server full at ...
    hold: int = 0  # ... and the answers left before the window grows past it again
    outstanding: int = 0
    epoch: int = 0  # bumped at each cut; answers to requests sent before it do not cut again
    available_at: float = 0.0  # loop time before which nothing is sent (Retry-After, cool-down)
    fails: int = 0  # failures in a row
    cooldown: float = 0.0
    aside: bool = False  # set aside (or probing after the cool-down): one request at a time
    hits: int = 0
    failing_since: float | None = None  # send time of the first attempt of its failures in a row
    last_error: str = ""

    def room(self) -> int:
        return (1 if self.aside else max(1, int(self.limit))) - self.outstanding


class _Held:
    """This process's requests in flight per URL, every backend (role, event loop) together, and
    how many of them a URL was found to hold (its capacity for us, every role's requests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n: dict[str, int] = {}
        self._found: dict[str, int] = {}

    def add(self, url: str, n: int) -> None:
        with self._lock:
            self._n[url] = self._n.get(url, 0) + n

    def get(self, url: str) -> int:
        return self._n.get(url, 0)

    def full_at(self, url: str, n: int) -> None:
        """A 429 from ``url`` while ``n`` of our requests ran there: it holds that many (the last
        429 says; a capacity that grows is found by the windows' own growth)."""
        with self._lock:
            self._found[url] = max(0, n)

    def free(self, url: str) -> int | None:
        """Slots of ``url`` a 429 found and none of our roles uses now; None before any 429."""
        found = self._found.get(url)
        return None if found is None else found - self._n.get(url, 0)


_HELD = _Held()


class _Fleet:
    """Per-URL in-flight slots: least-outstanding choice, AIMD limits, cool-down of failing URLs."""

    def __init__(
        self,
        urls: Sequence[str],
        cap: int,
        cooldown_s: float,
        fail_threshold: int,
        cooldown_max_s: float,
        dead_after_s: float = float("inf"),
        ceiling: int | None = None,
    ) -> None:
        top = max(cap, ceiling or cap)  # slow start from cap to the ceiling, while requests wait in line
        self.urls = [_Url(u, mask_url(u), cap, float(cap), float(top), ceiling=top) for u in urls]
        self.cooldown_s = cooldown_s
        self.cooldown_max_s = max(cooldown_s, cooldown_max_s)
        self.fail_threshold = max(1, fail_threshold)
        self.dead_after_s = dead_after_s
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.set_asides = 0
        self.probed = 0  # 429s answered while ours ran there: the window was set to what ran
        self.dead = ""  # set once every URL kept failing for dead_after_s: why the fleet is down
        self._timer: asyncio.TimerHandle | None = None  # wakes the line when a pause ends

    def capacity(self) -> int:
        """The most requests in flight over every URL (their ceilings: pools and gates must allow it)."""
        return sum(u.ceiling for u in self.urls)

    def in_tail(self) -> bool:
        """Whether the fleet waits on its last answers: nothing in line, and this process's
        requests at these URLs (every role's) under ``TAIL_SHARE`` of their windows (loop only)."""
        if self.waiters:
            return False
        held = sum(_HELD.get(u.url) for u in self.urls)
        return held <= TAIL_SHARE * sum(max(1.0, u.limit) for u in self.urls)

    def _pick(self, now: float, avoid: _Url | None) -> _Url | None:
        best, best_key = None, None
        for u in self.urls:
            if u.available_at > now or u.room() <= 0:
                continue
            key = (u is avoid, u.outstanding, u.hits)
            if best_key is None or key < best_key:
                best, best_key = u, key
        return best

    async def acquire(self, avoid: _Url | None = None) -> _Url:
        """A slot on the best URL now, waiting (FIFO) while none has room or all are paused.

        A waiter sleeps until an answer, a grown window or the end of a pause wakes it (one timer
        for the earliest pause, not a timeout per waiter: with a thousand requests in line, a
        bounded wait each woke the loop a thousand times a second and took half its CPU)."""
        loop = asyncio.get_running_loop()
        queued = False
        while True:
            now = loop.time()
            if self.dead:
                raise FleetDown(self.dead)
            if not self.waiters or queued:
                u = self._pick(now, avoid)
                if u is not None:
                    u.outstanding += 1
                    u.hits += 1
                    _HELD.add(u.url, 1)
                    return u
            fut: asyncio.Future[None] = loop.create_future()
            if queued:
                self.waiters.appendleft(fut)  # keep its place in line
            else:
                self.waiters.append(fut)
                self.wake()  # a slot may be free already (a limit that grew): serve the line in order
            queued = True
            self._arm(loop, now)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self.wake()  # woken, then cancelled: the slot it was woken for goes to the next
                else:
                    with contextlib.suppress(ValueError):
                        self.waiters.remove(fut)
                raise

    def _arm(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """Wake the line when the earliest pause (a Retry-After, a cool-down) ends."""
        paused = [u.available_at for u in self.urls if u.available_at > now]
        if not paused:
            return
        at = min(paused) + 0.001
        if self._timer is not None:
            if self._timer.when() <= at:
                return  # an earlier (or the same) pause's end wakes the line first
            self._timer.cancel()
        self._timer = loop.call_at(at, self._paused_ended)

    def _paused_ended(self) -> None:
        self._timer = None
        self.wake()
        if self.waiters:  # still paused elsewhere (or nothing free yet): the next pause's end
            loop = asyncio.get_running_loop()
            self._arm(loop, loop.time())

    def release(self, u: _Url) -> None:
        u.outstanding -= 1
        _HELD.add(u.url, -1)
        self.wake()

    def wake(self) -> None:
        """Wake as many waiters as there are free slots on URLs that take requests now."""
        if not self.waiters:
            return
        now = asyncio.get_running_loop().time()
        free = sum(max(0, u.room()) for u in self.urls if u.available_at <= now)
        while free > 0 and self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                free -= 1

    def ok(self, u: _Url) -> None:
        u.fails = 0
        u.failing_since = None
        if u.aside:  # the probe answered: back in slow start towards the full limit
            u.aside, u.cooldown, u.limit, u.ssthresh = False, 0.0, 1.0, float(u.cap)
            log.info("%s answers again: back in service (slow start)", u.shown)
            return
        # Past the configured limit only while requests wait in line (the window is used), never
        # past the window a 429 found full while its hold lasts.
        top = float(u.ceiling if self.waiters else u.cap)
        free = _HELD.free(u.url) if self.waiters else None
        if free is not None and u.limit < min(top, u.outstanding + free // 2):
            # ours: the room a 429 found, which our other roles' work has since left (this role's
            # window was cut to what it ran while theirs filled the server). Doubling per round
            # trip from there, the fleet sat half empty for 10 s as the annotator took over from
            # the judge (bench fleet, 5,000 pairs over); the room is known, so the window takes
            # half of it per answer: two roles taking it at once (each on its own loop) fill it,
            # not twice over
            u.limit, u.hold = min(top, float(u.outstanding + free // 2)), 0
            return
        if u.hold > 0:
            u.hold -= 1
            top = min(top, max(u.full_at, 1.0))
        if u.limit < top:
            u.limit = min(top, u.limit + (1.0 if u.limit < u.ssthresh else 1.0 / u.limit))

    def pushback(self, u: _Url, epoch: int, wait_s: float | None, now: float) -> bool:
        """A 429 (or 503 + Retry-After) from ``u``, whose ``outstanding`` still counts the rejected
        request. Returns True when the window alone holds the retry back (no pause, no backoff).

        While the server still runs others of our requests, it is full at about that many: the
        window becomes exactly that count (capacity probing; it holds there for
        ``PROBE_HOLD_ANSWERS`` answers, then grows by one per round trip, so in steady state about
        one attempt per 40 + window is refused) and the URL is not paused,
        since each of our answers frees a slot there. With nothing of ours running (a rate limit,
        or a server full of other clients' work) the URL waits its ``Retry-After`` and the limit
        halves, once per round trip. While other roles of this process hold requests there, the
        server is full of our own work: the window drops to what this role runs (at least 1,
        waiting the ``Retry-After`` when that is none) and its slow-start threshold stays at
        least ``cap``, so it doubles back per round trip once their work drains.
        """
        held = u.outstanding - 1
        ours = _HELD.get(u.url)  # every role's requests there, this refused one included
        _HELD.full_at(u.url, ours - 1)
        if ours - u.outstanding > 0:  # other roles of this process fill it
            u.limit = max(1.0, min(u.limit, float(held)))
            u.ssthresh = max(u.ssthresh, float(u.cap))  # room again: slow start, not one per round trip
            u.full_at, u.hold = u.limit, held  # a round trip of its own answers, then slow start
            if held > 0:
                self.probed += 1
                return True
            if wait_s:
                u.available_at = max(u.available_at, now + wait_s)
            return False
        if held > 0:
            u.limit = max(1.0, min(u.limit, float(held)))
            u.ssthresh = u.limit  # from here additive: one more per round trip, after the hold
            u.full_at, u.hold = u.limit, PROBE_HOLD_ANSWERS
            self.probed += 1
            return True
        if wait_s:
            u.available_at = max(u.available_at, now + wait_s)
        if epoch == u.epoch:  # one cut per round trip, not one per answer of the same window
            u.ssthresh = max(1.0, u.limit / 2)
            u.limit = u.ssthresh
            u.epoch += 1
        return False

    def failure(self, u: _Url, now: float, sent: float | None = None, why: str = "") -> None:
        if u.failing_since is None:
            u.failing_since = now if sent is None else sent
        u.last_error = why or u.last_error
        self._check_dead(now)
        if u.aside and now < u.available_at:
            return  # an answer to a request sent before it was set aside: already counted
        u.fails += 1
        # In a row, and a fair share of what the URL holds: a new batch's first answers are its
        # fast failures (a 500, a reset), before any slow success, and say nothing of the URL.
        others = max(0, u.outstanding - 1)
        if not (u.aside or (u.fails >= self.fail_threshold and 4 * u.fails >= others)):
            return
        if not any(o is not u and not o.aside for o in self.urls):
            return  # the last URL in service is never set aside: its requests back off instead
        u.cooldown = min(self.cooldown_max_s, u.cooldown * 2 if u.cooldown else self.cooldown_s)
        u.available_at = max(u.available_at, now + u.cooldown)
        u.aside, u.fails = True, 0
        self.set_asides += 1
        log.warning("%s keeps failing: set aside for %.0fs, then probed", u.shown, u.cooldown)
        self.wake()

    def _check_dead(self, now: float) -> None:
        """Declare the fleet down once every URL has kept failing for ``dead_after_s``."""
        if self.dead or not all(
            u.failing_since is not None and now - u.failing_since >= self.dead_after_s for u in self.urls
        ):
            return
        errors = "; ".join(f"{u.shown}: {u.last_error or 'failing'}" for u in self.urls)
        self.dead = f"every URL has failed for {self.dead_after_s:.0f}s or more without an answer ({errors})"
        for fut in self.waiters:  # the line learns it at once, not at its next bounded wait
            if not fut.done():
                fut.set_result(None)


def _answer_arriving(task: asyncio.Task[Any], conn: Any) -> bool:
    """Whether the answer of ``task``'s request (on connection ``conn``) has begun to arrive:
    bytes wait on its socket, or they were read and ``task`` (not running now) is about to take
    them (what it awaits is done, read from the task's ``_fut_waiter``)."""
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is not None and waiter.done():
        return True
    transport = getattr(getattr(conn, "protocol", None), "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    # poll, not select: select takes descriptors under 1,024 only, and a run's roles hold
    # hundreds of connections each
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLIN)
        events = poller.poll(0)
    except (OSError, ValueError):  # closed meanwhile
        return False
    # what select counts as readable (bytes, an end, an error), not POLLNVAL (a closed descriptor)
    return any(ev & (select.POLLIN | select.POLLHUP | select.POLLERR) for _, ev in events)


def _connector_class(aiohttp: Any) -> Any:
    """A ``TCPConnector`` that records each task's connection (``conn_of``): a straggler cut looks
    at the socket of the request it would cut."""

    class _Connector(aiohttp.TCPConnector):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, conn_of: dict[Any, Any], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn_of = conn_of

        async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
            conn = await super().connect(req, traces, timeout)
            task = asyncio.current_task()
            if task is not None:
                self.conn_of[task] = conn
            return conn

    return _Connector


class _Latencies:
    """Answer latencies with a p99 re-sorted now and then, not per answer (loop only)."""

    def __init__(self, maxlen: int | None = None) -> None:
        self.values: deque[float] = deque(maxlen=maxlen)
        self.added = 0
        self._p99 = 0.0
        self._p99_at = -1

    def add(self, latency: float) -> None:
        self.values.append(latency)
        self.added += 1

    def p99(self) -> float:
        if self._p99_at < 0 or self.added >= self._p99_at + max(32, len(self.values) // 8):
            ordered = sorted(self.values)
            self._p99, self._p99_at = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], self.added
        return self._p99


class _Deadline:
    """When a first attempt, sent at ``sent``, straggles: ``on_fire`` runs then, once (a timer
    handle and a callback, which the call's ticker moves as answers come)."""

    __slots__ = ("sent", "_on_fire", "_loop", "_when", "_timer", "_fired")

    def __init__(self, loop: asyncio.AbstractEventLoop, sent: float, on_fire: Callable[[], None]) -> None:
        self.sent = sent
        self._on_fire = on_fire
        self._loop = loop
        self._when: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._fired = False

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        return self._fired

    def reschedule(self, when: float) -> None:
        """Move the deadline (not once it has passed)."""
        if self._fired:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._when = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if not self._fired:
            self._fired = True
            self._on_fire()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Call:
    """Transport numbers of one ``generate`` / ``embed`` call (touched only from the loop)."""

    def __init__(self, history: _Latencies | None = None, in_tail: Callable[[], bool] | None = None) -> None:
        self.stats = TransportStats()
        self.in_tail = in_tail  # whether the fleet waits on its last answers (a shorter cut)
        self.in_flight = 0
        self.first = self.last = None  # type: float | None
        self.latencies = _Latencies()  # of this call's answers, for the straggler deadline
        self.history = history  # the backend's recent answers of the same kind (small batches)

        self.watched: set[_Deadline] = set()  # of first attempts in flight
        self._ticker: asyncio.Task[None] | None = None
        self._timeout_s = 0.0

    def answered(self, latency: float) -> None:
        self.latencies.add(latency)
        if self.history is not None:
            self.history.add(latency)

    def watch(self, deadline: _Deadline, timeout_s: float) -> _Deadline:
        """Put a first attempt under the straggler deadline, at ``sent + straggler_s`` now or, when
        it was sent before the batch had its 50 answers, once they come (a ticker moves it)."""
        self.watched.add(deadline)
        self._timeout_s = timeout_s
        cut = self.straggler_s(timeout_s)
        if cut is not None:
            deadline.reschedule(deadline.sent + cut)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())
        return deadline

    def unwatch(self, deadline: _Deadline) -> None:
        self.watched.discard(deadline)
        deadline.close()

    async def _tick(self) -> None:
        while self.watched:
            await asyncio.sleep(0.5)
            cut = self.straggler_s(self._timeout_s)
            if cut is None:
                continue
            for d in list(self.watched):
                when = d.when()
                if d.expired() or (when is not None and when <= d.sent + cut):
                    continue  # passed already (a late loop under load): its attempt is being cut
                d.reschedule(d.sent + cut)

    def straggler_s(self, timeout_s: float) -> float | None:
        """How long a first attempt may run before it is cut and sent again: ``STRAGGLER_FACTOR``
        x the p99 of this call's answers so far (``TAIL_STRAGGLER_FACTOR`` x while the fleet is in
        a tail, :meth:`_Fleet.in_tail`; at least ``STRAGGLER_MIN_S``), once ``STRAGGLER_SAMPLES``
        answers have come (before that, of the backend's recent answers of the same kind, when it
        has that many); None before, or when that is not under ``timeout_s``. One call holds one
        task's requests, so its answers say how long they take."""
        source = self.latencies
        if len(source.values) < STRAGGLER_SAMPLES:
            if self.history is None or len(self.history.values) < STRAGGLER_SAMPLES:
                return None
            source = self.history
        tail = self.in_tail is not None and self.in_tail()
        cut = max(STRAGGLER_MIN_S, (TAIL_STRAGGLER_FACTOR if tail else STRAGGLER_FACTOR) * source.p99())
        return cut if cut < timeout_s else None

    def enter(self, now: float) -> None:
        self.in_flight += 1
        self.stats.attempts += 1
        self.stats.in_flight_max = max(self.stats.in_flight_max, self.in_flight)
        if self.first is None:
            self.first = now

    def leave(self, now: float, sent: float) -> None:
        self.in_flight -= 1
        self.stats.busy_s += now - sent
        self.last = now

    def done(self, set_asides: int) -> TransportStats:
        if self._ticker is not None and not self._ticker.done():
            with contextlib.suppress(RuntimeError):  # called off the loop (a failed batch): it ends alone
                asyncio.get_running_loop()
                self._ticker.cancel()
        if self.first is not None and self.last is not None:
            self.stats.span_s = self.last - self.first
        self.stats.url_set_asides = set_asides
        return self.stats


def _new_loop() -> asyncio.AbstractEventLoop:
    try:  # uvloop, when installed, spends less CPU per request
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _parse_chat(content: bytes, completion: bool) -> Completion:
    try:
        data = orjson.loads(content)
        choice = data["choices"][0]
        message = {"content": choice["text"]} if completion else choice["message"]
        usage = data.get("usage") or {}
        return Completion(
            text=message.get("content") or "",
            reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
            response_id=data.get("id") if isinstance(data.get("id"), str) else None,
        )
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise _Malformed from None


class OpenAIBackend:
    """Chat and raw completions over HTTP (see the module docstring).

    Args:
        base_urls: server roots ending in ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        model: the model name the servers serve.
        api_key_env: the environment variable holding the key ("" or unset: no key).
        concurrency: requests in flight at once **per base URL** (where the AIMD window starts
            and returns to).
        max_concurrency: the most the window may grow to per base URL while requests wait in line
            and no 429 says the server is full (capacity probing). None: ``concurrency``, a hard
            limit (``LLMResource`` passes 2 x ``concurrency`` by default).
        timeout_s: per-attempt timeout.
        max_retries: retries after the first attempt (429s are bounded apart, by ``max_throttled``).
        backoff_s: first backoff; doubles per retry (with jitter), capped at ``backoff_max_s``.
        weights_id: what identifies the served weights (a hash or revision); part of cache keys.
            Empty: ``served:<root>`` from ``/v1/models``. ``unknown``: none (said in the log).
        json_mode: how to ask for a schema: ``json_schema`` (OpenAI ``response_format``) or
            ``structured_outputs`` (vLLM's extra body field, for older vLLM servers).
        reasoning_model: an OpenAI reasoning model (``max_completion_tokens``, no temperature).
        reasoning_effort: sent as ``reasoning_effort`` when set (reasoning models).
        role: the role this backend serves (names its thread; one backend per role).
        cooldown_s: first cool-down of a URL set aside; doubles up to ``cooldown_max_s``.
        fail_threshold: failures in a row that set a URL aside.
        max_throttled: 429 answers one request may get before it ends with an error.
        dead_after_s: seconds every URL must keep failing before the batch stops with
            ``FleetDown``; None: ``max(2 x timeout_s, 60)``.

    Raises:
        ValueError: no base URL, a base URL with a user:password while ``api_key_env`` holds
            a key (both would be the request's Authorization header; the message is masked), or
            ``max_concurrency`` below ``concurrency``.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        *,
        api_key_env: str = "",
        concurrency: int = 128,
        max_concurrency: int | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        weights_id: str = "",
        json_mode: str = "json_schema",
        reasoning_model: bool = False,
        reasoning_effort: str = "",
        role: str = "",
        cooldown_s: float = 5.0,
        cooldown_max_s: float = 120.0,
        fail_threshold: int = 3,
        max_throttled: int = 50,
        dead_after_s: float | None = None,
    ) -> None:
        if not base_urls:
            raise ValueError("the openai backend needs at least one base URL")
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.shown_urls = [mask_url(u) for u in self.base_urls]
        self._shown = dict(zip(self.base_urls, self.shown_urls, strict=True))
        both = [self._shown[u] for u in self.base_urls if has_userinfo(u)]
        if both and api_key_env and os.environ.get(api_key_env):
            # aiohttp refuses both ("Cannot combine AUTHORIZATION header ..."), on every call: say it now.
            raise ValueError(
                f"{role or 'openai'} role: base URL(s) {both} carry a user:password and {api_key_env}"
                " holds an API key; both would be the Authorization header. Keep one: remove the"
                f" user:password from the URL, or unset {api_key_env} (or the role's API_KEY_ENV)."
            )
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = max(1, concurrency)
        if max_concurrency is not None and max_concurrency < self.concurrency:
            raise ValueError(
                f"{role or 'openai'} role: max_concurrency ({max_concurrency}) is below concurrency"
                f" ({self.concurrency}); set it to at least concurrency (equal: a hard limit) or unset it"
            )
        self.max_concurrency = self.concurrency if max_concurrency is None else max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.weights_id = weights_id
        self.json_mode = json_mode
        self.reasoning_model = reasoning_model
        self.reasoning_effort = reasoning_effort
        self.takes_chat_template_kwargs = not reasoning_model
        self.role = role
        self.cooldown_s = cooldown_s
        self.cooldown_max_s = cooldown_max_s
        self.fail_threshold = fail_threshold
        self.max_throttled = max(1, max_throttled)
        self.dead_after_s = dead_after_s if dead_after_s is not None else max(2 * timeout_s, 60.0)
        self.stragglers_cut = 0  # first attempts cut as stragglers and sent again (see STRAGGLER_FACTOR)
        self._histories: dict[int, _Latencies] = {}  # max_tokens -> recent answers (STRAGGLER_HISTORY)
        self._client: httpx.Client | None = None  # /v1/models only (once, before any call)
        self._identity: dict[str, str] | None = None
        self._served: dict[str, Any] | None = None
        self._unlisted: list[str] = []  # URLs whose /v1/models never answered: start set aside
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._fleet: _Fleet | None = None
        self._conn_of: dict[Any, Any] = {}  # a sending task -> its request's connection (loop only)
        self._pid = os.getpid()
        self.attempts = 0  # total HTTP attempts (tests check that retries are bounded)
        self.url_hits: dict[str, int] = {u: 0 for u in self.base_urls}

    # ----- identity (/v1/models), synchronous, once ------------------------------------------

    def identity(self) -> dict[str, str]:
        """backend/model/weights: the configured ``weights_id``, else the root ``/v1/models`` gives.

        The URLs are not part of the identity: a fleet of replicas serves one model. Read once
        per backend (the identity is in every cache key, so it must not change mid-run).

        Raises:
            ServedModelError: no URL serves the model (the message lists the served names), URLs
                serve different roots under its name, or no weights identity can be had and
                ``weights_id`` is not set (``unknown`` is accepted when set explicitly).
        """
        with self._lock:
            if self._identity is None:
                self._identity = self._resolve_identity()
            return dict(self._identity)

    def served_model(self) -> dict[str, Any]:
        """What the servers say of ``model``: id, root, max_model_len (or ``error``), and
        ``weights_note`` when the weights are ``unknown`` by the user's choice."""
        if self._served is None:
            try:
                self.identity()
            except ServedModelError as exc:
                return {"error": str(exc)}
        return dict(self._served or {})

    def _list_models(self, url: str) -> list[dict[str, Any]]:
        """``data`` of ``url``/models, retrying transient failures like a call does.

        Raises:
            RuntimeError: the URL did not answer with a listing (the last reason).
        """
        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._http().get(
                    endpoint(url, "/models"), headers=self._headers(), timeout=min(10.0, self.timeout_s)
                )
                if resp.status_code < 400:
                    data = orjson.loads(resp.content).get("data")
                    if isinstance(data, list):
                        return [e for e in data if isinstance(e, dict)]
                    last = "a body without a `data` list"
                else:
                    last = f"HTTP {resp.status_code}"
                    if resp.status_code not in RETRY_STATUS and resp.status_code < 500:
                        break  # 404: a provider without /v1/models; asking again will not help
            except (httpx.HTTPError, orjson.JSONDecodeError, AttributeError) as exc:
                last = mask_text(f"{type(exc).__name__}: {str(exc)[:200]}")
            if attempt < self.max_retries:
                time.sleep(min(self.backoff_max_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2))
        raise RuntimeError(f"{self._shown.get(url, mask_url(url))}/models: {last}")

    def _resolve_identity(self) -> dict[str, str]:
        with ThreadPoolExecutor(max_workers=min(8, len(self.base_urls))) as pool:
            futures = {u: pool.submit(self._list_models, u) for u in self.base_urls}
        listings: dict[str, list[dict[str, Any]]] = {}
        failed: dict[str, str] = {}
        for u, f in futures.items():
            try:
                listings[self._shown[u]] = f.result()
            except RuntimeError as exc:
                failed[self._shown[u]] = str(exc)
        who = f"{self.role or 'openai'} role, model {self.model!r}"
        pin_hint = (
            f"set weights_id (RAGSFT_{(self.role or '<ROLE>').upper()}_WEIGHTS_ID) to the weights'"
            " revision, or to 'unknown' to run without a weights identity"
        )
        explicit = self.weights_id
        served: dict[str, Any] = {}
        if listings:
            entries = {
                u: next((e for e in data if e.get("id") == self.model), None) for u, data in listings.items()
            }
            serving = {u: e for u, e in entries.items() if e is not None}
            if not serving:
                names = sorted({str(e.get("id")) for data in listings.values() for e in data})
                raise ServedModelError(f"{who}: no URL serves it; served: {names} (at {sorted(listings)})")
            if len(serving) < len(listings):
                lacking = {u: [e.get("id") for e in listings[u]] for u in listings if u not in serving}
                raise ServedModelError(f"{who}: served by {sorted(serving)} but not by {lacking}")
            roots = {u: e.get("root") for u, e in serving.items() if e.get("root")}
            if len(set(roots.values())) > 1:
                raise ServedModelError(f"{who}: the URLs serve different weights under one name: {roots}")
            first = next(iter(serving.values()))
            served = {k: first[k] for k in ("id", "root", "max_model_len") if first.get(k) is not None}
            for u, reason in failed.items():
                log.warning("%s: %s did not list its models (%s); the others did", who, u, reason)
            self._unlisted = [u for u in self.base_urls if self._shown[u] in failed]
        else:
            served = {"error": "; ".join(failed.values())}
            if not explicit:
                raise ServedModelError(
                    f"{who}: /v1/models answered at none of {self.shown_urls} ({served['error']}), so the"
                    f" served weights are unknown; {pin_hint}"
                )
        weights = explicit or (f"served:{served['root']}" if served.get("root") else "")
        if not weights:
            raise ServedModelError(f"{who}: /v1/models gives no `root` for it (providers do not); {pin_hint}")
        if weights == UNKNOWN_WEIGHTS:
            served["weights_note"] = (
                "weights_id=unknown was set explicitly: cache entries of this model cannot tell"
                " its weights apart"
            )
            log.warning("%s: weights 'unknown' (set explicitly); %s", who, served["weights_note"])
        else:
            log.info("%s at %s: weights %s, %s", who, self.shown_urls, weights, served)
        self._served = served
        return {"backend": "openai", "model": self.model, "weights_sha256": weights}

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s))
        return self._client

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    # ----- the event loop and the dispatch -----------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self._pid != os.getpid():
                # A forked child inherits the loop object but not its thread: start afresh.
                self._loop, self._thread, self._session, self._fleet = None, None, None, None
            if self._loop is None:
                self._pid = os.getpid()
                loop = _new_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"ragsft-http-{self.role or self.model}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _submit(self, coro: Awaitable[T]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())  # type: ignore[arg-type]

    def _in_tail(self) -> bool:
        """Whether this backend's fleet waits on its last answers (loop only; see ``_Fleet.in_tail``)."""
        return self._fleet is not None and self._fleet.in_tail()

    async def _ready(self) -> _Fleet:
        if self._fleet is None:
            import aiohttp

            self._fleet = _Fleet(
                self.base_urls,
                self.concurrency,
                self.cooldown_s,
                self.fail_threshold,
                self.cooldown_max_s,
                self.dead_after_s,
                self.max_concurrency,
            )
            now = asyncio.get_running_loop().time()
            for u in self._fleet.urls:
                if u.url in self._unlisted and len(self._unlisted) < len(self.base_urls):
                    u.aside, u.cooldown, u.available_at = True, self.cooldown_s, now + self.cooldown_s
                    u.failing_since, u.last_error = now, "did not list its models"
            connector = _connector_class(aiohttp)(
                limit=self._fleet.capacity() + 8,
                limit_per_host=0,
                keepalive_timeout=60,
                ttl_dns_cache=300,
                conn_of=self._conn_of,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )
        return self._fleet

    async def _send(self, path: str, body: bytes, call: _Call, parse: Callable[[bytes], T]) -> T:
        """POST ``body`` to ``path`` of the best URL until it answers, retrying as the module says.

        A first attempt that straggles (:meth:`_Call.straggler_s`) is cut and sent again, unless
        the first bytes of its answer have come (read after :data:`CUT_DRAIN_ITERATIONS` more
        turns of the loop).

        Raises:
            GiveUp: retries (or the 429 allowance) used up.
            Refused: a 4xx other than 429.
        """
        import aiohttp

        fleet = await self._ready()
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        headers = {"Content-Type": "application/json", **self._headers()}
        failures = throttled = 0
        avoid: _Url | None = None
        last = ""
        was_cut = False
        waiting = cut = False  # the attempt in flight waits for its answer; it was cut
        attempt = 0  # which attempt is in flight: a cut waiting its turns belongs to one

        def cut_unless_answered(of: int, turns: int) -> None:
            # ours: the deadline and the answer can be ready in one turn of the loop (a loop held by
            # the GIL). Cutting at once there dropped an answer the server had sent, and the request
            # went again (bench fleet: duplicated=2 at 20,000 pairs over). So the loop first reads
            # what has come: the cut waits CUT_DRAIN_ITERATIONS turns, each polling for I/O
            nonlocal cut
            if of != attempt or not waiting or me is None:
                return  # its answer began to come, or the attempt ended (a later one may be in flight)
            # ours: a turn's callbacks queued before it run before its I/O (asyncio and uvloop), so
            # a check sees the sockets as they were a turn earlier: an answer that came during the
            # last turn was then dropped (bench fleet, 20,000 pairs under: sent again 0.22 s after
            # it was ready). So the cut also looks at the request's own socket
            arriving = turns > -CUT_ARRIVING_TURNS and _answer_arriving(me, self._conn_of.get(me))
            if turns > 0 or arriving:
                loop.call_soon(cut_unless_answered, of, turns - 1)
                return
            cut = True
            me.cancel()

        while True:
            u = await fleet.acquire(avoid)
            epoch = u.epoch
            sent = loop.time()
            call.enter(sent)
            self.attempts += 1
            self.url_hits[u.url] = self.url_hits.get(u.url, 0) + 1
            status, content, wait_s = 0, b"", None
            left = windowed = cut = False
            attempt += 1
            deadline = None
            if not was_cut:
                deadline = call.watch(
                    _Deadline(loop, sent, lambda a=attempt: cut_unless_answered(a, CUT_DRAIN_ITERATIONS)),
                    self.timeout_s,
                )
            try:
                try:
                    waiting = True
                    async with self._session.post(endpoint(u.url, path), data=body, headers=headers) as resp:
                        waiting = False  # its answer has begun to come: it is not cut from here
                        status = resp.status
                        content = await resp.read()
                        wait_s = retry_after_s(resp.headers.get("Retry-After"))
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    last = f"{type(exc).__name__} from {u.shown}"
                except asyncio.CancelledError:
                    if not cut or me is None:
                        raise  # the batch was cancelled
                    me.uncancel()  # our straggler cut
                finally:
                    waiting = False
                    if deadline is not None:
                        call.unwatch(deadline)
                now = loop.time()
                call.leave(now, sent)
                left = True
                if 200 <= status < 300:
                    try:
                        value = parse(content)
                    except _Malformed:
                        last = f"malformed response body from {u.shown}"
                    else:
                        fleet.ok(u)
                        call.answered(now - sent)
                        return value
                elif status == 429 or (status == 503 and wait_s is not None):
                    windowed = fleet.pushback(u, epoch, wait_s, now)
                    last = f"HTTP {status} from {u.shown}"
                elif status and status not in RETRY_STATUS and status < 500:
                    u.fails, u.failing_since = 0, None  # it answered: the request is wrong, not the server
                    text = mask_text(content[:300].decode("utf-8", "replace"))
                    raise Refused(f"HTTP {status} from {u.shown}: {text}")
                elif status:
                    last = f"HTTP {status} from {u.shown}"
                if cut:  # a straggler, not a failing URL: sent again at once, with the full timeout
                    pass
                elif status != 429 and not (status == 503 and wait_s is not None):
                    fleet.failure(u, now, sent, last)
            finally:
                if not left:  # cancelled mid-flight
                    call.leave(loop.time(), sent)
                fleet.release(u)
                if me is not None:
                    self._conn_of.pop(me, None)
            if cut:
                was_cut = True
                call.stats.retries += 1
                self.stragglers_cut += 1
                continue
            if status == 429:
                throttled += 1
                call.stats.http_429 += 1
                if throttled > self.max_throttled:
                    raise GiveUp(
                        f"gave up after {failures + throttled} attempts ({throttled} answered 429): {last}"
                    )
            else:
                failures += 1
                if failures > self.max_retries:
                    raise GiveUp(f"gave up after {failures + throttled} attempts: {last}")
            if fleet.dead:
                raise FleetDown(fleet.dead)
            call.stats.retries += 1
            avoid = u
            if windowed:
                continue  # the window was set to what the server runs: the retry waits for our next answer
            if not wait_s:  # a Retry-After pauses the URL itself; otherwise (or "0") back off here
                n = failures + throttled
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** (n - 1))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # jitter: no lockstep

    async def _run_many(self, n: int, make: Callable[[int], Awaitable[None]], call: _Call) -> TransportStats:
        """Run ``make(i)`` for i < n, starting each as the fleet has room (few idle tasks)."""
        fleet = await self._ready()
        set_asides = fleet.set_asides
        gate = asyncio.Semaphore(fleet.capacity() + max(32, fleet.capacity() // 4))
        tasks: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            try:
                await make(i)
            finally:
                gate.release()

        try:
            for i in range(n):
                await gate.acquire()
                if fleet.dead:  # start nothing more; the gather below raises FleetDown
                    gate.release()
                    break
                task = asyncio.ensure_future(one(i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks))
        except BaseException:
            for t in list(tasks):
                t.cancel()
            raise
        return call.done(fleet.set_asides - set_asides)

    def _body(self, req: Request) -> dict[str, Any]:
        p = req.params
        body: dict[str, Any] = {"model": self.model}
        if req.is_completion:
            body["prompt"] = req.prompt  # /v1/completions: the text as is, no chat template
        else:
            body["messages"] = [{"role": m["role"], "content": m["content"]} for m in req.messages]
        if req.chat_template_kwargs and self.takes_chat_template_kwargs:
            # vLLM's OpenAI server reads this extra body field (e.g. {"enable_thinking": false}).
            body["chat_template_kwargs"] = dict(req.chat_template_kwargs)
        if self.reasoning_model:
            # OpenAI reasoning models answer 400 to max_tokens and to any temperature / top_p.
            body["max_completion_tokens"] = p.max_tokens
            if self.reasoning_effort:
                body["reasoning_effort"] = self.reasoning_effort
        else:
            body |= {"temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens}
        body["seed"] = p.seed
        if p.stop:
            body["stop"] = list(p.stop)
        if req.json_schema is not None:
            if self.json_mode == "structured_outputs":
                body["structured_outputs"] = {"json": dict(req.json_schema)}
            else:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "schema": dict(req.json_schema)},
                }
        return body

    async def _chat_one(self, req: Request, call: _Call) -> Completion:
        completion = req.is_completion
        try:
            return await self._send(
                "/completions" if completion else "/chat/completions",
                orjson.dumps(self._body(req)),
                call,
                lambda content: _parse_chat(content, completion),
            )
        except (GiveUp, Refused) as exc:
            return Completion(error=str(exc))

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> TransportStats:
        """Answer every request; ``on_result`` runs in the calling thread as each one ends."""
        if not requests:
            return TransportStats()
        results: queue.SimpleQueue[Any] = queue.SimpleQueue()  # (index, completion), then _BATCH_DONE
        kind = max(r.params.max_tokens for r in requests)  # the task, as a rule: same budget, same latency
        with self._lock:
            history = self._histories.setdefault(kind, _Latencies(STRAGGLER_HISTORY))
        call = _Call(history, self._in_tail)

        async def one(i: int) -> None:
            try:
                c = await self._chat_one(requests[i], call)
            except (asyncio.CancelledError, FleetDown):
                raise
            except Exception as exc:  # never lose a request to an unexpected bug: report it
                c = Completion(error=mask_text(f"{type(exc).__name__}: {exc}"))
            results.put((i, c))

        future = self._submit(self._run_many(len(requests), one, call))
        # the batch's end comes through the queue too (after every answer it put): a caller waits
        # without a timer. Polling every 0.5 s, a thousand streaming threads woke 2,000 times a
        # second for the GIL and starved the stages' own thread
        future.add_done_callback(lambda _f: results.put(_BATCH_DONE))
        reported = [False] * len(requests)
        left = len(requests)
        try:
            while left:
                got = results.get()
                if got is _BATCH_DONE:
                    break
                i, c = got
                reported[i] = True
                left -= 1
                on_result(i, c)
        except BaseException:
            future.cancel()  # an interrupted run: what is in flight is abandoned, nothing cached
            raise
        failure = None
        if left:
            with contextlib.suppress(queue.Empty):
                while True:
                    got = results.get_nowait()
                    if got is _BATCH_DONE:
                        continue
                    i, c = got
                    if not reported[i]:
                        reported[i], left = True, left - 1
                        on_result(i, c)
            exc = future.exception() if future.done() and not future.cancelled() else None
            if isinstance(exc, FleetDown):  # what was answered is reported (cached); the batch fails
                raise FleetDown(
                    f"{self.role or 'openai'} role, model {self.model!r}: {exc}. The answers received"
                    " so far are cached: check the servers (or the role's BASE_URLS), then rerun, which"
                    " resumes from the cache."
                )
            failure = mask_text(f"{type(exc).__name__}: {exc}") if exc else "the request was not answered"
            for i, done in enumerate(reported):
                if not done:  # never a silent loss
                    on_result(i, Completion(error=failure))
        return future.result() if failure is None else call.done(0)

    def run_coroutine(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on this backend's loop and wait for it (for subclasses' endpoints)."""
        future = self._submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the connection pool and stop the event loop (a later call starts them again)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        loop, self._loop = self._loop, None
        if loop is None:
            return
        thread, self._thread = self._thread, None
        session, self._session, self._fleet = self._session, None, None
        if thread is threading.current_thread():  # dropped from inside its own loop: just stop it
            loop.call_soon_threadsafe(loop.stop)
            return
        if session is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        with contextlib.suppress(Exception):
            loop.close()

    def __del__(self) -> None:
        # A backend dropped without close() (a test's, a script's) must not leave its loop thread
        # and connections behind.
        with contextlib.suppress(Exception):
            self.close()
