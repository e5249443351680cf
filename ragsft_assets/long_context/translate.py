"""Variant 5: the translation of RAFT rows (variant 4 on RAG-TGE) by a chat model, piece by piece.

A 32K example does not fit a translating model's context, so each piece is translated alone:
every document (once per passage, however many rows show it), every user or assistant turn, and
the instruction of the system message (``long_context_raft``'s text before the documents). The
system message is rebuilt from the translated instruction and documents (the ``Document N:``
headers stay: they are markers, like the answers' ``[n]``). The prompt ``long_context_translate``
is versioned; every call goes through the LLM cache, so a rerun makes no call. All pieces go to
the model in one batch; the halves of split pieces in one more batch per round.

A piece is ``ok`` only when it was translated whole and into the target language:

- a piece cut at the token limit (``truncated``: the model stopped at ``max_tokens``) is split in
  two at a paragraph, sentence or word boundary near its middle and each half translated again
  (up to ``max_splits`` rounds), the halves joined; still cut, it rejects its rows
  (``translation_truncated``);
- a translation that the language identifier (py3langid) does not read as the target language
  rejects its rows (``translation_wrong_language``); a piece with too few letters to tell
  (a number, a name) is not checked;
- a failed call (``unreadable``, ``error``, empty text) rejects its rows (``untranslated``).

Citations ``[n]`` in an answer are renumbered when distractors are dropped, so that they keep
naming the documents they cited.

The translated row is recounted with the trained model's tokenizer: while it exceeds the budget
its least similar distractor is dropped (the documents keep their relative order, so
``oracle_positions`` are recomputed); a row that still does not fit with no distractor left is
rejected (``over_budget_translated``). A piece the model could not translate (status
``unreadable`` or ``error``, or an empty text) rejects its rows (``untranslated``), counted, never
a crash.
"""

from __future__ import annotations

import re
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


# The identifier's codes that count as the target language (Chinese: also Cantonese and Wu, which
# share its script; the identifier tells them apart on short texts only loosely).
LANGUAGE_CODES = {"zh": frozenset({"zh", "yue", "wuu"})}
MIN_LETTERS_TO_CHECK = 12  # fewer letters (a number, a name): the language is not checked
OK, TRUNCATED, FAILED, WRONG_LANGUAGE = "ok", "truncated", "failed", "wrong_language"
REASONS = {
    TRUNCATED: "translation_truncated",
    WRONG_LANGUAGE: "translation_wrong_language",
    FAILED: "untranslated",
}


@dataclass(frozen=True, slots=True)
class TranslateConfig:
    """Settings of the translation (a release config's knobs)."""

    language: str = DEFAULT_LANGUAGE  # target language code; the config is <source>_raft_<language>
    budget_tokens: int = raft.DEFAULT_BUDGET
    max_tokens: int = 2048  # per translated piece (a passage is a few hundred to a few thousand)
    max_splits: int = 3  # rounds of splitting a piece cut at max_tokens before giving up on it


@dataclass(frozen=True, slots=True)
class Piece:
    """The model's translation of one piece: its text and ``ok``, ``truncated`` or ``failed``."""

    text: str
    status: str


def piece_of(text: str, ok: bool, completion_tokens: int, max_tokens: int) -> Piece:
    """A model answer as a ``Piece``: cut at ``max_tokens`` is ``truncated`` (its end is missing)."""
    if not ok or not text.strip():
        return Piece("", FAILED)
    if completion_tokens >= max_tokens:
        return Piece(text.strip(), TRUNCATED)
    return Piece(text.strip(), OK)


def in_language(text: str, language: str) -> bool:
    """Whether the language identifier reads ``text`` as ``language`` (True when too short to tell)."""
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS_TO_CHECK:
        return True
    import py3langid

    code = py3langid.classify(text)[0]
    return code in LANGUAGE_CODES.get(language, frozenset({language}))


_BOUNDARIES = (re.compile(r"\n\s*\n"), re.compile(r"(?<=[.!?。！？])\s+"), re.compile(r"\s+"))


def split_piece(text: str) -> tuple[str, str, str] | None:
    """``(first half, separator, second half)`` cut at the paragraph, else sentence, else word
    boundary nearest the middle; None when the text has no boundary."""
    middle = len(text) / 2
    for pattern in _BOUNDARIES:
        cuts = [m for m in pattern.finditer(text) if m.start() > 0 and m.end() < len(text)]
        if cuts:
            m = min(cuts, key=lambda m: (abs(m.start() - middle), m.start()))
            return text[: m.start()], m.group(0), text[m.end() :]
    return None


