"""The two train-only steps of the targeted judges' config, after the bridge and language judges.

The HotpotQA-fr card (001) counts them in its table: "Écartées par le score de publiabilité
(train) 17 197", "Écartées par le contrôle des descripteurs (train) 1 512" and "Sans verdict du
contrôle des descripteurs (train) 46". It names the steps and their split, not their prompts, scale
or threshold: those are ours (``prompts/multihop_publishability.*``,
``prompts/multihop_descriptor_check.*``, the recipe's ``publishability_min_score``), written in the
way of the card's two judges ("Le prompt fait écrire au juge une analyse courte avant son verdict",
"raisonnement désactivé (enable_thinking = false), à température 0").

- ``publishability_score``: the judge writes a short analysis, then a score from 1 to 5; a question
  scored under the threshold is dropped (``below_publishability_threshold``).
- ``descriptor_check``: on what the score keeps; the judge reads the descriptor the bridge judge
  copied ("Le juge recopie le descripteur de la question qui doit désigner l'entité-pont") and
  checks that it is a part of the question, does not give B away, and says nothing A does not state.

A reply that is not the object asked for is ``unreadable``: no verdict, dropped and counted apart,
as the card counts its 46. Dagster-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.prompts import PromptTemplate

PUBLISHABILITY_STAGE, PUBLISHABILITY_TASK = "publishability_score", "multihop_publishability"
DESCRIPTOR_STAGE, DESCRIPTOR_TASK = "descriptor_check", "multihop_descriptor_check"
KEPT, UNREADABLE = tj.KEPT, tj.UNREADABLE
BELOW_THRESHOLD = "below_publishability_threshold"
SCORE_MIN, SCORE_MAX = 1, 5  # ours: the card gives the step, not its scale
PUBLISHABILITY_VERDICTS = (KEPT, BELOW_THRESHOLD, UNREADABLE)
PUBLISHABILITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "analysis": {"type": "string", "maxLength": tj.ANALYSIS_MAX_CHARS},
        "publishability": {"type": "integer", "minimum": SCORE_MIN, "maximum": SCORE_MAX},
    },
    "required": ["analysis", "publishability"],
    "additionalProperties": False,
}
DESCRIPTOR = tj.Judge(
    DESCRIPTOR_STAGE,
    (
        ("descriptor_in_question", True, "descriptor_not_in_question"),
        ("descriptor_hides_bridge", True, "descriptor_reveals_bridge"),
        ("descriptor_stated_by_a", True, "descriptor_not_stated_by_a"),
    ),
)
VERDICT_SCHEMA = tj.verdict_schema(
    ("score", pa.int32()),  # the publishability score (null for the descriptor check)
    ("analysis", pa.string()),
)


@dataclass(frozen=True, slots=True)
class TrainItem(tj.JudgeItem):
    """One train question as the targeted judges see it, plus ``descriptor``: the bridge judge's copy."""

    descriptor: str = ""


def descriptor_of(raw: str | None) -> str:
    """The ``descriptor`` the bridge judge copied, from its raw reply ("" when there is none)."""
    start, end = (raw or "").find("{"), (raw or "").rfind("}")
    if start < 0 or end < start:
        return ""
    try:
        obj = orjson.loads((raw or "")[start : end + 1])
    except orjson.JSONDecodeError:
        return ""
    value = obj.get("descriptor") if isinstance(obj, dict) else None
    return value.strip() if isinstance(value, str) else ""


def score_verdict(text: str | None, min_score: int) -> tuple[str, int | None, str | None]:
    """``(verdict, score, analysis)`` of one publishability reply: kept at ``min_score`` or more."""
    start, end = (text or "").find("{"), (text or "").rfind("}")
    if start < 0 or end < start:
        return UNREADABLE, None, None
    try:
        obj = orjson.loads((text or "")[start : end + 1])
    except orjson.JSONDecodeError:
        return UNREADABLE, None, None
    score = obj.get("publishability") if isinstance(obj, dict) else None
    # a bool is an int in Python: true is no score
    if not isinstance(score, int) or isinstance(score, bool) or not SCORE_MIN <= score <= SCORE_MAX:
        return UNREADABLE, None, None
    analysis = obj.get("analysis") if isinstance(obj.get("analysis"), str) else None
    return (KEPT if score >= min_score else BELOW_THRESHOLD), score, analysis


def _chat(
    items: Sequence[TrainItem], model: ChatModel, template: PromptTemplate, schema: dict[str, Any], log: Any
) -> list[Any]:
    """One call per item, in the given order, at temperature 0 without thinking (as the card's judges)."""
    conversations = [tj.judge_messages(template, it) for it in items]
    return list(tj.chat_without_thinking(model, conversations, tj.PARAMS, schema, template, log).results)


def run_publishability(
    items: Sequence[TrainItem], model: ChatModel, template: PromptTemplate, min_score: int, log: Any = None
) -> pa.Table:
    """The publishability score of every item (sorted by id): one row each, kept at ``min_score``+."""
    items = sorted(items, key=lambda it: it.id)
    rows = []
    for it, res in zip(items, _chat(items, model, template, PUBLISHABILITY_SCHEMA, log), strict=True):
        verdict, score, analysis = score_verdict(res.text, min_score) if res.ok else (UNREADABLE, None, None)
        rows.append(
            {
                "id": it.id,
                "verdict": verdict,
                "score": score,
                "analysis": analysis,
                "raw": res.text,
                "cache_key": res.cache_key,
            }
        )
    return pa.Table.from_pylist(rows, schema=VERDICT_SCHEMA)


def run_descriptor_check(
    items: Sequence[TrainItem], model: ChatModel, template: PromptTemplate, log: Any = None
) -> pa.Table:
    """The descriptor check of every item (sorted by id): kept, the first failed check, or unreadable."""
    items = sorted(items, key=lambda it: it.id)
    rows = []
    for it, res in zip(items, _chat(items, model, template, DESCRIPTOR.json_schema, log), strict=True):
        verdict, analysis = tj.verdict_of(DESCRIPTOR, res.text) if res.ok else (UNREADABLE, None)
        rows.append(
            {
                "id": it.id,
                "verdict": verdict,
                "score": None,
                "analysis": analysis,
                "raw": res.text,
                "cache_key": res.cache_key,
            }
        )
    return pa.Table.from_pylist(rows, schema=VERDICT_SCHEMA)


def train_only_kept(kept_before: set[str], scored: set[str], descriptor_kept: set[str]) -> set[str]:
    """The targeted judges' config: what the two judges keep, less the questions the train-only steps saw
    (``scored``: the train ones) and did not keep; validation and test are not seen by them
    ("(train)" in the card), so they keep the judges' verdict."""
    return {i for i in kept_before if i not in scored or i in descriptor_kept}
