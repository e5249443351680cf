"""A simulated OpenAI-compatible vLLM fleet, for benchmarks only (never a backend of a run).

The fleet is a separate process serving ``replicas`` HTTP servers on 127.0.0.1, one port each;
the project's real ``openai`` backend reaches them over HTTP like a ``vllm serve`` fleet. No run
can select it: it is not a backend kind, only a server that a bench starts.

API (for ``ragsft bench fleet``, ``ragsft bench plan`` and tests)::

    from ragsft_assets.bench.fleet_sim import FleetSimulator

    with FleetSimulator(replicas=2, slots=128, prefill_tok_s=500.0, decode_tok_s=30.0,
                        error_rate=0.01, seed=1) as fleet:
        fleet.base_urls          # ["http://127.0.0.1:PORT/v1", ...], one per replica
        fleet.model              # the served model name (what /v1/models lists)
        fleet.reset_stats()      # zero every counter (e.g. after a warm-up)
        ...                      # point the roles at fleet.base_urls with backend "openai"
        s = fleet.stats()        # the counters, a plain dict (see ``FleetStats``)
        s["utilization"]         # slot-seconds busy / (slots x the stages' wall time)

Each replica has ``slots`` sequence slots. A request that finds every slot of its replica busy
is answered ``429`` with ``Retry-After`` (whole seconds until a slot frees, at least 1), as a
gateway in front of vLLM does; no header tells the replica's capacity. An admitted request
holds a slot until its work is done: ``prompt_tokens / prefill_tok_s + completion_tokens /
decode_tok_s`` seconds (times ``time_scale``) **at a full batch**, times a lognormal jitter,
with a heavy (Pareto) tail and rare stalls longer than the clients' ``timeout_s``. The rates
are per sequence under full batching; with fewer sequences running each goes faster, as vLLM's
decode tokens/s per sequence falls with the batch (``_Batch``: processor sharing, a lone
sequence ``1 / batch_floor`` = 2.5x faster). A client that goes away (its timeout) aborts its
sequence and frees the slot, as vLLM does on a disconnect. Tokens are estimated as characters /
4 (plus 8 per message for the chat template). About ``error_rate`` of the attempts fail at
once, half with HTTP 500 and half with a connection reset (TCP RST, no response).

Every answer's ``id`` is ``chatcmpl-<SHA-256 of the request body>`` (``body_digest``: canonical
JSON), and the fleet keeps, per body answered, the SHA-256 of the text it sent (``answers()``):
a bench checks each cached answer against the request it was stored for.

Answers are scripted, deterministic from ``seed`` and the prompt (never from arrival order):
the stage is recognised from the prompt text (``stage_of``), and each stage passes at a rate
like the seed funnels (``DEFAULT_RATES``: about half the A+B ablations fail, as in the card's
281,119 -> 144,144). The fleet remembers the questions it drafted (one memory for every
replica) so that later stages (ablations, judges, RAG answers) can answer them right or wrong
on purpose; a question it never drafted is answered ``IMPOSSIBLE`` / refused (use a fresh cache).

``stats()`` keys: ``requests`` (HTTP attempts at the chat/completion routes), ``ok``,
``rejected_429``, ``errors_500``, ``resets``, ``retries`` (= 429 + 500 + resets: each one makes
the client try again), ``distinct_ok`` (distinct request bodies answered 200), ``duplicated``
(200 answers beyond the first for the same body), ``admitted_again`` (up to 100 requests
admitted after their body had been answered 200: [stage, seconds since that answer]), ``max_in_flight`` (over the fleet) and
``max_in_flight_per_replica``, ``slots`` (all replicas), ``slot_seconds`` (busy),
``stage_wall_s`` (union of the stages' spans, first arrival to last answer), ``utilization``,
``first_s`` / ``last_s`` (first admitted request, last answer), ``e2e_wall_s`` (their
difference), ``utilization_e2e`` (slot-seconds / (slots x e2e_wall_s)), ``aborted`` (sequences
whose client went away),
and ``stages``: per stage ``requests``, ``ok``, ``first_s``, ``last_s``, ``wall_s``,
``busy_s``, ``prompt_tokens``, ``completion_tokens``, ``rejected_429`` and
``rejected_before_ok`` (the 429s that came before the stage's first answer). Timings are seconds since the last reset.

Also served: ``GET /v1/models`` (id, root, max_model_len), ``GET /sim/stats``, ``GET /sim/answers``,
``POST /sim/reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import math
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

# ours: the latency model's defaults (vLLM-like; the card states no serving figures).
BATCH_FLOOR = 0.4  # a decode step alone costs 0.4 of a full batch's: a lone sequence decodes 2.5x faster
JITTER = 0.25  # lognormal sigma of each request's work
TAIL_RATE = 0.02  # share of attempts in the heavy tail ...
TAIL_ALPHA = 1.5  # ... a Pareto factor of this shape ...
TAIL_MAX = 8.0  # ... at most this many times the usual work
STALL_RATE = 0.0002  # share of attempts that outlast twice the clients' timeout_s (then aborted)
OCCUPANCY_S = 5.0  # the occupancy profile's window (stats()["occupancy"])
_GONE = object()  # a completion whose client went away before its answer

# Pass rate per stage (the share of items a stage keeps), from the HotpotQA-fr card's funnel where
# it gives one (ablations: 281,119 -> 144,144 -> 95,470 -> 69,863), else a plausible judge.
DEFAULT_RATES: dict[str, float] = {
    "draft_call_readable": 0.98,  # a generator reply that parses
    "draft_passes_checks": 0.93,  # each draft: its answer is a span of B (else answer_not_in_b)
    "ablation_ab": 0.513,
    "ablation_b": 0.662,
    "ablation_a": 0.732,
    "ablation_none": 0.90,
    "first_hop": 0.85,
    "criteria": 0.80,
    "bridge_judge": 0.85,
    "language_judge": 0.90,
    "publishability": 0.85,  # ours: train questions scored 4 or 5 (the card gives no rate)
    "descriptor_check": 0.90,  # ours
    "rag_answer": 0.90,  # answerable: cites both gold documents; twin: refuses
    "rag_factual": 0.90,
    "rag_refusal": 0.95,
    "rag_language": 0.95,
}

STAGES = (
    "criteria",
    "bridge_judge",
    "language_judge",
    "publishability",
    "descriptor_check",
    "draft",
    "rag_refusal",
    "rag_factual",
    "rag_language",
    "rag_answer",
    "first_hop",
    "ablation",
    "other",
)

_QUESTION_RE = re.compile(r"Question ?: (.+)")
_DOC_RE = re.compile(r"Document ([AB]) ?: (.+)\n((?:\[\d+\] .*\n?)+)")
_ALIAS_RE = re.compile(r"(?:« |\")(.+?)(?: »|\"), (?:qui|which)")
_N_RE = re.compile(r"(?:Écris|Write) (\d+) ")
_SOURCE_RE = re.compile(
    r"\[Source (\d+)\]\n\* filename: ([^\n]*)\n\n\[CHUNK_START\]\n\n(.*?)\n\n\[CHUNK_END\]", re.S
)
_PHRASE_RE = re.compile(r"(?:rien d'autre : « |nothing else: \")(.+?)(?: »|\")")
_WORD_RE = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b|\b([A-ZÉ][a-zéèêàç]{3,})\b")
_ABL_DOC_RE = re.compile(r"Document \d ?: (.+)")
REFUSAL = {
    "fr": "Les documents fournis ne permettent pas de répondre à cette question.",
    "en": "The provided documents do not allow answering this question.",
}


def stage_of(text: str) -> str:
    """The pipeline stage a prompt belongs to (one of ``STAGES``), from its text alone."""
    if '"minimal_answer"' in text:
        return "criteria"
    if '"b_only_candidate"' in text:
        return "bridge_judge"
    if '"publishability"' in text:
        return "publishability"
    if '"descriptor_in_question"' in text:
        return "descriptor_check"
    if '"no_meta_wording"' in text:
        return "language_judge"
    if '"questions"' in text and "Document A" in text:
        return "draft"
    if '"refuses"' in text:
        return "rag_refusal"
    if "Réponse de référence" in text or "Reference answer" in text:
        return "rag_factual"
    if '"score"' in text:
        return "rag_language"
    if "[CHUNK_START]" in text:
        return "rag_answer"
    if '"status"' in text and ("désigne une entité" in text or "designates" in text):
        return "first_hop"
    if "IMPOSSIBLE" in text:
        return "ablation"
    return "other"


def unit(seed: int, *parts: object) -> float:
    """A uniform draw in [0, 1) from the seed and the parts (SHA-256; no order dependence)."""
    h = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _letters(seed: int, *parts: object) -> str:
    """Eight letters from a hash: an id that never holds a digit (so never a year of the text)."""
    h = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return "".join(chr(97 + b % 26) for b in h[:8])


def body_digest(body: Any) -> bytes:
    """SHA-256 of a request body in canonical form (sorted keys, no spaces): what answer ids carry."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


