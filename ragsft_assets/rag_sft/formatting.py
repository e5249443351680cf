"""Final formatting of kept examples into ``rag_sft`` chat rows.

The recipe (``rag_sft/recipes.py``) turns each step on or off:

- Step 5: an ellipsis that skips no word of the source (a trailing ``...``, or fragments adjacent
  in the document) is removed from its excerpt; every other character of a tag stays as it is.
- Under the strict refusal rule, an unanswerable target becomes the dictated phrase alone;
  answerable targets keep their answer.
- Step 6: a response that names a ``[Source N]`` it does not cite with a tag is dropped, with its
  twin: answers only (the citation recipe, ``HOTPOTQA_CITE_RECIPE``), every response, or never (the
  French one, ``FR_V2_RECIPE``).
- An answer whose gold answer appears only inside a ``<ref>`` excerpt, never in its own words, is
  dropped with its twin; and a response in the wrong language (its own words, identified by
  ``py3langid`` between the data's language and English) is dropped with its twin.
- Step 7: a deterministic rewrite of refusal openings: the verdict sentence (the one that says
  the documents do not answer) moves to the end, or is replaced by a variant, or the response
  opens with a neutral opener that answerable responses also use, read as the start of the
  first sentence. A sentence that describes a document is never deleted and a sentence holding a
  tag never moves, so tags are byte-identical.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pyarrow as pa

from ragsft_assets import ids
from ragsft_assets.arrow_schemas import MESSAGES, STRING_LIST, strings
from ragsft_assets.ledger import DROPPED, KEPT, Decision, DecisionLog
from ragsft_assets.rag_sft.citations import (
    ELLIPSIS_PATTERN,
    OK,
    REFERENCES_HEADING_RE,
    TAG_MARKUP_RE,
    RefTag,
    match_excerpt,
    normalize,
    outside_tags,
    parse_refs,
    rewrite_inline_tags,
)
from ragsft_assets.rag_sft.examples import ANSWERABLE, STRICT, UNANSWERABLE, RagPrompt
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE, RagSftRecipe

_SEP_RE = re.compile(rf"(\s*(?:{ELLIPSIS_PATTERN})\s*)")
_WORD_RE = re.compile(r"\w")
_NAMED_SOURCE_RE = re.compile(r"\[?\bsources?\s*(\d+)\]?", re.IGNORECASE)
_TAG_MARKUP_RE = TAG_MARKUP_RE
# A sentence naming a document by number ("[Source 2]", "Source 2", "document 2", "doc. 2").
_NAMES_DOCUMENT_RE = re.compile(
    r"\bsources?\s*\[?\s*\d+|\b(?:documents?|docs?\.?)\s*\[?\s*\d+", re.IGNORECASE
)

STAGE_REWRITE = "rag_sft.refusal_rewrite"
ANSWER_ONLY_IN_REF = "answer_only_in_ref"
WRONG_LANGUAGE = "wrong_language"
MIN_LANGUAGE_WORDS = 3  # fewer words of its own: too short to identify, kept

# Openings of the rewrite: verdict variants and neutral openers answerable responses also use.
REFUSAL_VARIANTS: dict[str, tuple[str, ...]] = {
    "en": (
        "The documents do not allow me to answer this question.",
        "I could not find the answer to this question in the documents.",
        "None of the documents gives the answer to this question.",
    ),
    "fr": (
        "Les documents ne me permettent pas de répondre à cette question.",
        "Je n'ai pas trouvé la réponse à cette question dans les documents.",
        "Aucun des documents ne donne la réponse à cette question.",
    ),
}
# The card's neutral openers (fr_v2 step 7), each the start of the first sentence ("<opener>, ...").
NEUTRAL_OPENERS: dict[str, tuple[str, ...]] = {
    "en": (
        "According to the documents provided",
        "To answer this question",
        "Based on the documents provided",
    ),
    "fr": ("D'après les documents fournis", "Pour répondre à cette question", "Selon les documents fournis"),
}
# What a refusal's verdict sentence says: the documents do not give the answer.
_VERDICT_RE = re.compile(
    r"\b(?:not?|cannot|can't|unable|none|nothing|neither|nor|ne|n'|aucun\w*|pas|impossible|"
    r"rien|ni)\b",
    re.IGNORECASE,
)
# First words kept capitalized after an opener (I; proper nouns cannot be told apart: left alone
# unless the word is one of these common sentence starts).
_LOWER_AFTER_OPENER = {
    "the",
    "there",
    "this",
    "these",
    "none",
    "no",
    "unfortunately",
    "it",
    "les",
    "le",
    "la",
    "je",
    "aucun",
    "aucune",
    "il",
    "ce",
    "cette",
    "ces",
    "malheureusement",
    "rien",
    "nous",
}


def remove_idle_ellipses(excerpt: str, document: str) -> str:
    """The excerpt without the ellipses that skip no word of the document (else unchanged).

    An interior ellipsis is idle when the source text between the fragments it joins holds no
    word character (adjacent fragments); it is replaced by that source text. A trailing ellipsis
    skips no word of the quote: it is removed, wherever the excerpt ends in the document. A
    leading one is idle when no word precedes the excerpt in the document; it is removed.
    """
    # Base rules only: whether the tag then passes strict quoting is the verifier's call, not this one's.
    if match_excerpt(excerpt, document, strict=False) != OK or not _SEP_RE.search(excerpt):
        return excerpt
    doc = normalize(document)
    if normalize(excerpt) in doc:  # verbatim as a whole: the document itself holds the dots
        return excerpt
    pieces = _SEP_RE.split(excerpt)  # frag, sep, frag, sep, ..., frag
    frags = pieces[0::2]
    seps = pieces[1::2]
    interior = frags[1:-1]
    if any(not normalize(f) for f in interior):  # "a ... ... b": leave it alone
        return excerpt
    spans: list[tuple[int, int] | None] = []
    pos = 0
    for f in frags:
        nf = normalize(f)
        if not nf:
            spans.append(None)
            continue
        i = doc.find(nf, pos)
        spans.append((i, i + len(nf)))
        pos = i + len(nf)
    out = [frags[0]]
    for k, sep in enumerate(seps):
        left, right = spans[k], spans[k + 1]
        if left is None:  # leading ellipsis
            idle = right is not None and not _WORD_RE.search(doc[: right[0]])
            out.append("" if idle else sep)
        elif right is None:  # trailing ellipsis: it skips no word of what is quoted
            out.append("")
        else:
            gap = doc[left[1] : right[0]]
            out.append(gap if not _WORD_RE.search(gap) else sep)
        out.append(frags[k + 1])
    return "".join(out)


def clean_excerpts(response: str, documents: Sequence[str]) -> tuple[str, int]:
    """The response with idle ellipses removed from its ``ok`` inline excerpts; and how many changed."""

    def clean(t: RefTag, document: str) -> tuple[int, int, str] | None:
        new = remove_idle_ellipses(t.excerpt, document)
        return (t.excerpt_start, t.excerpt_end, new) if new != t.excerpt else None

    return rewrite_inline_tags(response, documents, clean)


def named_untagged_sources(response: str) -> list[int]:
    """Source numbers the text names (``[Source N]``, ``Source N``) outside tags without citing them."""
    parsed = parse_refs(response)
    cited = {t.id for t in parsed.tags if t.id is not None}
    text = _TAG_MARKUP_RE.sub(" ", response)
    named = {int(m.group(1)) for m in _NAMED_SOURCE_RE.finditer(text)}
    return sorted(named - cited)


def answer_only_in_ref(response: str, answer: str) -> bool:
    """True when the gold ``answer`` occurs inside a tag of ``response`` but nowhere outside the tags.

    Matching is on the whitespace-normalized, case-folded text; the text outside the tags is the
    response with every tag (opening to closing, excerpt included) cut out. An answer found
    nowhere (a paraphrase the judge accepted) is not this case.
    """
    needle = normalize(answer).casefold()
    if not needle:
        return False
    inside = " ".join(t.excerpt for t in parse_refs(response).tags if t.excerpt)
    return needle not in outside_tags(response).casefold() and needle in normalize(inside).casefold()


@cache
def _identifier(langs: tuple[str, ...]) -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # imported only when the check runs

    ident = LanguageIdentifier.from_model_file(MODEL_FILE)
    ident.set_languages(list(langs))
    return ident


def response_language(response: str, lang: str) -> str | None:
    """The language of a response's own words (tags and a References section left out), as
    ``py3langid`` decides between ``lang`` and English; None when under ``MIN_LANGUAGE_WORDS`` words
    (too short to tell) or when ``lang`` is English (nothing to tell apart)."""
    if lang == "en":
        return None
    m = REFERENCES_HEADING_RE.search(response)
    text = outside_tags(response[: m.start()] if m else response)
    if len(text.split()) < MIN_LANGUAGE_WORDS:
        return None
    return str(_identifier((lang, "en")).classify(text)[0])


_SENTENCE_SEP_RE = re.compile(r"((?<=[.!?])\s+)")


def _body_and_tail(text: str) -> tuple[str, str, str]:
    """``(body, gap, tail)``: the text before a final ``References:`` section, the whitespace
    before that heading, and the section itself (``""`` when there is none)."""
    m = REFERENCES_HEADING_RE.search(text)
    if not m:
        return text.rstrip(), text[len(text.rstrip()) :], ""
    head = text[: m.start()]
    body = head.rstrip()
    return body, head[len(body) :], text[m.start() :]


# The verdict is about answering the question: "il est impossible de répondre à cette question".
_ANSWERING_RE = re.compile(r"\b(?:answer\w*|respond\w*|reply|répondre|réponse\w*|question)\b", re.IGNORECASE)
# A sentence about one document ("Le document sur Lyon ... ne mentionne pas son maire.") describes
# it: part of the body, not the verdict.
_ONE_DOCUMENT_RE = re.compile(
    r"\b(?:the|this|that|le|ce|cet|l')\s*(?:document|article|passage|paragraph|paragraphe|texte|source)\b(?!s)",
    re.IGNORECASE,
)


def is_verdict_sentence(sentence: str) -> bool:
    """Whether a refusal's sentence is its verdict, the one step 7 may move or vary.

    The card: "the verdict sentence is moved to the end, varied, or the response opens with a
    phrase ..." and "The body of the refusal and its <ref> tags are the generator's." A verdict
    says the question cannot be answered: a negation and a word of answering, no tag, no document
    number, and no single document it describes. Every other sentence is the generator's body.
    """
    return bool(
        not _TAG_MARKUP_RE.search(sentence)
        and _VERDICT_RE.search(sentence)
        and _ANSWERING_RE.search(sentence)
        and not _NAMES_DOCUMENT_RE.search(sentence)
        and not _ONE_DOCUMENT_RE.search(sentence)
    )


def _verdict_index(sentences: Sequence[str]) -> int | None:
    """The first sentence that gives the refusal's verdict (:func:`is_verdict_sentence`), or None."""
    for k, sentence in enumerate(sentences):
        if is_verdict_sentence(sentence):
            return k
    return None


