"""The ``criteria_annotation`` filter: six binary criteria per question of ``default``.

The annotator reads both documents, the question and the answer, and says for each criterion
whether it holds. A question is kept (in the annotator's config, the entry of published_configs.py
that this filter makes) only if all six hold. A question the annotator never answered readably
(failed call, unparseable reply, or left out by the budget) gets ``not_annotated``: excluded from the
config but not counted as rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.arrow_schemas import STRING_LIST, columns
from ragsft_assets.llm.types import ChatModel, SamplingParams
from ragsft_assets.multihop.targeted_judges import (
    JudgeItem,
    chat_without_thinking,
    judge_messages,
    verdict_schema,
)
from ragsft_assets.prompts import PromptTemplate

STAGE = "criteria_annotation"
TASK = "multihop_criteria"
CRITERIA = (
    "correct_answer",
    "bridge_in_a",
    "fact_in_b",
    "both_documents_needed",
    "clear_question",
    "minimal_answer",
)
KEPT = "kept"
FAILS_CRITERIA = "fails_criteria"
NOT_ANNOTATED = "not_annotated"
VERDICTS = (KEPT, FAILS_CRITERIA, NOT_ANNOTATED)
PARAMS = SamplingParams(temperature=0.0, max_tokens=160)
JSON_SCHEMA = {  # six booleans and nothing else: the model cannot run on past them
    "type": "object",
    "properties": {c: {"type": "boolean"} for c in CRITERIA},
    "required": list(CRITERIA),
    "additionalProperties": False,
}
CRITERIA_SCHEMA = verdict_schema(("failed", STRING_LIST), *columns(pa.bool_(), *CRITERIA))


CriteriaItem = JudgeItem  # the annotator reads what the targeted judges read


def parse_reply(text: str | None) -> dict[str, bool] | None:
    """The six booleans of a reply, or None when it is not the JSON object asked for."""
    start, end = (text or "").find("{"), (text or "").rfind("}")
    if start < 0 or end < start:
        return None
    try:
        obj = orjson.loads(text[start : end + 1])  # type: ignore[index]
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(c), bool) for c in CRITERIA):
        return None
    return {c: obj[c] for c in CRITERIA}


def run_criteria(
    items: Sequence[CriteriaItem],
    annotator: ChatModel,
    template: PromptTemplate,
    max_questions: int | None = None,
    log: Any = None,
) -> pa.Table:
    """Annotate the items (sorted by id; the first ``max_questions`` only): one row per item.

    Items past the budget and unreadable replies are ``not_annotated`` with null criteria.
    """
    items = sorted(items, key=lambda it: it.id)
    budget = len(items) if max_questions is None else max(0, min(max_questions, len(items)))
    asked = items[:budget]
    conversations = [judge_messages(template, it) for it in asked]
    batch = chat_without_thinking(annotator, conversations, PARAMS, JSON_SCHEMA, template, log)
    rows = []
    for i, it in enumerate(items):
        res = batch.results[i] if i < budget else None
        marks = parse_reply(res.text) if res is not None and res.ok else None
        failed = [c for c in CRITERIA if marks is not None and not marks[c]]
        verdict = NOT_ANNOTATED if marks is None else (FAILS_CRITERIA if failed else KEPT)
        rows.append(
            {
                "id": it.id,
                "verdict": verdict,
                "failed": failed if marks is not None else None,
                **{c: (marks[c] if marks is not None else None) for c in CRITERIA},
                "raw": res.text if res is not None else None,
                "cache_key": res.cache_key if res is not None else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=CRITERIA_SCHEMA)