def estimate_tokens(text: str) -> int:
    """About 4 characters per token (at least 1)."""
    return max(1, math.ceil(len(text) / 4))


@dataclass(slots=True)
class _Drafted:
    answer: str
    a_title: str
    b_title: str
    alias: str
    lang: str


@dataclass
class Script:
    """The scripted model: one answer per (stage, prompt), deterministic from the seed.

    ``rates`` overrides ``DEFAULT_RATES`` per key. ``drafted`` maps each question the script
    wrote to its answer and documents, so later stages can answer it right or wrong on purpose.
    """

    seed: int = 0
    rates: Mapping[str, float] = field(default_factory=dict)
    drafted: dict[str, _Drafted] = field(default_factory=dict)

    def rate(self, name: str) -> float:
        return float(self.rates.get(name, DEFAULT_RATES[name]))

    def passes(self, name: str, *key: object) -> bool:
        return unit(self.seed, name, *key) < self.rate(name)

    def answer(self, messages: Sequence[Mapping[str, str]]) -> tuple[str, str]:
        """(stage, reply text) for one conversation."""
        text = "\n".join(m.get("content") or "" for m in messages)
        stage = stage_of(text)
        lang = "en" if ("Question:" in text or "Document A:" in text) else "fr"
        handler = getattr(self, f"_{stage}", None)
        return stage, handler(text, messages, lang) if handler else "?"

    # -- multihop ------------------------------------------------------------------------------
    def _draft(self, text: str, messages: Any, lang: str) -> str:
        docs = {m.group(1): (m.group(2).strip(), m.group(3)) for m in _DOC_RE.finditer(text)}
        alias_m = _ALIAS_RE.search(text)
        n_m = _N_RE.search(text)
        n = int(n_m.group(1)) if n_m else 3
        if set(docs) != {"A", "B"} or not self.passes("draft_call_readable", text):
            return "Voici les questions :" if lang == "fr" else "Here are the questions:"
        (a_title, a_block), (b_title, b_block) = docs["A"], docs["B"]
        alias = alias_m.group(1) if alias_m else b_title
        a_lines = [ln.split("] ", 1)[-1] for ln in a_block.strip().splitlines()]
        b_lines = [ln.split("] ", 1)[-1] for ln in b_block.strip().splitlines()]
        a_text = " ".join(a_lines)
        banned = {a_title, b_title, alias}
        spans: list[tuple[int, str]] = []
        for j, sentence in enumerate(b_lines):
            for m in _WORD_RE.finditer(sentence):
                word = m.group(0)
                if word not in a_text and not any(word in t for t in banned) and (j, word) not in spans:
                    spans.append((j, word))
        out = []
        for k in range(n):
            tag = _letters(self.seed, "q", a_title, b_title, k)
            if lang == "fr":
                q = f"Quel détail ({tag}) le texte donne-t-il sur l'entité évoquée dans « {a_title} » ?"
            else:
                q = f"Which detail ({tag}) does the text give about the entity mentioned in {a_title}?"
            if spans and self.passes("draft_passes_checks", q):
                j, ans = spans[int(unit(self.seed, "span", q) * len(spans))]
            else:
                j, ans = 0, f"réponse inventée {tag}" if lang == "fr" else f"made-up answer {tag}"
            self.drafted[q] = _Drafted(ans, a_title, b_title, alias, lang)
            out.append({"question": q, "answer": ans, "support_a": [0], "support_b": [j]})
        return orjson.dumps({"questions": out}).decode()

    def _known(self, text: str) -> tuple[str, _Drafted | None]:
        found = _QUESTION_RE.findall(text)
        q = found[-1].strip() if found else ""
        return q, self.drafted.get(q)

    def _ablation(self, text: str, messages: Any, lang: str) -> str:
        q, known = self._known(text)
        if known is None:
            return "IMPOSSIBLE"
        titles = [t.strip() for t in _ABL_DOC_RE.findall(text)]
        kind = (
            "ab" if len(titles) >= 2 else "none" if not titles else "a" if titles[0] == known.a_title else "b"
        )
        ok = self.passes(f"ablation_{kind}", q)
        if kind == "ab":
            return known.answer if ok else "IMPOSSIBLE"
        return "IMPOSSIBLE" if ok else known.answer

    def _first_hop(self, text: str, messages: Any, lang: str) -> str:
        q, known = self._known(text)
        if known is None or not self.passes("first_hop", q):
            return orjson.dumps({"entity": None, "status": "several"}).decode()
        return orjson.dumps({"entity": known.alias or known.b_title, "status": "one"}).decode()

    def _criteria(self, text: str, messages: Any, lang: str) -> str:
        q, _ = self._known(text)
        names = ("correct_answer", "bridge_in_a", "fact_in_b", "both_documents_needed", "clear_question", "minimal_answer")  # fmt: skip
        reply = dict.fromkeys(names, True)
        if not self.passes("criteria", q):
            reply[names[int(unit(self.seed, "criterion", q) * len(names))]] = False
        return orjson.dumps(reply).decode()

    def _bridge_judge(self, text: str, messages: Any, lang: str) -> str:
        q, _ = self._known(text)
        ok = self.passes("bridge_judge", q)
        reply = {"analysis": "sim", "descriptor": "", "candidates": [], "b_only_candidate": ok}
        return orjson.dumps({**reply, "a_states_relation": True, "question_names_b": False}).decode()

    def _language_judge(self, text: str, messages: Any, lang: str) -> str:
        q, _ = self._known(text)
        ok = self.passes("language_judge", q)
        checks = ("fluent", "unique_referents", "no_meta_wording", "answer_type_and_scope")
        return orjson.dumps({"analysis": "sim", **dict.fromkeys(checks, True), "fluent": ok}).decode()

    def _publishability(self, text: str, messages: Any, lang: str) -> str:
        q, _ = self._known(text)
        score = 5 if self.passes("publishability", q) else 2
        return orjson.dumps({"analysis": "sim", "publishability": score}).decode()

    def _descriptor_check(self, text: str, messages: Any, lang: str) -> str:
        q, _ = self._known(text)
        ok = self.passes("descriptor_check", q)
        reply = {"analysis": "sim", "descriptor_in_question": True, "descriptor_hides_bridge": ok}
        return orjson.dumps({**reply, "descriptor_stated_by_a": True}).decode()

    # -- rag_sft -------------------------------------------------------------------------------
    def _rag_answer(self, text: str, messages: Any, lang: str) -> str:
        system = messages[0].get("content") or ""
        question = messages[-1].get("content") or ""
        known = next((w for q, w in self.drafted.items() if q in question), None)
        lang = known.lang if known else lang
        phrase = _PHRASE_RE.search(system)
        refusal = phrase.group(1) if phrase else REFUSAL[lang]
        sources = {t.strip(): (int(n), body) for n, t, body in _SOURCE_RE.findall(system)}
        right = self.passes("rag_answer", system, question)
        answerable = (
            known is not None
            and known.a_title in sources
            and known.b_title in sources
            and known.answer in sources[known.b_title][1]
        )
        if not answerable or known is None:
            return refusal if right else (known.answer if known else "42")
        if not right:
            return refusal
        na, a_body = sources[known.a_title]
        nb, b_body = sources[known.b_title]
        lead = "La réponse est" if lang == "fr" else "The answer is"
        if 'id="N"/>' in system:
            return f'{lead} {known.answer}.\n\nReferences:\n<ref id="{na}"/>\n<ref id="{nb}"/>'
        a_quote = _sentence_with(a_body, known.alias)
        return (
            f'{lead} {known.answer} <ref id="{na}">{a_quote}</ref> '
            f'<ref id="{nb}">{_sentence_with(b_body, known.answer)}</ref>.'
        )

    def _rag_factual(self, text: str, messages: Any, lang: str) -> str:
        score = 5 if self.passes("rag_factual", text) else 2
        return orjson.dumps({"score": score, "reason": "sim"}).decode()

    def _rag_refusal(self, text: str, messages: Any, lang: str) -> str:
        response = re.split(r"Réponse de l'assistant ?:|Assistant's response ?:|assistant's answer ?:", text)[
            -1
        ]
        refuses = any(r in response for r in (*REFUSAL.values(), "ne permettent pas", "do not allow"))
        if not self.passes("rag_refusal", text):
            refuses = not refuses
        return orjson.dumps({"refuses": refuses, "reason": "sim"}).decode()

    def _rag_language(self, text: str, messages: Any, lang: str) -> str:
        score = 5 if self.passes("rag_language", text) else 2
        return orjson.dumps({"score": score, "reason": "sim"}).decode()


