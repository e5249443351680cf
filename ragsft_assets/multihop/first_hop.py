"""The ``first_hop`` filter (a fifth ablation): does the question's descriptor, read in A alone, lead to B?

The judge gets document A and the question, without B, and must name the entity that the question's
descriptor points to. The form is generative on purpose: the card reports that showing B and asking
to validate the hop does not separate good questions from bad. The name is compared with B's title
and alias, normalized as the answers are (case, accents, punctuation, articles; a title's
parenthetical qualifier such as "(département)" is optional).

Verdicts: ``leads_to_b`` (kept), ``other_entity``, ``several_entities``, ``a_lacks_property``,
``unreadable`` (the reply is not the JSON object asked for: a verdict, never a crash). One call per
question at temperature 0, thinking switched off (``enable_thinking: false``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.llm.types import ChatModel, SamplingParams
from ragsft_assets.multihop.normalize import normalize_text
from ragsft_assets.multihop.targeted_judges import chat_without_thinking, verdict_schema
from ragsft_assets.prompts import PromptTemplate

STAGE = "first_hop"
TASK = "multihop_first_hop"
LEADS_TO_B = "leads_to_b"
OTHER_ENTITY = "other_entity"
SEVERAL_ENTITIES = "several_entities"
A_LACKS_PROPERTY = "a_lacks_property"
UNREADABLE = "unreadable"
VERDICTS = (LEADS_TO_B, OTHER_ENTITY, SEVERAL_ENTITIES, A_LACKS_PROPERTY, UNREADABLE)
PARAMS = SamplingParams(temperature=0.0, max_tokens=96)
# The reply's bounds go to the model with the call (structured output): the status is one of the
# three the verdicts read, an entity is a name (at most 200 characters), nothing else is written.
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "entity": {"type": ["string", "null"], "maxLength": 200},
        "status": {"type": "string", "enum": ["one", "several", "none"]},
    },
    "required": ["entity", "status"],
    "additionalProperties": False,
}
_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)

FIRST_HOP_SCHEMA = verdict_schema(("entity", pa.string()))


@dataclass(frozen=True, slots=True)
class FirstHopItem:
    """One question with its source document A and its bridge B's names."""

    id: str
    question: str
    a_title: str
    a_text: str
    b_title: str
    alias: str


def names_of_b(b_title: str, alias: str) -> set[str]:
    """B's title and alias, normalized, each with and without a final parenthetical qualifier."""
    out = set()
    for name in (b_title, alias):
        if name:
            out.add(normalize_text(name))
            out.add(normalize_text(_QUALIFIER.sub("", name)))
    out.discard("")
    return out


def parse_reply(text: str) -> tuple[str, str | None] | None:
    """``(status, entity)`` from the judge's JSON reply, or None when it cannot be read."""
    m = _JSON_OBJECT.search(text or "")
    if m is None:
        return None
    try:
        obj = orjson.loads(m.group(0))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("status") not in ("one", "several", "none"):
        return None
    entity = obj.get("entity")
    if obj["status"] == "one" and (not isinstance(entity, str) or not entity.strip()):
        return None
    return obj["status"], entity if isinstance(entity, str) else None


def verdict_of(reply: tuple[str, str | None] | None, item: FirstHopItem) -> str:
    """The verdict for one parsed reply."""
    if reply is None:
        return UNREADABLE
    status, entity = reply
    if status == "several":
        return SEVERAL_ENTITIES
    if status == "none":
        return A_LACKS_PROPERTY
    return (
        LEADS_TO_B if normalize_text(entity or "") in names_of_b(item.b_title, item.alias) else OTHER_ENTITY
    )


def build_messages(template: PromptTemplate, item: FirstHopItem) -> list[dict[str, str]]:
    """The one-turn conversation: A and the question, never B."""
    return [
        {
            "role": "user",
            "content": template.render(title=item.a_title, text=item.a_text, question=item.question),
        }
    ]


def run_first_hop(
    items: Sequence[FirstHopItem], judge: ChatModel, template: PromptTemplate, log: Any = None
) -> pa.Table:
    """Judge every item once (sorted by id); one row per item with its verdict and the raw reply."""
    items = sorted(items, key=lambda it: it.id)
    conversations = [build_messages(template, it) for it in items]
    batch = chat_without_thinking(judge, conversations, PARAMS, JSON_SCHEMA, template, log)
    rows = []
    for it, res in zip(items, batch.results, strict=True):
        reply = parse_reply(res.text) if res.ok else None
        rows.append(
            {
                "id": it.id,
                "verdict": verdict_of(reply, it),
                "entity": reply[1] if reply else None,
                "raw": res.text,
                "cache_key": res.cache_key,
            }
        )
    return pa.Table.from_pylist(rows, schema=FIRST_HOP_SCHEMA)
