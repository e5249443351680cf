"""The four judged ablations, run as a cascade with prompt deduplication.

Ablations (what the judge sees -> what it must answer):

- ``ab``: documents a and b -> the gold answer;
- ``a``: document a alone -> IMPOSSIBLE;
- ``b``: document b alone -> IMPOSSIBLE;
- ``none``: no document -> IMPOSSIBLE.

The cascade runs one ablation kind per round in a fixed order (configurable,
never adapted during a run): a question stops at the first ablation it fails, so
likely failures go first. Within a run, identical prompts are sent once: the
judge's reply is shared by every question that asks it (same question text on
the same documents). Every verdict keeps the judge's raw text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import pyarrow as pa

from ragsft_assets.arrow_schemas import strings
from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm.types import BatchStats, ChatModel, SamplingParams
from ragsft_assets.multihop.normalize import answer_matches, is_impossible, normalize_text
from ragsft_assets.multihop.targeted_judges import JudgeItem  # a question and its documents a and b
from ragsft_assets.prompts import PromptTemplate, load_prompt

ABLATIONS = ("ab", "a", "b", "none")
PROMPT_TASK = "multihop_ablation"
# The layout of the documents in the judge's prompt, per language, is template text too (a document:
# ``{n}``, ``{title}``, ``{text}``; no document at all): an edit marks the stage stale.
DOCUMENT_TASK, NO_DOCUMENT_TASK = "multihop_ablation_document", "multihop_ablation_no_document"
PROMPT_TASKS = (PROMPT_TASK, DOCUMENT_TASK, NO_DOCUMENT_TASK)
# derived from the card's counts: A+B, then B alone, then A alone, then none; they decompose exactly so
# (590,596 judge calls for 281,119 judged questions, 2.10 per question; see CARD_CALLS_PER_JUDGED).
DEFAULT_ORDER = ("ab", "b", "a", "none")
CARD_JUDGE_CALLS, CARD_JUDGED = 590_596, 281_119
CARD_CALLS_PER_JUDGED = round(CARD_JUDGE_CALLS / CARD_JUDGED, 2)
# ours: without thinking (the card's judge, Mistral-Small-3.2-24B-Instruct-2506-FP8, does not reason):
# 48 tokens hold the verdict, not a reasoning.
JUDGE_PARAMS = SamplingParams(temperature=0.0, max_tokens=48, enable_thinking=False)

PASS, FAIL, UNREADABLE = "pass", "fail", "unreadable"
SUFFICES = {"a": "a_alone_suffices", "b": "b_alone_suffices", "none": "no_document_suffices"}
NOT_IMPOSSIBLE = {
    "a": "a_alone_not_impossible",
    "b": "b_alone_not_impossible",
    "none": "no_document_not_impossible",
}
AB_FAILS = "ab_fails"
JUDGE_UNREADABLE = "judge_unreadable"
REJECTION_REASONS = (AB_FAILS, *SUFFICES.values(), *NOT_IMPOSSIBLE.values(), JUDGE_UNREADABLE)

VERDICTS_SCHEMA = pa.schema(
    [
        *strings("id", "ablation"),
        ("round", pa.int32()),
        *strings("prompt_key", "cache_key"),
        ("shared", pa.bool_()),  # answered by a call made for another question (deduplicated)
        *strings("raw", "normalized", "outcome", "reason"),
    ]
)


def validate_order(order: Sequence[str]) -> tuple[str, ...]:
    """The order as a tuple; each of the four ablations exactly once, else ValueError."""
    order = tuple(order)
    if sorted(order) != sorted(ABLATIONS):
        raise ValueError(f"cascade order must list each of {ABLATIONS} exactly once, got {order}")
    return order


class Verdict(NamedTuple):
    """A question's final verdict over its ablations: ``kept`` | ``dropped`` | ``unreadable``."""

    verdict: str
    reason: str


class Outcome(NamedTuple):
    """A question's final verdict, with the cache keys of every judge call it used (its ledger row)."""

    verdict: str
    reason: str
    cache_keys: list[str]


@dataclass(slots=True)
class CascadeResult:
    verdicts: pa.Table
    outcome: dict[str, Outcome]  # by question id
    judge_calls: int = 0
    rounds: list[dict[str, int]] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)


def build_ablation_messages(
    template: PromptTemplate, item: JudgeItem, kind: str, lang: str
) -> list[dict[str, str]]:
    """The judge conversation of one ablation kind for one question."""
    docs = {
        "ab": [(item.a_title, item.a_text), (item.b_title, item.b_text)],
        "a": [(item.a_title, item.a_text)],
    }
    docs["b"] = [(item.b_title, item.b_text)]
    docs["none"] = []
    chosen = docs[kind]
    if chosen:
        layout = _layout(DOCUMENT_TASK, lang)
        context = "\n\n".join(layout.format(n=i + 1, title=t, text=x) for i, (t, x) in enumerate(chosen))
    else:
        context = _layout(NO_DOCUMENT_TASK, lang)
    return [{"role": "user", "content": template.render(context=context, question=item.question)}]


def _layout(task: str, lang: str) -> str:
    """A layout template's text without the file's final newline (the files end with one)."""
    return load_prompt(task, lang).text.removesuffix("\n")