def translate_pieces(
    texts: Sequence[str],
    translate: Callable[[list[str]], list[Piece]],
    language: str,
    max_splits: int = 3,
) -> dict[str, Piece]:
    """Every text's ``Piece``: one batch for all, then one batch per round for the halves of the
    truncated ones (split and retried up to ``max_splits`` rounds); the wrong language is marked."""
    if not texts:
        return {}
    done = dict(zip(texts, translate(list(texts)), strict=True))
    # text -> (first, separator, second): the pieces that were split, resolved bottom-up below
    splits: dict[str, tuple[str, str, str]] = {}
    todo = [t for t, p in done.items() if p.status == TRUNCATED]
    for _ in range(max_splits):
        halves: dict[str, None] = {}
        for t in todo:
            cut = split_piece(t)
            if cut is not None:
                splits[t] = cut
                halves.update({cut[0]: None, cut[2]: None})
        new = [h for h in halves if h not in done]
        if not new:
            break
        done.update(zip(new, translate(new), strict=True))
        todo = [h for h in new if done[h].status == TRUNCATED]

    def resolve(t: str, depth: int = 0) -> Piece:
        if t not in splits or depth > max_splits:
            return done[t]
        first, sep, second = splits[t]
        a, b = resolve(first, depth + 1), resolve(second, depth + 1)
        if a.status != OK or b.status != OK:
            return a if a.status != OK else b
        return Piece(a.text + ("\n\n" if "\n" in sep else " ") + b.text, OK)

    out = {}
    for t in texts:
        p = resolve(t)
        if p.status == OK and not in_language(p.text, language):
            p = Piece(p.text, WRONG_LANGUAGE)
        out[t] = p
    return out


def instruction_text(language: str = "en") -> str:
    """The system message's instruction: ``long_context_raft``'s text before the documents."""
    return load_prompt(raft.PROMPT_TASK, language).text.split("{documents}", 1)[0].rstrip()


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
    translate: Callable[[list[str]], list[Piece]],
    counter: raft.ChatTokenCounter,
    config: TranslateConfig = TranslateConfig(),
    citing: frozenset[str] = frozenset(),
) -> TranslateOutput:
    """Translate RAFT rows document by document and turn by turn, within the budget.

    Args:
        rows: variant 1 rows (``raft.raft_examples``' rows of the source).
        lineage: their lineage (``passage_ids`` in the order shown).
        texts_by_id: passage id -> text.
        translate: texts -> their ``Piece`` in order (``piece_of`` a model answer); the caller
            sends them through the generator role and its cache, one batch per call.
        counter: the trained model's token counter.
        config: language, budget, max tokens per piece, split rounds.
        citing: the source examples whose answers cite their documents as ``[n]`` (RAG-TGE).
    """
    out = TranslateOutput()
    by_id = {x["id"]: x for x in lineage}
    docs = {r["id"]: _documents(r, by_id[r["id"]], texts_by_id) for r in rows}
    instruction = instruction_text()
    pieces: dict[str, None] = {instruction: None} if rows else {}
    for r in rows:
        pieces.update({text: None for _, text, _, _ in docs[r["id"]]})
        pieces.update({m["content"]: None for m in r["messages"][1:]})
    unique = list(pieces)
    out.texts = len(unique)
    done = translate_pieces(unique, translate, config.language, config.max_splits)
    template = ""  # no row is built without the translated instruction (its rows are rejected)
    if rows and done[instruction].status == OK:
        # braces doubled: the translated instruction is text, not a template
        head = done[instruction].text.replace("{", "{{").replace("}", "}}")
        template = head + "\n\n{documents}"
    variant = f"{raft.VARIANT}_{config.language}"
    for r in rows:
        rid = derived_id(VARIANT, config.language, r["source_id"])
        row_docs = docs[r["id"]]
        turns = [(m["role"], m["content"]) for m in r["messages"][1:]]
        texts = [instruction] + [d[1] for d in row_docs] + [c for _, c in turns]
        bad = [done[t].status for t in texts if done[t].status != OK]
        if bad:
            reason = REASONS[next(s for s in (TRUNCATED, WRONG_LANGUAGE, FAILED) if s in bad)]
            out.rejections.append(
                {
                    "id": rid,
                    "reason": reason,
                    "detail": f"{len(bad)} piece(s) not translated: {sorted(set(bad))}",
                }
            )
            continue
        kept = list(range(len(row_docs)))  # indices of the documents still shown, in order
        while True:
            shown = [done[row_docs[i][1]].text for i in kept]
            # the answer's [n] follow their documents: old position -> new position
            renumber = {i + 1: j + 1 for j, i in enumerate(kept)}
            answer = done[turns[-1][1]].text
            messages = raft.conversation(
                template,
                shown,
                done[turns[-2][1]].text,
                raft.renumber_citations(answer, renumber) if r["source_id"] in citing else answer,
                [(role, done[c].text) for role, c in turns[:-2]],
            )
            n_tokens = counter.count(messages)
            distractors = [k for k, i in enumerate(kept) if not row_docs[i][2]]
            if n_tokens <= config.budget_tokens or not distractors:
                break
            # the least similar distractor goes first (the last added by RAFT's rank order)
            worst = min(distractors, key=lambda k: (row_docs[kept[k]][3], -k))
            kept.pop(worst)
            out.dropped_distractors += 1
        kept_docs = [row_docs[i] for i in kept]
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
                "oracle_positions": [i for i, d in enumerate(kept_docs) if d[2]],
                "distractor_ids": [d[0] for d in kept_docs if not d[2]],
                "distractor_scores": [float(d[3]) for d in kept_docs if not d[2]],
                "num_tokens": n_tokens,
            }
        )
        base = by_id[r["id"]]
        keys = dict(zip(base["passage_ids"], base["embedding_keys"], strict=False))
        out.lineage.append(
            {
                **base,
                "id": rid,
                "passage_ids": [d[0] for d in kept_docs],
                "embedding_keys": [keys[d[0]] for d in kept_docs] if base["embedding_keys"] else [],
            }
        )
    out.rows.sort(key=lambda x: x["id"])
    out.lineage.sort(key=lambda x: x["id"])
    return out
