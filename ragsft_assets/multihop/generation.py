"""Question drafts: the first drawn (source a, bridge b) pairs, prompt the generator, parse its JSON into rows.

One generator call per pair asks for ``drafts_per_pair`` bridge questions; draft
``i`` of pair (a, b) has the id ``question_id(a_id, b_id, i)`` whatever the model
wrote. Every draft slot becomes a row: ``ok`` (parsed), ``unreadable`` (the call's
text did not match the schema; raw text kept) or ``missing`` (the model wrote
fewer questions than asked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ragsft_assets.arrow_schemas import columns, strings
from ragsft_assets.corpus.bridge_pairs import first_drawn
from ragsft_assets.ids import question_id
from ragsft_assets.llm.types import BatchStats, ChatModel, SamplingParams
from ragsft_assets.prompts import PromptTemplate

PRODUCT = "multihop"
STATUS_OK, STATUS_UNREADABLE, STATUS_MISSING = "ok", "unreadable", "missing"
MAX_ANSWER_WORDS, MAX_ANSWER_CHARS = 10, 70  # the card's bounds; a recipe carries the values a run uses
QUESTION_MAX_CHARS = 300  # ours: the card bounds the answer, not the question


def draft_json_schema(n: int, max_words: int, max_chars: int) -> dict[str, Any]:
    """The generation's JSON schema, with the card's bounds so constrained decoding stops the model.

    At most ``n`` questions (at least one: the card's 324,944 generated questions are no multiple of
    3, so a pair may give fewer); an answer of at most ``max_chars`` characters and ``max_words``
    whitespace-separated words (a pattern: JSON Schema counts no words); no negative support index.
    The local checks apply the same bounds again (and the ones a schema cannot: indices within the
    document, at least one per document). vLLM sends a string bounded by both a pattern and a
    length to its guidance backend; xgrammar would keep the pattern only (it warns), so the word
    bound holds either way and the reply is validated against the whole schema after the call.
    """
    # words of bounded length, one space apart, nothing before or after: a small model cannot
    # pad the answer with whitespace, and a backend that drops maxLength still bounds it
    word = rf"[^\s]{{1,{max_chars}}}"
    # ours, not the card's: a question of at most 300 characters and at most 10 indices per
    # document, so no string or array runs to max_tokens
    indices = {"type": "array", "maxItems": 10, "items": {"type": "integer", "minimum": 0}}
    return {
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "minItems": 1,
                "maxItems": n,
                "items": {
                    "type": "object",
                    "properties": {
                        "question": {"type": "string", "maxLength": QUESTION_MAX_CHARS},
                        "answer": {  # an empty answer is left to the local check that names it
                            "type": "string",
                            "maxLength": max_chars,
                            "pattern": rf"^({word}( {word}){{0,{max_words - 1}}})?$",
                        },
                        "support_a": indices,
                        "support_b": indices,
                    },
                    "required": ["question", "answer", "support_a", "support_b"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["questions"],
        "additionalProperties": False,
    }


DRAFTS_SCHEMA = pa.schema(
    [
        *strings("id", "pair_id"),
        ("draft_index", pa.int32()),
        *strings("split", "a_id", "a_title", "b_id", "b_title", "alias", "question", "answer"),
        *columns(pa.list_(pa.int32()), "support_a", "support_b"),
        *strings("status", "error", "raw", "cache_key", "template_version"),
    ]
)

# Without thinking, as the card generates (a role's own setting still wins, llm/thinking.py).
GENERATION_PARAMS = SamplingParams(temperature=0.7, max_tokens=768, enable_thinking=False)


@dataclass(frozen=True, slots=True)
class Pair:
    id: str
    a_id: str
    a_title: str
    b_id: str
    b_title: str
    alias: str
    split: str


@dataclass(frozen=True, slots=True)
class Doc:
    id: str
    title: str
    sentences: tuple[str, ...]
    split: str

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def docs_by_id(abstracts: pa.Table) -> dict[str, Doc]:
    """Abstract rows keyed by id (only the columns the multihop stages need)."""
    cols = abstracts.select(["id", "title", "sentences", "split"]).to_pydict()
    return {
        i: Doc(i, t, tuple(s or ()), sp)
        for i, t, s, sp in zip(cols["id"], cols["title"], cols["sentences"], cols["split"], strict=True)
    }


def first_pairs(
    bridge_pairs: pa.Table, docs: Mapping[str, Doc], max_pairs: int | None
) -> tuple[list[Pair], int]:
    """The first ``max_pairs`` pairs (all when None) of ``bridge_pairs``' seeded bridge-first order
    whose two documents exist; no new draw (see ``corpus.bridge_pairs``).

    Returns (pairs sorted by id, pairs left out because a document is missing from the abstracts).
    """
    a_ids, b_ids = bridge_pairs["a_id"].to_pylist(), bridge_pairs["b_id"].to_pylist()
    usable = [a in docs and b in docs for a, b in zip(a_ids, b_ids, strict=True)]
    chosen = first_drawn(bridge_pairs, max_pairs, pa.array(usable, pa.bool_()))
    cols = chosen.select(["id", "a_id", "a_title", "b_id", "b_title", "alias", "split"]).to_pylist()
    return [Pair(**c) for c in cols], len(usable) - sum(usable)


def numbered(sentences: Sequence[str]) -> str:
    """Sentences one per line, prefixed with their index: what the support indices point at."""
    return "\n".join(f"[{i}] {s.strip()}" for i, s in enumerate(sentences))


def build_messages(template: PromptTemplate, pair: Pair, a: Doc, b: Doc, n: int) -> list[dict[str, str]]:
    """The generator conversation for one pair."""
    content = template.render(
        n=n,
        a_title=a.title,
        a_sentences=numbered(a.sentences),
        b_title=b.title,
        b_sentences=numbered(b.sentences),
        alias=pair.alias or b.title,
    )
    return [{"role": "user", "content": content}]


def _as_int_list(values: Any) -> list[int]:
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def draft_rows(pair: Pair, n: int, result: Any, template_version: str) -> list[dict[str, Any]]:
    """One row per draft slot of a pair from its ChatResult (never raises)."""
    base = {
        "pair_id": pair.id,
        "split": pair.split,
        "a_id": pair.a_id,
        "a_title": pair.a_title,
        "b_id": pair.b_id,
        "b_title": pair.b_title,
        "alias": pair.alias,
        "raw": result.text,
        "cache_key": result.cache_key,
        "template_version": template_version,
    }
    items: list[Any] = []
    if result.ok and isinstance(result.parsed, dict):
        items = list(result.parsed.get("questions") or [])
    rows = []
    for i in range(n):
        row = dict(base, id=question_id(pair.a_id, pair.b_id, i), draft_index=i, question=None, answer=None)
        row.update(support_a=[], support_b=[], error=None)
        if not result.ok:
            row.update(status=STATUS_UNREADABLE, error=result.error or result.status)
        elif i >= len(items) or not isinstance(items[i], dict):
            row.update(status=STATUS_MISSING, error=f"the model wrote {len(items)} of {n} questions")
        else:
            item = items[i]
            row.update(
                status=STATUS_OK,
                question=str(item.get("question", "")).strip(),
                answer=str(item.get("answer", "")).strip(),
                support_a=_as_int_list(item.get("support_a", [])),
                support_b=_as_int_list(item.get("support_b", [])),
            )
        rows.append(row)
    return rows


def generate_drafts(
    pairs: Sequence[Pair],
    docs: Mapping[str, Doc],
    model: ChatModel,
    template: PromptTemplate,
    n: int,
    params: SamplingParams = GENERATION_PARAMS,
    log: Any = None,
    *,
    max_words: int = MAX_ANSWER_WORDS,
    max_chars: int = MAX_ANSWER_CHARS,
) -> tuple[pa.Table, BatchStats]:
    """Ask the generator for ``n`` questions per pair under the bounded JSON schema
    (:func:`draft_json_schema`); returns (drafts table sorted by id, LLM stats)."""
    conversations = [build_messages(template, p, docs[p.a_id], docs[p.b_id], n) for p in pairs]
    schema = draft_json_schema(n, max_words, max_chars)
    batch = model.chat(conversations, params, json_schema=schema, template_version=template.version, log=log)
    rows: list[dict[str, Any]] = []
    for pair, result in zip(pairs, batch.results, strict=True):
        rows.extend(draft_rows(pair, n, result, template.version))
    rows.sort(key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=DRAFTS_SCHEMA), batch.stats