def prompt_key(messages: Sequence[dict[str, str]]) -> str:
    """Identity of a prompt for deduplication (the cache adds model and params on top)."""
    return sha256_hex(orjson.dumps([dict(m) for m in messages], option=orjson.OPT_SORT_KEYS))[:24]


def judge_outcome(
    kind: str, gold: str, text: str, status_ok: bool, strict_impossible: bool
) -> tuple[str, str]:
    """(outcome, reason) of one ablation from the judge's reply."""
    if not status_ok or not text.strip():
        return UNREADABLE, JUDGE_UNREADABLE
    if kind == "ab":
        return (PASS, "ab_answers") if answer_matches(gold, text) else (FAIL, AB_FAILS)
    if is_impossible(text):
        return PASS, "impossible"
    if answer_matches(gold, text):
        return FAIL, SUFFICES[kind]
    return (FAIL, NOT_IMPOSSIBLE[kind]) if strict_impossible else (PASS, "wrong_answer")


def run_cascade(
    items: Sequence[JudgeItem],
    judge: ChatModel,
    template: PromptTemplate,
    order: Sequence[str] = DEFAULT_ORDER,
    lang: str = "fr",
    params: SamplingParams = JUDGE_PARAMS,
    strict_impossible: bool = True,
    log: Any = None,
) -> CascadeResult:
    """Judge every item through the cascade; returns verdict rows (sorted), outcomes and call counts."""
    order = validate_order(order)
    live = sorted(items, key=lambda it: it.id)
    answered: dict[str, Any] = {}  # prompt key -> ChatResult, across rounds
    rows: list[dict[str, Any]] = []
    keys: dict[str, list[str]] = {it.id: [] for it in live}
    outcome: dict[str, Outcome] = {}
    stats = BatchStats()
    calls = 0
    rounds = []
    for rnd, kind in enumerate(order):
        messages = {it.id: build_ablation_messages(template, it, kind, lang) for it in live}
        pkeys = {i: prompt_key(m) for i, m in messages.items()}
        to_send: dict[str, list[dict[str, str]]] = {}
        for it in live:  # first asker (by id) owns the call; later askers share it
            pk = pkeys[it.id]
            if pk not in answered and pk not in to_send:
                to_send[pk] = messages[it.id]
        if to_send:
            batch = judge.chat(list(to_send.values()), params, template_version=template.version, log=log)
            stats = stats.add(batch.stats)
            calls += len(to_send)
            answered.update(zip(to_send, batch.results, strict=True))
        owner: dict[str, str] = {}
        survivors = []
        failed = 0
        for it in live:
            pk = pkeys[it.id]
            res = answered[pk]
            shared = pk not in to_send or owner.setdefault(pk, it.id) != it.id
            verdict, reason = judge_outcome(kind, it.answer, res.text, res.ok, strict_impossible)
            keys[it.id].append(res.cache_key)
            rows.append(
                {
                    "id": it.id,
                    "ablation": kind,
                    "round": rnd,
                    "prompt_key": pk,
                    "cache_key": res.cache_key,
                    "shared": shared,
                    "raw": res.text,
                    "normalized": normalize_text(res.text),
                    "outcome": verdict,
                    "reason": reason,
                }
            )
            if verdict == PASS:
                survivors.append(it)
            else:
                failed += 1
                outcome[it.id] = Outcome(
                    UNREADABLE if verdict == UNREADABLE else "dropped", reason, keys[it.id]
                )
        rounds.append({"round": rnd, "asked": len(live), "calls": len(to_send), "failed": failed})
        live = survivors
    for it in live:
        outcome[it.id] = Outcome("kept", "passed_ablations", keys[it.id])
    rows.sort(key=lambda r: (r["id"], r["round"]))
    return CascadeResult(
        verdicts=pa.Table.from_pylist(rows, schema=VERDICTS_SCHEMA),
        outcome=outcome,
        judge_calls=calls,
        rounds=rounds,
        stats=stats,
    )


def outcomes_from_verdicts(verdicts: pa.Table, order: Sequence[str] = ABLATIONS) -> dict[str, Verdict]:
    """Per question: its :class:`Verdict` (``kept`` | ``dropped`` | ``unreadable``, reason) from its
    verdict rows.

    A question is kept when every one of the four ablations passed; otherwise the
    first non-passing verdict (by round) decides.
    """
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in verdicts.select(["id", "ablation", "round", "outcome", "reason"]).to_pylist():
        by_id.setdefault(r["id"], []).append(r)
    out: dict[str, Verdict] = {}
    for qid, rows in sorted(by_id.items()):
        rows.sort(key=lambda r: r["round"])
        bad = next((r for r in rows if r["outcome"] != PASS), None)
        if bad is not None:
            out[qid] = Verdict(UNREADABLE if bad["outcome"] == UNREADABLE else "dropped", bad["reason"])
        elif {r["ablation"] for r in rows} >= set(order):
            out[qid] = Verdict("kept", "passed_ablations")
        else:
            out[qid] = Verdict("dropped", "ablations_incomplete")
    return out


def judge_call_count(verdicts: pa.Table) -> int:
    """Calls the cascade made: verdict rows not served from another question's call."""
    return sum(1 for s in verdicts["shared"].to_pylist() if not s)