def _join(sentences: Sequence[str], seps: Sequence[str]) -> str:
    out = [sentences[0]]
    for sep, sentence in zip(seps, sentences[1:], strict=True):
        out += [sep, sentence]
    return "".join(out)


def _after_opener(text: str) -> str:
    """``text`` as the continuation of an opener: a common first word lower-cased, else unchanged."""
    first = text.split(maxsplit=1)[0] if text.split() else ""
    if first.strip(".,;:!?").lower() in _LOWER_AFTER_OPENER and first[:1].isupper():
        return text[:1].lower() + text[1:]
    return text


def rewrite_refusal(response: str, lang: str, seed: int, pair_id: str) -> tuple[str, str]:
    """A deterministic rewrite of a refusal's opening that keeps the rest of the text intact; (text, mode).

    Modes, drawn from the seed and the pair id: ``move`` (the verdict sentence, the first one
    that says the question cannot be answered, :func:`is_verdict_sentence`, goes to the end),
    ``vary`` (the verdict sentence is replaced by a drawn variant of it), ``neutral`` (a drawn
    opener that answerable responses also use starts the first sentence: ``"D'après les documents
    fournis, les documents ..."``). Only the verdict sentence moves or changes: a body sentence (one
    that describes a document, names one by number, holds a tag, or does not speak of answering) is
    never moved nor deleted. Every separator stays as written (the moved sentence
    takes the separator that followed it), a final ``References:`` section stays last and
    unchanged, so every tag is byte-identical. ``none`` when the drawn mode does not fit.
    """
    body, gap, tail = _body_and_tail(response)
    lead = body[: len(body) - len(body.lstrip())]
    pieces = _SENTENCE_SEP_RE.split(body.lstrip())  # sentence, separator, sentence, ...
    if not pieces or not pieces[0]:
        return response, "none"
    sentences, seps = pieces[0::2], pieces[1::2]
    rng = ids.item_rng(seed, STAGE_REWRITE, pair_id)
    mode = rng.choice(("move", "vary", "neutral"))
    verdict = _verdict_index(sentences)
    if mode == "move" and verdict is not None and verdict < len(sentences) - 1:
        sep = seps[verdict]
        rest = _join(sentences[:verdict] + sentences[verdict + 1 :], seps[:verdict] + seps[verdict + 1 :])
        return lead + rest + sep + sentences[verdict] + gap + tail, mode
    if mode == "vary" and verdict is not None:
        varied = list(sentences)
        varied[verdict] = rng.choice(REFUSAL_VARIANTS.get(lang, REFUSAL_VARIANTS["en"]))
        return lead + _join(varied, seps) + gap + tail, mode
    if mode == "neutral":
        opener = rng.choice(NEUTRAL_OPENERS.get(lang, NEUTRAL_OPENERS["en"]))
        return lead + opener + ", " + _after_opener(body.lstrip()) + gap + tail, mode
    return response, "none"