def _sentence_with(body: str, needle: str) -> str:
    """The first sentence of ``body`` that holds ``needle`` (the needle itself if none does)."""
    return next((s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if needle in s), needle)


# -- the server ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Stage:
    requests: int = 0
    ok: int = 0
    first: float | None = None
    last: float | None = None
    busy: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rejected: int = 0
    rejected_before_ok: int = 0


class _Batch:
    """One replica's running sequences, sharing its GPU as vLLM's continuous batching does.

    A decode step costs ``floor + (1 - floor) x n / slots`` of a full batch's step with ``n``
    sequences running, so each sequence advances ``speed(n) = 1 / (floor + (1 - floor) n /
    slots)`` seconds of full-batch work per second: 1 at a full batch (the configured rates are
    per sequence under full batching), ``1 / floor`` alone. Exact processor sharing: a virtual
    clock ``v`` (full-batch seconds done by every running sequence) advances at ``speed(n)``, and
    a sequence ends when ``v`` reaches its start plus its work, as ``n`` changes under it.
    """

    def __init__(self, slots: int, floor: float) -> None:
        self.slots = max(1, slots)
        self.floor = min(1.0, max(1e-3, floor))
        self.v = 0.0
        self.t = time.monotonic()
        self.heap: list[tuple[float, int]] = []  # (finish on the virtual clock, id)
        self.running: dict[int, asyncio.Future[None]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.ids = 0

    def speed(self, n: int) -> float:
        return 1.0 / (self.floor + (1.0 - self.floor) * n / self.slots)

    def _advance(self) -> None:
        now = time.monotonic()
        if self.running:
            self.v += (now - self.t) * self.speed(len(self.running))
        self.t = now

    def _head(self) -> float | None:
        while self.heap and self.heap[0][1] not in self.running:
            heapq.heappop(self.heap)  # aborted sequences leave lazily
        return self.heap[0][0] if self.heap else None

    def next_finish_s(self) -> float:
        """Seconds until the next sequence ends at the current batch (0 if none runs)."""
        self._advance()
        head = self._head()
        return 0.0 if head is None else max(0.0, head - self.v) / self.speed(len(self.running))

    def _schedule(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        head = self._head()
        if head is not None:
            delay = max(0.0, head - self.v) / self.speed(len(self.running))
            self.timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self.timer = None
        self._advance()
        while (head := self._head()) is not None and head <= self.v + 1e-9:
            _, i = heapq.heappop(self.heap)
            fut = self.running.pop(i)
            if not fut.done():
                fut.set_result(None)
        self._schedule()

    async def run(self, work: float) -> None:
        """Hold a slot until ``work`` full-batch seconds are done (cancelled: the slot frees)."""
        self._advance()
        self.ids += 1
        i = self.ids
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.running[i] = fut
        heapq.heappush(self.heap, (self.v + max(0.0, work), i))
        self._schedule()
        try:
            await fut
        finally:
            if self.running.pop(i, None) is not None:  # aborted: the others speed up at once
                self._advance()
                self._schedule()


class _Fleet:
    """The fleet's state and HTTP handling (runs in the simulator process's event loop)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.replicas = int(cfg.get("replicas", 2))
        self.slots = int(cfg.get("slots", 128))
        self.prefill = float(cfg.get("prefill_tok_s", 500.0))
        self.decode = float(cfg.get("decode_tok_s", 30.0))
        self.error_rate = float(cfg.get("error_rate", 0.01))
        self.scale = float(cfg.get("time_scale", 1.0))
        self.batch_floor = float(cfg.get("batch_floor", BATCH_FLOOR))
        self.jitter = float(cfg.get("jitter", JITTER))
        self.tail_rate = float(cfg.get("tail_rate", TAIL_RATE))
        self.stall_rate = float(cfg.get("stall_rate", STALL_RATE))
        self.timeout_s = float(cfg.get("timeout_s", 120.0))
        self.seed = int(cfg.get("seed", 0))
        self.model = str(cfg.get("model", "sim/fleet-32b"))
        self.root = str(cfg.get("root", "sim/fleet-32b@sim"))
        self.max_model_len = int(cfg.get("max_model_len", 32768))
        self.script = Script(self.seed, dict(cfg.get("rates") or {}))
        self.reset()

    def reset(self) -> None:
        self.t0 = time.monotonic()
        self.in_flight = [0] * self.replicas
        if not hasattr(self, "batches"):  # sequences still running keep their batch across a reset
            self.batches = [_Batch(self.slots, self.batch_floor) for _ in range(self.replicas)]
        self.answers: dict[bytes, str] = {}  # body digest -> SHA-256 of the answer text sent for it
        self.aborted = 0
        self.first: float | None = None
        self.last: float | None = None
        self.max_in_flight = 0
        self.max_per_replica = [0] * self.replicas
        self.counts = dict.fromkeys(("requests", "ok", "rejected_429", "errors_500", "resets"), 0)
        self.slot_seconds = 0.0
        self.attempts_by_body: dict[bytes, int] = {}
        self.ok_bodies: dict[bytes, int] = {}
        self.answered_at: dict[bytes, float] = {}  # body digest -> when its last 200 was ready
        # a request admitted again after its body's 200 (stage, seconds since that 200): what a
        # duplicate answer looks like from here (a gap of milliseconds: a cut racing the answer)
        self.again: list[tuple[str, float]] = []
        # answers computed while their client may be gone: (body digest, stage) per handler task,
        # taken back when the connection turns out closed (``_watched``)
        self._unsent: dict[Any, tuple[bytes, Any]] = {}
        self.hung_up = 0  # answers ready after their client had hung up: not delivered, not counted
        self.stages: dict[str, _Stage] = {}
        self.occupied: list[float] = []  # busy slot-seconds per OCCUPANCY_S window since the reset

    def _occupy(self, start: float, end: float) -> None:
        """Spread one sequence's busy time over the windows it spans."""
        w = OCCUPANCY_S
        last = int(end // w)
        if last >= len(self.occupied):
            self.occupied.extend([0.0] * (last + 1 - len(self.occupied)))
        for i in range(int(start // w), last + 1):
            self.occupied[i] += max(0.0, min(end, (i + 1) * w) - max(start, i * w))

    def now(self) -> float:
        return time.monotonic() - self.t0

    def stats(self) -> dict[str, Any]:
        spans = sorted((s.first, s.last) for s in self.stages.values() if s.first is not None and s.last)
        wall, end = 0.0, -1.0
        for a, b in spans:  # union of the stages' spans
            if b > end:
                wall += b - max(a, end)
                end = b
        distinct = len(self.ok_bodies)
        c = self.counts
        slots = self.slots * self.replicas
        e2e = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        return {
            **c,
            "aborted": self.aborted,
            "hung_up": self.hung_up,
            "first_s": round(self.first or 0.0, 3),
            "last_s": round(self.last or 0.0, 3),
            "e2e_wall_s": round(e2e, 3),
            "utilization_e2e": round(self.slot_seconds / (slots * e2e), 4) if e2e > 0 else 0.0,
            "retries": c["rejected_429"] + c["errors_500"] + c["resets"],
            "distinct_ok": distinct,
            "duplicated": c["ok"] - distinct,
            "admitted_again": [list(x) for x in self.again],
            "max_in_flight": self.max_in_flight,
            "max_in_flight_per_replica": list(self.max_per_replica),
            "in_flight": sum(self.in_flight),
            "slots": self.slots * self.replicas,
            "slot_seconds": round(self.slot_seconds, 3),
            "stage_wall_s": round(wall, 3),
            "utilization": round(self.slot_seconds / (self.slots * self.replicas * wall), 4) if wall else 0.0,
            # per OCCUPANCY_S window from the first request: busy slot-seconds / (slots x window)
            "occupancy": [
                round(b / (slots * OCCUPANCY_S), 3)
                for b in self.occupied[int((self.first or 0.0) // OCCUPANCY_S) :]
            ],
            "stages": {
                name: {
                    "requests": s.requests,
                    "ok": s.ok,
                    "first_s": round(s.first or 0.0, 3),
                    "last_s": round(s.last or 0.0, 3),
                    "wall_s": round((s.last or 0.0) - (s.first or 0.0), 3),
                    "busy_s": round(s.busy, 3),
                    "prompt_tokens": s.prompt_tokens,
                    "completion_tokens": s.completion_tokens,
                    "rejected_429": s.rejected,
                    "rejected_before_ok": s.rejected_before_ok,
                }
                for name, s in sorted(self.stages.items())
            },
        }

    async def handle(self, replica: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                body = await reader.readexactly(n) if n else b""
                if method == "POST" and path.endswith("completions"):
                    reply = await self._watched(self.route(replica, method, path, body), reader)
                    if reply is _GONE:
                        return
                else:
                    reply = await self.route(replica, method, path, body)
                if reply is None:  # a connection reset: RST, no response
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                status, extra, payload = reply
                reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}
                out = [f"HTTP/1.1 {status} {reason.get(status, 'Error')}", "Content-Type: application/json"]
                out += [f"Content-Length: {len(payload)}", *(f"{k}: {v}" for k, v in extra.items())]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + payload)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _watched(self, work: Any, reader: asyncio.StreamReader) -> Any:
        """Run ``work`` unless the client goes away first (a timeout): then, as vLLM does on a
        disconnect, the sequence is aborted and its slot freed. (No client pipelines requests, so
        anything read while an answer is pending means the connection closed.)"""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(reader.read(1))
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed = gone.done() and not gone.cancelled()  # the client hung up (read before the cancel)
            if not gone.done():
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gone  # its reader wait must end before the next request is read
        unsent = self._unsent.pop(task, None)
        if task.done() and not closed:
            return task.result()
        if task.done():
            # ready as the client hung up (its straggler cut or timeout): the answer never reaches
            # it and the client sends the request again, so it is not an answer (nor a duplicate
            # when the retry is answered); the slot was busy all the same
            if unsent is not None and self.ok_bodies.get(unsent[0]):  # (not one from before a reset)
                digest, st = unsent
                self.counts["ok"] -= 1
                st.ok -= 1
                self.ok_bodies[digest] -= 1
                if not self.ok_bodies[digest]:
                    del self.ok_bodies[digest]
                self.hung_up += 1
            return _GONE
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.aborted += 1
        return _GONE

    async def route(
        self, replica: int, method: str, path: str, body: bytes
    ) -> tuple[int, dict, bytes] | None:
        if path.endswith("/models"):
            entry = {
                "id": self.model,
                "object": "model",
                "root": self.root,
                "max_model_len": self.max_model_len,
            }
            return 200, {}, orjson.dumps({"object": "list", "data": [entry]})
        if path == "/sim/stats":
            return 200, {}, orjson.dumps(self.stats())
        if path == "/sim/answers":
            return 200, {}, orjson.dumps({k.hex(): v for k, v in self.answers.items()})
        if path == "/sim/reset":
            self.reset()
            return 200, {}, b"{}"
        if method == "POST" and path.endswith(("/chat/completions", "/completions")):
            return await self.complete(replica, body, path.endswith("/chat/completions"))
        return 404, {}, b'{"error": "not found"}'

    def work_s(self, prompt_tokens: int, completion_tokens: int, digest: bytes, attempt: int) -> float:
        """A request's work in seconds at a full batch: prefill + decode, times a lognormal jitter,
        a Pareto tail for ``tail_rate`` of the attempts (at most ``TAIL_MAX`` x), and for
        ``stall_rate`` of them a stall that outlasts twice the clients' ``timeout_s`` even alone
        on the replica. Drawn from the seed, the body and the attempt: a retry draws afresh."""
        base = (prompt_tokens / self.prefill + completion_tokens / self.decode) * self.scale
        rng = random.Random(unit(self.seed, "latency", digest, attempt))
        if rng.random() < self.stall_rate:
            return 2.0 * self.timeout_s / max(self.batch_floor, 1e-3)
        factor = math.exp(rng.gauss(0.0, self.jitter)) if self.jitter > 0 else 1.0
        if rng.random() < self.tail_rate:
            factor *= min(TAIL_MAX, rng.paretovariate(TAIL_ALPHA))
        return base * factor

    async def complete(self, replica: int, body: bytes, chat: bool) -> tuple[int, dict, bytes] | None:
        c = self.counts
        c["requests"] += 1
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            return 400, {}, b'{"error": "bad json"}'
        digest = body_digest(req)
        attempt = self.attempts_by_body.get(digest, 0)
        self.attempts_by_body[digest] = attempt + 1
        draw = unit(self.seed, "error", digest, attempt)
        if draw < self.error_rate:  # deterministic per body and attempt: a retry may pass
            if draw < self.error_rate / 2:
                c["errors_500"] += 1
                return 500, {}, b'{"error": "simulated internal error"}'
            c["resets"] += 1
            return None
        now = self.now()
        batch = self.batches[replica]
        if self.in_flight[replica] >= self.slots:
            c["rejected_429"] += 1
            msgs = req.get("messages") if chat else [{"content": req.get("prompt") or ""}]
            full = self.stages.setdefault(
                stage_of("\n".join(m.get("content") or "" for m in msgs or [])), _Stage()
            )
            full.rejected += 1
            full.rejected_before_ok += full.ok == 0  # the client had no answer of the stage to learn from
            return (
                429,
                {"Retry-After": str(max(1, math.ceil(batch.next_finish_s())))},
                b'{"error": "replica full"}',
            )
        messages = req.get("messages") if chat else [{"role": "user", "content": req.get("prompt") or ""}]
        stage, text = self.script.answer(messages or [])
        prompt_tokens = sum(estimate_tokens(m.get("content") or "") + 8 for m in messages or [])
        completion_tokens = min(estimate_tokens(text), int(req.get("max_tokens") or 1 << 30))
        work = self.work_s(prompt_tokens, completion_tokens, digest, attempt)
        st = self.stages.setdefault(stage, _Stage())
        if self.ok_bodies.get(digest) and len(self.again) < 100:
            self.again.append((stage, round(now - self.answered_at.get(digest, now), 4)))
        st.requests += 1
        st.first = now if st.first is None else st.first
        self.first = now if self.first is None else self.first
        self.in_flight[replica] += 1
        total = sum(self.in_flight)
        self.max_in_flight = max(self.max_in_flight, total)
        self.max_per_replica[replica] = max(self.max_per_replica[replica], self.in_flight[replica])
        t_in = time.monotonic()
        try:
            await batch.run(work)
        finally:  # answered or aborted (the client went away): the slot was busy all along
            self.in_flight[replica] -= 1
            held = time.monotonic() - t_in
            self.slot_seconds += held
            st.busy += held
            self._occupy(now, now + held)
        st.ok += 1
        st.last = self.last = self.now()
        st.prompt_tokens += prompt_tokens
        st.completion_tokens += completion_tokens
        c["ok"] += 1
        self.ok_bodies[digest] = self.ok_bodies.get(digest, 0) + 1
        self.answered_at[digest] = st.last
        task = asyncio.current_task()
        if task is not None:
            self._unsent[task] = (digest, st)
        self.answers[digest] = hashlib.sha256(text.encode()).hexdigest()
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        obj = "chat.completion" if chat else "text_completion"
        # The id carries the SHA-256 of the request body: each cached answer can be checked
        # against the request it was stored for (``swapped`` in ``bench fleet``).
        data = {
            "id": f"chatcmpl-{digest.hex()}",
            "object": obj,
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }
        return 200, {}, orjson.dumps(data)


async def _serve(cfg: Mapping[str, Any]) -> None:
    fleet = _Fleet(cfg)
    servers = []
    for r in range(fleet.replicas):

        async def handler(reader: Any, writer: Any, _r: int = r) -> None:
            await fleet.handle(_r, reader, writer)

        servers.append(await asyncio.start_server(handler, "127.0.0.1", 0, backlog=4096, limit=1 << 24))
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    sys.stdout.write(orjson.dumps({"ports": ports}).decode() + "\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    # The parent closes our stdin (or dies): stop then, so a simulator never outlives its bench.
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set_result, None)), daemon=True
    ).start()
    await stop
    sys.stdout.flush()
    os._exit(0)  # at once: keep-alive connections still open need no orderly goodbye


class FleetSimulator:
    """A simulated fleet in a child process; a context manager (see the module docstring).

    Args:
        replicas: HTTP servers (one port each).
        slots: sequences each replica runs at once; beyond them: 429 + Retry-After.
        prefill_tok_s, decode_tok_s: per-sequence prefill and decode rates (the latency model).
        error_rate: share of attempts failing at once (half HTTP 500, half connection reset).
        seed: every scripted answer and injected error is derived from it.
        time_scale: multiplies every latency (1.0: the rates as given).
        batch_floor: a decode step's cost alone, as a share of a full batch's (1.0: latency does
            not depend on the batch); see ``_Batch``.
        jitter, tail_rate, stall_rate: lognormal sigma of each request's work, share of attempts
            in the Pareto tail (at most ``TAIL_MAX`` x), share that stall past ``timeout_s``.
        timeout_s: the clients' per-attempt timeout (a stall lasts twice it, then is aborted
            when the client goes away).
        rates: pass rates overriding ``DEFAULT_RATES``.
        model, root, max_model_len: what ``/v1/models`` lists.
    """

    def __init__(
        self,
        replicas: int = 2,
        slots: int = 128,
        prefill_tok_s: float = 500.0,
        decode_tok_s: float = 30.0,
        error_rate: float = 0.01,
        seed: int = 0,
        *,
        time_scale: float = 1.0,
        batch_floor: float = BATCH_FLOOR,
        jitter: float = JITTER,
        tail_rate: float = TAIL_RATE,
        stall_rate: float = STALL_RATE,
        timeout_s: float = 120.0,
        rates: Mapping[str, float] | None = None,
        model: str = "sim/fleet-32b",
        root: str = "sim/fleet-32b@sim",
        max_model_len: int = 32768,
    ) -> None:
        unknown = set(rates or {}) - set(DEFAULT_RATES)
        if unknown:
            raise ValueError(f"unknown pass rates {sorted(unknown)}; known: {sorted(DEFAULT_RATES)}")
        self.config = {
            "replicas": replicas,
            "slots": slots,
            "prefill_tok_s": prefill_tok_s,
            "decode_tok_s": decode_tok_s,
            "error_rate": error_rate,
            "seed": seed,
            "time_scale": time_scale,
            "batch_floor": batch_floor,
            "jitter": jitter,
            "tail_rate": tail_rate,
            "stall_rate": stall_rate,
            "timeout_s": timeout_s,
            "rates": dict(rates or {}),
            "model": model,
            "root": root,
            "max_model_len": max_model_len,
        }
        self.model = model
        self.base_urls: list[str] = []
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> FleetSimulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the simulator process and wait for its ports."""
        cmd = [sys.executable, "-m", "ragsft_assets.bench.fleet_sim", orjson.dumps(self.config).decode()]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the fleet simulator did not start (see its stderr above)")
        ports = orjson.loads(line)["ports"]
        self.base_urls = [f"http://127.0.0.1:{p}/v1" for p in ports]

    def stop(self) -> None:
        """Stop the simulator process (closing its stdin; killed if it lingers)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _call(self, method: str, path: str) -> dict[str, Any]:
        import httpx

        root = self.base_urls[0].removesuffix("/v1")
        resp = httpx.request(method, f"{root}{path}", timeout=60.0)
        resp.raise_for_status()
        return orjson.loads(resp.content)

    def stats(self) -> dict[str, Any]:
        """The fleet's counters since the last reset (see the module docstring)."""
        return self._call("GET", "/sim/stats")

    def answers(self) -> dict[str, str]:
        """Per request body answered 200 since the last reset: its SHA-256 (hex) -> the SHA-256
        of the answer text the fleet sent for it."""
        return self._call("GET", "/sim/answers")

    def reset_stats(self) -> None:
        """Zero every counter (the scripted model keeps what it drafted)."""
        self._call("POST", "/sim/reset")


if __name__ == "__main__":
    asyncio.run(_serve(orjson.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
