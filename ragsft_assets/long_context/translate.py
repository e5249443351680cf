"""Variant 5: the translation of RAFT rows (variant 4 on RAG-TGE) by a chat model, piece by piece.

A 32K example does not fit a translating model's context, so each piece is translated alone:
every document (once per passage, however many rows show it) and every user or assistant turn.
The system message is rebuilt from the translated documents under the same instruction template
(``long_context_raft`` in the target language where one ships, else the English one). The
prompt ``long_context_translate`` is versioned; every call goes through the LLM cache, so a
rerun makes no call.

The translated row is recounted with the trained model's tokenizer: while it exceeds the budget
its least similar distractor is dropped (the documents keep their relative order, so
``oracle_positions`` are recomputed); a row that still does not fit with no distractor left is
rejected (``over_budget_translated``). A piece the model could not translate (status
``unreadable`` or ``error``, or an empty text) rejects its rows (``untranslated``), counted, never
a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragsft_assets.ids import derived_id
from ragsft_assets.long_context import raft
from ragsft_assets.prompts import load_prompt

PROMPT_TASK = "long_context_translate"
VARIANT = "raft_translated"
DEFAULT_LANGUAGE = "zh"
LANGUAGE_NAMES = {
    "zh": "Chinese (Simplified)",
    "fr": "French",
    "de": "German",
    "es": "Spanish",
    "ja": "Japanese",
}


@dataclass(frozen=True, slots=True)
class TranslateConfig:
    """Settings of the translation (a release config's knobs)."""

    language: str = DEFAULT_LANGUAGE  # target language code; the config is <source>_raft_<language>
    budget_tokens: int = raft.DEFAULT_BUDGET
    max_tokens: int = 2048  # per translated piece (a passage is a few hundred to a few thousand)


@dataclass(slots=True)
class TranslateOutput:
    """Translated rows and lineage, rejections, and the pieces asked (``texts``: unique texts)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)
    texts: int = 0
    dropped_distractors: int = 0


def language_name(code: str) -> str:
    """The language's English name for the prompt (the code itself when unknown)."""
    return LANGUAGE_NAMES.get(code, code)


def translation_request(text: str, language: str) -> list[dict[str, str]]:
    """The chat conversation that translates one piece into ``language`` (a code)."""
    prompt = load_prompt(PROMPT_TASK, "en")
    return [
        {"role": "system", "content": prompt.render(language=language_name(language))},
        {"role": "user", "content": text},
    ]


def prompt_version() -> str:
    return load_prompt(PROMPT_TASK, "en").version


def _documents(row: Mapping[str, Any], lineage: Mapping[str, Any], texts_by_id: Mapping[str, str]) -> list:
    """(passage id, text, is_oracle, score) per document of a RAFT row, in the order shown."""
    oracle = set(row["oracle_positions"])
    scores = iter(row["distractor_scores"])
    return [
        (pid, texts_by_id[pid], i in oracle, None if i in oracle else next(scores))
        for i, pid in enumerate(lineage["passage_ids"])
    ]


def translate_rows(
    rows: Sequence[Mapping[str, Any]],
    lineage: Sequence[Mapping[str, Any]],
    texts_by_id: Mapping[str, str],
    translate: Callable[[list[str]], list[str | None]],
    counter: raft.ChatTokenCounter,
    config: TranslateConfig = TranslateConfig(),
) -> TranslateOutput:
    """Translate RAFT rows document by document and turn by turn, within the budget.

    Args:
        rows: variant 1 rows (``raft.raft_examples``' rows of the source).
        lineage: their lineage (``passage_ids`` in the order shown).
        texts_by_id: passage id -> text.
        translate: texts -> their translations in order (None: not translated); the caller
            sends them through the generator role and its cache.
        counter: the trained model's token counter.
        config: language, budget, max tokens per piece.
    """
    out = TranslateOutput()
    by_id = {x["id"]: x for x in lineage}
    docs = {r["id"]: _documents(r, by_id[r["id"]], texts_by_id) for r in rows}
    pieces: dict[str, None] = {}
    for r in rows:
        pieces.update({text: None for _, text, _, _ in docs[r["id"]]})
        pieces.update({m["content"]: None for m in r["messages"][1:]})
    unique = list(pieces)
    out.texts = len(unique)
    done = dict(zip(unique, translate(unique), strict=True))
    template = load_prompt(raft.PROMPT_TASK, config.language).text
    variant = f"{raft.VARIANT}_{config.language}"
    for r in rows:
        rid = derived_id(VARIANT, config.language, r["source_id"])
        row_docs = docs[r["id"]]
        turns = [(m["role"], m["content"]) for m in r["messages"][1:]]
        missing = [t for t in [d[1] for d in row_docs] + [c for _, c in turns] if not done.get(t)]
        if missing:
            out.rejections.append(
                {"id": rid, "reason": "untranslated", "detail": f"{len(missing)} piece(s) not translated"}
            )
            continue
        kept = list(row_docs)
        while True:
            messages = raft.conversation(
                template,
                [done[d[1]] for d in kept],
                done[turns[-2][1]],
                done[turns[-1][1]],
                [(role, done[c]) for role, c in turns[:-2]],
            )
            n_tokens = counter.count(messages)
            distractors = [i for i, d in enumerate(kept) if not d[2]]
            if n_tokens <= config.budget_tokens or not distractors:
                break
            # the least similar distractor goes first (the last added by RAFT's rank order)
            worst = min(distractors, key=lambda i: (kept[i][3], -i))
            kept.pop(worst)
            out.dropped_distractors += 1
        if n_tokens > config.budget_tokens:
            out.rejections.append(
                {
                    "id": rid,
                    "reason": "over_budget_translated",
                    "detail": f"{n_tokens} > {config.budget_tokens} tokens",
                }
            )
            continue
        out.rows.append(
            {
                **r,
                "id": rid,
                "variant": variant,
                "messages": messages,
                "oracle_positions": [i for i, d in enumerate(kept) if d[2]],
                "distractor_ids": [d[0] for d in kept if not d[2]],
                "distractor_scores": [float(d[3]) for d in kept if not d[2]],
                "num_tokens": n_tokens,
            }
        )
        base = by_id[r["id"]]
        keys = dict(zip(base["passage_ids"], base["embedding_keys"], strict=False))
        out.lineage.append(
            {
                **base,
                "id": rid,
                "passage_ids": [d[0] for d in kept],
                "embedding_keys": [keys[d[0]] for d in kept] if base["embedding_keys"] else [],
            }
        )
    out.rows.sort(key=lambda x: x["id"])
    out.lineage.sort(key=lambda x: x["id"])
    return out
