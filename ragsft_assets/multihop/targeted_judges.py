"""The two targeted judges run on the annotator's config (the six-criteria one): ``bridge_judge`` then
``language_judge``, the filters of the config that filters it (published_configs.py).

Each prompt has the judge write a short analysis first, then its verdict fields (JSON schema,
temperature 0, thinking off). A reply that is not the object asked for is ``unreadable`` (dropped,
counted), never a crash.

- ``bridge_judge``: copy the question's descriptor of the bridge entity, reread all of A, list every
  entity of A it could designate. Kept only if B is the only candidate, A states the relation, and
  the question does not already name B by itself.
- ``language_judge``: fluent question, unique referents, no meta wording, answer of the right type
  and scope. The first failed check (in that order) is the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.arrow_schemas import strings
from ragsft_assets.llm.types import BatchResult, ChatModel, Message, SamplingParams
from ragsft_assets.prompts import PromptTemplate

KEPT = "kept"
UNREADABLE = "unreadable"
PARAMS = SamplingParams(temperature=0.0, max_tokens=400)  # room for the analysis before the verdict
NO_THINKING = {"enable_thinking": False}
# the card: "Le prompt fait écrire au juge une analyse courte avant son verdict."; the bound is
# ours, so that a model cannot run to max_tokens in it
ANALYSIS_MAX_CHARS = 600


@dataclass(frozen=True, slots=True)
class Judge:
    """One targeted judge: its stage, boolean checks and the reason when a check fails.

    ``checks`` are ``(field, value that keeps, reason when it does not)`` in the order they are read.
    """

    stage: str
    checks: tuple[tuple[str, bool, str], ...]
    extra: tuple[tuple[str, dict[str, Any]], ...] = ()

    @property
    def task(self) -> str:
        """The prompt task: ``multihop_<stage>`` (the templates are named after the stage)."""
        return f"multihop_{self.stage}"

    @property
    def verdicts(self) -> tuple[str, ...]:
        return (KEPT, *[r for _, _, r in self.checks], UNREADABLE)

    @property
    def json_schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {"analysis": {"type": "string", "maxLength": ANALYSIS_MAX_CHARS}}
        props.update(dict(self.extra))
        props.update({f: {"type": "boolean"} for f, _, _ in self.checks})
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


BRIDGE = Judge(
    "bridge_judge",
    (
        ("b_only_candidate", True, "several_candidates"),
        ("a_states_relation", True, "relation_not_stated"),
        ("question_names_b", False, "question_names_b"),
    ),
    (
        ("descriptor", {"type": "string", "maxLength": 200}),
        ("candidates", {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 20}),
    ),
)
LANGUAGE = Judge(
    "language_judge",
    (
        ("fluent", True, "not_fluent"),
        ("unique_referents", True, "ambiguous_referent"),
        ("no_meta_wording", True, "meta_wording"),
        ("answer_type_and_scope", True, "answer_type_or_scope"),
    ),
)
JUDGES = {j.stage: j for j in (BRIDGE, LANGUAGE)}


def verdict_schema(*fields: pa.Field | tuple[str, pa.DataType]) -> pa.Schema:
    """The table of a judged stage: each question's ``id`` and ``verdict``, what the stage reads
    from the reply (``fields``), then the ``raw`` reply and its LLM ``cache_key``."""
    return pa.schema([*strings("id", "verdict"), *fields, *strings("raw", "cache_key")])


VERDICT_SCHEMA = verdict_schema(("analysis", pa.string()))


@dataclass(frozen=True, slots=True)
class JudgeItem:
    """A question, its answer and its two documents: what the criteria annotator and the judges read."""

    id: str
    question: str
    answer: str
    a_title: str
    a_text: str
    b_title: str
    b_text: str


def judge_messages(template: PromptTemplate, item: JudgeItem) -> list[dict[str, str]]:
    """The one-turn conversation: the template reads every field of ``item`` but its id (both
    documents, the question and its answer; a ``train_checks.TrainItem``'s descriptor too)."""
    fields = {k: v for k, v in asdict(item).items() if k != "id"}
    return [{"role": "user", "content": template.render(**fields)}]


def chat_without_thinking(
    model: ChatModel,
    conversations: Sequence[Sequence[Message]],
    params: SamplingParams,
    json_schema: dict[str, Any],
    template: PromptTemplate,
    log: Any = None,
) -> BatchResult:
    """How the card's judges and annotators are asked: one call per conversation, thinking off, the
    reply bound by ``json_schema``, cached under ``template``'s version."""
    return model.chat(
        conversations,
        params,
        json_schema=json_schema,
        template_version=template.version,
        log=log,
        chat_template_kwargs=NO_THINKING,
    )


def verdict_of(judge: Judge, text: str | None) -> tuple[str, str | None]:
    """``(verdict, analysis)`` of one reply: kept, the first failed check's reason, or unreadable."""
    start, end = (text or "").find("{"), (text or "").rfind("}")
    if start < 0 or end < start:
        return UNREADABLE, None
    try:
        obj = orjson.loads(text[start : end + 1])  # type: ignore[index]
    except orjson.JSONDecodeError:
        return UNREADABLE, None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(f), bool) for f, _, _ in judge.checks):
        return UNREADABLE, None
    analysis = obj.get("analysis") if isinstance(obj.get("analysis"), str) else None
    for field, keep, reason in judge.checks:
        if obj[field] is not keep:
            return reason, analysis
    return KEPT, analysis


def run_judge(
    judge: Judge, items: Sequence[JudgeItem], model: ChatModel, template: PromptTemplate, log: Any = None
) -> pa.Table:
    """One call per item (sorted by id) at temperature 0; one row per item with its verdict."""
    items = sorted(items, key=lambda it: it.id)
    conversations = [judge_messages(template, it) for it in items]
    batch = chat_without_thinking(model, conversations, PARAMS, judge.json_schema, template, log)
    rows = []
    for it, res in zip(items, batch.results, strict=True):
        verdict, analysis = verdict_of(judge, res.text) if res.ok else (UNREADABLE, None)
        rows.append(
            {
                "id": it.id,
                "verdict": verdict,
                "analysis": analysis,
                "raw": res.text,
                "cache_key": res.cache_key,
            }
        )
    return pa.Table.from_pylist(rows, schema=VERDICT_SCHEMA)