SFT_SCHEMA = pa.schema(
    [
        *strings("id", "pair_id"),
        ("messages", MESSAGES),
        ("supporting_facts_titles", STRING_LIST),
        ("chunks_total", pa.int32()),
        ("split", pa.string()),
    ]
)


@dataclass(slots=True)
class Formatted(DecisionLog):
    rows: list[dict] = field(default_factory=list)


def format_examples(
    prompts: Sequence[RagPrompt],
    responses: dict[str, str],
    kept_ids: set[str],
    *,
    seed: int = ids.DEFAULT_SEED,
    recipe: RagSftRecipe = HOTPOTQA_CITE_RECIPE,
) -> Formatted:
    """Chat rows for the kept examples, through the recipe's cleanup steps.

    Args:
        prompts: all prompts.
        responses: example id -> generated response.
        kept_ids: ids the verdicts kept (twins already together).
        seed: the run seed (for the optional rewrite).
        recipe: the steps: ``remove_idle_ellipses`` (step 5), ``untagged_source_scope`` (step 6:
            drop, with the twin, a response naming a ``[Source N]`` it does not cite: ``answers``,
            ``all`` or ``off``), ``drop_wrong_language`` (:func:`response_language`; the strict
            phrase is the data's), ``drop_answer_only_in_ref`` (:func:`answer_only_in_ref`),
            ``rewrite_refusals`` (step 7, :func:`rewrite_refusal` on generic-rule refusals) and
            ``multi_answer`` (trust_align, ``multi_answer.py``: an elided excerpt becomes
            consecutive tags; a response naming a document by number outside a tag, or an
            answerable one without any ``<ref>``, is dropped, counted, in the ledger).
    """
    out = Formatted()
    staged: dict[str, dict] = {}
    bad_pairs: set[str] = set()
    for p in sorted(prompts, key=lambda x: x.id):
        if p.id not in kept_ids:
            continue
        text = responses[p.id].strip()
        if recipe.remove_idle_ellipses:
            text, n_clean = clean_excerpts(text, p.paragraphs)
            out.funnel["excerpts_ellipsis_removed"] += n_clean
        if recipe.multi_answer:
            from ragsft_assets.rag_sft import multi_answer as ma

            text, n_split = ma.split_elided_tags(text, p.paragraphs)
            out.funnel["excerpts_split"] += n_split
            numbers = ma.named_document_numbers(text)
            if numbers:
                out.decisions.append(Decision(p.id, DROPPED, ma.NAMES_DOCUMENT, {"documents": numbers}))
                continue
            if p.kind == ANSWERABLE and not ma.has_ref(text):
                out.decisions.append(Decision(p.id, DROPPED, ma.NO_REF))
                continue
        scope = recipe.untagged_source_scope
        named = (
            named_untagged_sources(text)
            if scope == "all" or (scope == "answers" and p.kind == ANSWERABLE)
            else []
        )
        if named:
            bad_pairs.add(p.pair_id)
            out.decisions.append(Decision(p.id, DROPPED, "names_untagged_source", {"sources": named}))
            continue
        if recipe.drop_wrong_language and (found := response_language(text, p.language)) not in (
            None,
            p.language,
        ):
            bad_pairs.add(p.pair_id)
            out.decisions.append(Decision(p.id, DROPPED, WRONG_LANGUAGE, {"language": found}))
            continue
        if recipe.drop_answer_only_in_ref and p.kind == ANSWERABLE and answer_only_in_ref(text, p.answer):
            bad_pairs.add(p.pair_id)
            out.decisions.append(Decision(p.id, DROPPED, ANSWER_ONLY_IN_REF, {"answer": p.answer}))
            continue
        mode = ""
        if p.kind == UNANSWERABLE and p.refusal_rule == STRICT:
            text, mode = p.refusal_phrase, "strict_phrase"
        elif p.kind == UNANSWERABLE and recipe.rewrite_refusals:
            text, mode = rewrite_refusal(text, p.language, seed, p.pair_id)
        staged[p.id] = {
            "id": p.id,
            "pair_id": p.pair_id,
            "messages": [
                {"role": "system", "content": p.system},
                {"role": "user", "content": p.user},
                {"role": "assistant", "content": text},
            ],
            "supporting_facts_titles": list(p.gold_titles) if p.kind == ANSWERABLE else [],
            "chunks_total": p.chunks_total,
            "split": p.split,
            "_mode": mode,
        }
    for eid, row in staged.items():
        mode = row.pop("_mode")
        if row["pair_id"] in bad_pairs:
            out.decisions.append(Decision(eid, DROPPED, "twin_dropped"))
            continue
        out.rows.append(row)
        out.decisions.append(Decision(eid, KEPT, "formatted", {"rewrite": mode} if mode else None))
        if mode:
            out.funnel[f"rewrite:{mode}"] += 1
    out.funnel["rows"] = len(out.rows)
    out.funnel["dropped:names_untagged_source"] = sum(
        d.reason == "names_untagged_source" for d in out.decisions
    )
    out.funnel[f"dropped:{WRONG_LANGUAGE}"] = sum(d.reason == WRONG_LANGUAGE for d in out.decisions)
    out.funnel[f"dropped:{ANSWER_ONLY_IN_REF}"] = sum(d.reason == ANSWER_ONLY_IN_REF for d in out.decisions)
    out.funnel["dropped:twin_dropped"] = sum(d.reason == "twin_dropped" for d in out.decisions)
    if recipe.multi_answer:
        for reason in ("names_document_number", "answerable_without_ref"):
            out.funnel[f"dropped:{reason}"] = sum(d.reason == reason for d in out.decisions)
    return out


def sft_table(rows: Sequence[dict]) -> pa.Table:
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["id"]), schema=SFT_SCHEMA)
