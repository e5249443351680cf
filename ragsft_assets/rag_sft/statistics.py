"""Statistics of a ``rag_sft`` table (asset metadata now, the dataset card later).

Token counts use the run's tokenizer (:func:`token_counter`: a local tokenizer folder, the
embedded model's, or whitespace words); the result says which one counted under ``tokenizer``.
The card's statistics of each Luciole RAG config (refusals by gold left, References share,
strict-rule counts, two-document answers, answers naming their source, the stricter quoting
rules' flags, the commitment table beside the card's) are computed here too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import mean, median
from typing import Any

import numpy as np

from ragsft_assets import ids
from ragsft_assets import recipes as recipe_records
from ragsft_assets.rag_sft.citations import (
    INLINE,
    PARTIAL_WORD,
    TOO_SHORT,
    check_response,
    has_ellipsis,
    outside_tags,
    parse_refs,
)
from ragsft_assets.rag_sft.recipes import FR_V2, HOTPOTQA_CITE, RagSftRecipe

TokenCounter = Callable[[Sequence[str]], list[int]]


def whitespace_counter(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def default_token_counter() -> tuple[TokenCounter, str]:
    """The embedded model's tokenizer when it can be loaded, else whitespace words; and its name."""
    try:
        from ragsft_assets.llm.models import EMBEDDED_MODEL_NAME, count_tokens

        count_tokens(["probe"])  # loads (or converts) the model's tokenizer once
        return count_tokens, f"{EMBEDDED_MODEL_NAME} (tokenizers)"
    except Exception:  # noqa: BLE001 - any failure to load means: no real tokenizer here
        return whitespace_counter, "whitespace"


def folder_token_counter(folder: str | Path) -> tuple[TokenCounter, str]:
    """The tokenizer of a local folder: its ``tokenizer.json`` through ``tokenizers``, else whatever
    ``transformers.AutoTokenizer`` loads from it offline; and its name for the card.

    Raises:
        ValueError: the folder does not exist or holds no tokenizer either library can load.
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ValueError(f"tokenizer {str(folder)!r}: not 'embedded', 'whitespace' nor a folder")
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))

        def count(texts: Sequence[str]) -> list[int]:
            return [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

        return count, f"{path.name} (tokenizers, {path})"
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the same answer: not a tokenizer
        raise ValueError(
            f"tokenizer folder {str(path)!r}: no tokenizer.json and transformers cannot load it ({exc})"
        ) from exc

    def count_hf(texts: Sequence[str]) -> list[int]:
        return [len(ids_) for ids_ in hf(list(texts), add_special_tokens=False)["input_ids"]]

    return count_hf, f"{path.name} (transformers, {path})"


def token_counter(spec: str) -> tuple[TokenCounter, str]:
    """The tokenizer a run names: ``whitespace``, ``embedded`` (:func:`default_token_counter`) or a
    local folder (:func:`folder_token_counter`); and its name, which the card shows."""
    if spec == "whitespace":
        return whitespace_counter, "whitespace"
    if spec == "embedded":
        return default_token_counter()
    return folder_token_counter(spec)


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else 0.0


def _first_words(text: str, k: int) -> str:
    return " ".join(text.lower().split()[:k])


def refusal_commitment(responses: Sequence[str], is_refusal: Sequence[bool], k: int) -> float | None:
    """Mean, over refusals, of P(refusal | the response's first ``k`` words) in this table.

    1.0 means a refusal is given away by its first words (no answerable response opens the same
    way); lower values mean the openings are shared with answers. None without refusals.
    """
    prefixes = [_first_words(r, k) for r in responses]
    total = Counter(prefixes)
    refusing = Counter(p for p, r in zip(prefixes, is_refusal, strict=True) if r)
    probs = [refusing[p] / total[p] for p, r in zip(prefixes, is_refusal, strict=True) if r]
    return round(mean(probs), 4) if probs else None


def sft_statistics(
    rows: Sequence[dict[str, Any]],
    token_counter: TokenCounter | None = None,
    tokenizer_name: str | None = None,
) -> dict[str, Any]:
    """The issue's statistics over ``rag_sft`` rows (dicts with ``messages``, ``supporting_facts_titles``,
    ``chunks_total``).

    An example is answerable when it has supporting-fact titles. Token counts are over the whole
    conversation text (system + user + assistant contents).
    """
    if token_counter is None:
        token_counter, tokenizer_name = default_token_counter()
    n = len(rows)
    responses = [
        next((m["content"] for m in reversed(r["messages"]) if m["role"] == "assistant"), "") for r in rows
    ]
    answerable = [bool(r["supporting_facts_titles"]) for r in rows]
    docs = [int(r["chunks_total"]) for r in rows]
    convo = ["\n".join(m["content"] for m in r["messages"]) for r in rows]
    tokens = token_counter(convo) if rows else []
    words = [len(t.split()) for t in responses]
    parsed = [parse_refs(t) for t in responses]
    ans_tags = [len(p.tags) for p, a in zip(parsed, answerable, strict=True) if a]
    elided = [
        any(t.style == INLINE and t.excerpt is not None and has_ellipsis(t.excerpt) for t in p.tags)
        for p in parsed
    ]
    refusals = [p for p, a in zip(parsed, answerable, strict=True) if not a]
    n_ans = sum(answerable)
    return {
        "rows": n,
        "answerable": n_ans,
        "unanswerable": n - n_ans,
        "answerable_share": round(n_ans / n, 4) if n else None,
        "unanswerable_share": round((n - n_ans) / n, 4) if n else None,
        "documents_per_prompt": {
            "mean": round(mean(docs), 3) if docs else None,
            "median": median(docs) if docs else None,
            "min": min(docs) if docs else None,
            "max": max(docs) if docs else None,
        },
        "tokenizer": tokenizer_name or "custom",
        "prompt_response_tokens": {
            "median": median(tokens) if tokens else None,
            "p99": round(_pct(tokens, 99), 1) if tokens else None,
            "max": max(tokens) if tokens else None,
        },
        "response_words": {
            "median": median(words) if words else None,
            "p90": round(_pct(words, 90), 1) if words else None,
        },
        "ref_tags_per_answerable": {
            "mean": round(mean(ans_tags), 3) if ans_tags else None,
            "median": median(ans_tags) if ans_tags else None,
        },
        "elided_excerpt_share": round(sum(elided) / n, 4) if n else None,
        "refusals_that_quote_share": round(sum(bool(p.tags) for p in refusals) / len(refusals), 4)
        if refusals
        else None,
        "refusal_commitment_1": refusal_commitment(responses, [not a for a in answerable], 1),
        "refusal_commitment_2": refusal_commitment(responses, [not a for a in answerable], 2),
    }


def _shares(values: Sequence[str]) -> dict[str, float]:
    counts = Counter(values)
    return {k: round(v / len(values), 4) for k, v in sorted(counts.items())} if values else {}


def question_mix(
    question_meta: dict[str, tuple[str, str]], generated: Sequence[str], kept: Sequence[str]
) -> dict[str, Any]:
    """Type (bridge/comparison) and level shares of the generated and the kept questions.

    The card shows both, to show that the filter does not skew them.

    Args:
        question_meta: question id -> (type, level) (from the input questions).
        generated: the question ids that got a prompt (each once).
        kept: the question ids with at least one kept row (each once).
    """
    out: dict[str, Any] = {}
    for name, qids in (("generated", generated), ("kept", kept)):
        metas = [question_meta[q] for q in qids if q in question_meta]
        out[name] = {
            "questions": len(metas),
            "type": _shares([t or "(none)" for t, _ in metas]),
            "level": _shares([lv or "(none)" for _, lv in metas]),
        }
    return out


def answer_refusal_words(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Words (whitespace) of the answers and of the refusals, median and p90 each."""
    out: dict[str, Any] = {}
    for name, answerable in (("answer_words", True), ("refusal_words", False)):
        words = [
            len(r["messages"][-1]["content"].split())
            for r in rows
            if bool(r["supporting_facts_titles"]) == answerable
        ]
        out[name] = {
            "median": median(words) if words else None,
            "p90": round(_pct(words, 90), 1) if words else None,
        }
    return out


STAGE_COMMITMENT_MIX = "rag_sft.commitment_mix"
COMMITMENT_REFUSAL_SHARE = 0.10  # the card's section of the French recipe measures on a 10%-refusal mix
_FIRST_SENTENCE_RE = re.compile(r"(?<=[.!?])\s")


def _response(row: Mapping[str, Any]) -> str:
    return next((m["content"] for m in reversed(row["messages"]) if m["role"] == "assistant"), "")


def _first_sentence(text: str) -> str:
    return " ".join(_FIRST_SENTENCE_RE.split(text.strip(), maxsplit=1)[0].split())


def commitment_table(
    rows: Sequence[dict[str, Any]],
    strict_phrases: Sequence[str],
    *,
    seed: int = ids.DEFAULT_SEED,
    refusal_share: float = COMMITMENT_REFUSAL_SHARE,
) -> dict[str, Any]:
    """The seed card's commitment table, on a mix resampled to ``refusal_share`` refusals.

    Every answerable row is kept; refusals are drawn (the smallest hash of (seed, stage, row id)
    first, so the mix does not depend on row order) until they are ``refusal_share`` of the mix,
    or all of them when there are fewer. On the refusals of that mix: the most frequent first
    sentence and its share, and the share that opens with a strict phrase; on the whole mix:
    :func:`refusal_commitment` after one and after two words. Tokenization: lower-cased
    whitespace-separated words (punctuation stays attached to its word).
    """
    answers = [r for r in rows if r["supporting_facts_titles"]]
    refusals = sorted(
        (r for r in rows if not r["supporting_facts_titles"]),
        key=lambda r: ids.item_uniform(seed, STAGE_COMMITMENT_MIX, r["id"]),
    )
    want = round(refusal_share / (1 - refusal_share) * len(answers)) if answers else len(refusals)
    drawn = refusals[: min(len(refusals), want)]
    mix = answers + drawn
    texts = [_response(r) for r in drawn]
    first = Counter(_first_sentence(t) for t in texts).most_common()
    top = min((s for s, n in first if n == first[0][1]), default=None) if first else None  # ties: smallest
    phrases = tuple(" ".join(p.split()) for p in strict_phrases)
    strict = sum(" ".join(t.split()).startswith(phrases) for t in texts) if phrases else 0
    responses = [_response(r) for r in mix]
    is_refusal = [not r["supporting_facts_titles"] for r in mix]
    return {
        "mix_rows": len(mix),
        "mix_refusals": len(drawn),
        "refusal_share": round(len(drawn) / len(mix), 4) if mix else None,
        "most_frequent_first_sentence": top,
        "most_frequent_first_sentence_share": round(dict(first)[top] / len(texts), 4) if top else None,
        "strict_phrase_opening_share": round(strict / len(texts), 4) if texts else None,
        "commitment_1": refusal_commitment(responses, is_refusal, 1),
        "commitment_2": refusal_commitment(responses, is_refusal, 2),
        "tokenization": "lower-cased whitespace words",
    }


# "[Source 3]", "Source 3", "document 3", "doc. 3", a bare "[3]": the text names a document.
_NAMES_SOURCE_RE = re.compile(
    r"\bsources?\s*\[?\s*\d+|\b(?:documents?|docs?\.?)\s*\[?\s*\d+|\[\s*\d+\s*\]", re.IGNORECASE
)


def names_a_source(response: str) -> bool:
    """Whether a response's own words (tags cut out) name a document by its number."""
    return bool(_NAMES_SOURCE_RE.search(outside_tags(response)))


def _share(n: int, d: int) -> float | None:
    return round(n / d, 4) if d else None


def recipe_statistics(
    rows: Sequence[Mapping[str, Any]], prompts: Sequence[Any], recipe: RagSftRecipe
) -> dict[str, Any]:
    """The Luciole RAG card's statistics of the kept rows, from their prompts.

    Args:
        rows: the ``rag_sft`` rows (``id``, ``messages``).
        prompts: every prompt built (``RagPrompt``: kind, pair, citation style, refusal rule,
            titles, gold titles, paragraphs).
        recipe: the run's recipe (``min_quote_words`` for the stricter quoting rules).

    Returns:
        ``refusals_gold_left`` (kept twin refusals by how many of their question's golds are still
        among their documents: ``none`` / ``one``, counts and shares), ``references_share`` (kept
        rows asked for a References section), ``strict_rule`` (kept rows under the strict rule
        and under the generic one, split answerable / unanswerable, with the refusal share under
        each), ``answers_citing_two_documents`` (share of kept answers whose tags cite exactly
        2 distinct documents), ``answers_naming_source`` and ``refusals_naming_source`` (shares
        whose own words name a document by number) and ``quote_flags`` (kept rows whose tags
        break the stricter quoting rules ``partial_word`` / ``too_short``, by rule).
    """
    by_id = {p.id: p for p in prompts}
    answerable_of = {p.pair_id: p for p in prompts if p.kind == "answerable"}
    kept = [(r, by_id[r["id"]]) for r in rows if r["id"] in by_id]
    answers = [(r, p) for r, p in kept if p.kind == "answerable"]
    refusals = [(r, p) for r, p in kept if p.kind != "answerable"]
    gold_left: Counter = Counter()
    for _, p in refusals:
        sibling = answerable_of.get(p.pair_id)
        if p.twin_kind and sibling is not None:
            left = sum(g in p.titles for g in sibling.gold_titles)
            gold_left["none" if left == 0 else "one" if left == 1 else "two_or_more"] += 1
    twins = sum(gold_left.values())
    rules: dict[str, dict[str, Any]] = {}
    for rule in ("strict", "generic"):
        under = [(r, p) for r, p in kept if p.refusal_rule == rule]
        ans = sum(p.kind == "answerable" for _, p in under)
        rules[rule] = {
            "rows": len(under),
            "answerable": ans,
            "unanswerable": len(under) - ans,
            "refusal_share": _share(len(under) - ans, len(under)),
        }
    two_docs = 0
    for r, _ in answers:
        cited = {t.id for t in parse_refs(_response(r)).tags if t.id is not None}
        two_docs += len(cited) == 2
    flags: Counter = Counter()
    for r, p in kept:
        rep = check_response(_response(r), p.paragraphs, strict=True, min_words=recipe.min_quote_words)
        found = {t.verdict for t in rep.tags if t.verdict in (PARTIAL_WORD, TOO_SHORT)}
        flags["rows"] += bool(found)
        for f in found:
            flags[f] += 1
    return {
        "refusals_gold_left": {
            "none": gold_left["none"],
            "one": gold_left["one"],
            "none_share": _share(gold_left["none"], twins),
            "one_share": _share(gold_left["one"], twins),
        },
        "references_share": _share(sum(p.citation_style == "reference" for _, p in kept), len(kept)),
        "strict_rule": rules,
        "answers_citing_two_documents": _share(two_docs, len(answers)),
        "answers_naming_source": _share(sum(names_a_source(_response(r)) for r, _ in answers), len(answers)),
        "refusals_naming_source": _share(
            sum(names_a_source(_response(r)) for r, _ in refusals), len(refusals)
        ),
        "quote_flags": {
            "mode": recipe.citation_check,
            "kept_rows_flagged": flags["rows"],
            PARTIAL_WORD: flags[PARTIAL_WORD],
            TOO_SHORT: flags[TOO_SHORT],
        },
    }


def chain_statistics(
    rows: Sequence[dict[str, Any]],
    question_meta: Mapping[str, tuple[str, str]],
    example_questions: Mapping[str, str],
    token_counter: TokenCounter | None = None,
    tokenizer_name: str | None = None,
    strict_phrases: Sequence[str] = (),
    prompts: Sequence[Any] = (),
    recipe: RagSftRecipe | None = None,
) -> dict[str, Any]:
    """Every statistic of a chain's ``rag_sft`` rows: the asset's metadata and the card read this one dict.

    Args:
        rows: the ``rag_sft`` rows.
        question_meta: question id -> (type, level), from the chain's input questions.
        example_questions: example id -> question id, for every prompt built (the generated set).
        token_counter: see :func:`sft_statistics`.
        tokenizer_name: its name.
        strict_phrases: the strict refusal phrases of the data's language (commitment table).
        prompts: every prompt built, for :func:`recipe_statistics` (with ``recipe``).
        recipe: the run's recipe: its record (``recipe``: what the card says of it), the prompt's
            parts quoted from the card and ours (``prompt_parts``), the commitment mix's refusal
            share, and :func:`recipe_statistics`.
    """
    stats = sft_statistics(rows, token_counter, tokenizer_name)
    share = recipe.commitment_refusal_share if recipe is not None else COMMITMENT_REFUSAL_SHARE
    stats["commitment"] = commitment_table(rows, strict_phrases, refusal_share=share)
    stats.update(answer_refusal_words(rows))
    stats["question_mix"] = question_mix(
        dict(question_meta),
        sorted(set(example_questions.values())),
        sorted({example_questions[r["id"]] for r in rows if r["id"] in example_questions}),
    )
    if recipe is not None:
        from ragsft_assets.rag_sft.examples import prompt_parts

        stats["recipe"] = recipe_records.record(recipe)
        stats["prompt_parts"] = prompt_parts(recipe.instructions_language)
        stats.update(recipe_statistics(rows, prompts, recipe))
    return stats


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


# The Luciole RAG card's table "How refusals start" (000, the French recipe's section, step 7), its
# own figures as it prints them: "commitment = mean probability of a refusal given the first words of
# the response, measured on the 10% refusal mix". Columns as the card names them: its earlier French
# config, then the configs of the French and the citation recipes (named in rag_sft/recipes.py); the
# card prints no figure for trust_align, so that config shows the three columns for reference only.
CARD_COMMITMENT_COLUMNS = ("hotpotqa_fr_abstracts", FR_V2, HOTPOTQA_CITE)
CARD_COMMITMENT_HEADERS = (
    "the card: hotpotqa_fr_abstracts",
    f"the card: {FR_V2}",
    f"the card: {HOTPOTQA_CITE} (English)",
)
CARD_COMMITMENT: dict[str, dict[str, str]] = {
    # "Most frequent first sentence	89.5%	4.6%	3.5%"
    "most_frequent_first_sentence_share": dict(
        zip(CARD_COMMITMENT_COLUMNS, ("89.5%", "4.6%", "3.5%"), strict=True)
    ),
    # "Opening with the strict refusal phrase	95.8%	0.1%	0%"
    "strict_phrase_opening_share": dict(zip(CARD_COMMITMENT_COLUMNS, ("95.8%", "0.1%", "0%"), strict=True)),
    # "Commitment after the first word	0.89	0.39	0.12"
    "commitment_1": dict(zip(CARD_COMMITMENT_COLUMNS, ("0.89", "0.39", "0.12"), strict=True)),
    # "Commitment after the first two words	0.93	0.54	0.35"
    "commitment_2": dict(zip(CARD_COMMITMENT_COLUMNS, ("0.93", "0.54", "0.35"), strict=True)),
}
_PERCENT_MEASURES = {"most_frequent_first_sentence_share", "strict_phrase_opening_share"}


COMMITMENT_MEASURES = (
    ("most frequent first sentence", "most_frequent_first_sentence"),
    ("  its share of refusals", "most_frequent_first_sentence_share"),
    ("refusals opening with the strict phrase", "strict_phrase_opening_share"),
    ("commitment after one word", "commitment_1"),
    ("commitment after two words", "commitment_2"),
)


def _ours(measure: str, value: Any) -> str:
    """This build's cell, in the card's unit: shares as percentages (one decimal), the rest as is."""
    if value is None or measure not in _PERCENT_MEASURES:
        return _cell(value)
    return f"{round(float(value) * 100, 1)}%"


def _card_values(measure: str) -> tuple[str, ...]:
    """The card's three cells of a measure ("" where the card's table has no such row)."""
    figures = CARD_COMMITMENT.get(measure, {})
    return tuple(figures.get(c, "") for c in CARD_COMMITMENT_COLUMNS)


def _tokens_rows(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    tok = stats.get("prompt_response_tokens") or {}
    if not tok:
        return []
    return [
        (
            f"prompt + response tokens (median, p99, max; tokenizer: {stats.get('tokenizer')})",
            f"{_cell(tok.get('median'))}, {_cell(tok.get('p99'))}, {_cell(tok.get('max'))}",
        )
    ]


def _template_name(part: str) -> str:
    """``rag_rule_cite_inline.en (its other sentences)`` as the template's name in code, then the note."""
    name, _, note = part.partition(" ")
    return f"`{name}`" + (f" {note}" if note else "")


def recipe_lines(stats: Mapping[str, Any], config: str) -> list[str]:
    """The recipe sentence and which parts of the system prompt the card quotes (none without a recipe)."""
    record = stats.get("recipe")
    if not record:
        return []
    lines = [f"### `{config}`: recipe and prompt", "", recipe_records.card_sentence(record), ""]
    if record.get("other_recipes"):
        ran = ", ".join(f"`{stage}` ran `{name}`" for stage, name in sorted(record["other_recipes"].items()))
        lines += [f"Stages built with another recipe: {ran}.", ""]
    parts = stats.get("prompt_parts") or {}
    for template, sentences in (parts.get("quoted") or {}).items():
        lines += [f"Quoted word for word from the card (OpenRAG's inference prompt), in `{template}`:", ""]
        lines += [f"> {s}" for s in sentences] + [""]
    if parts.get("ours"):
        versions = parts.get("versions") or {}
        ours = ", ".join(_template_name(t) for t in parts["ours"])
        lines += [
            f"Ours (not quoted by the card): {ours}. Template versions: "
            + ", ".join(f"{t} {v}" for t, v in sorted(versions.items()))
            + ".",
            "",
        ]
    return lines


def card_statistics_lines(stats: Mapping[str, Any], config: str) -> list[str]:
    """The card's statistics table of :func:`recipe_statistics` (none when they were not computed)."""
    from ragsft_assets.table_stats import markdown_table

    if "strict_rule" not in stats:
        return []
    gold = stats["refusals_gold_left"]
    strict, generic = stats["strict_rule"]["strict"], stats["strict_rule"]["generic"]
    flags = stats["quote_flags"]
    verb = "dropped" if flags["mode"] == "drop" else "flagged in the ledger, kept"
    rows = [
        (
            "refusals with no gold left / one gold left (share of twin refusals)",
            f"{gold['none']} / {gold['one']} ({_cell(gold['none_share'])} / {_cell(gold['one_share'])})",
        ),
        ("rows citing in a References section", _cell(stats["references_share"])),
        (
            "strict rule: rows (answerable / unanswerable), refusal share",
            f"{strict['rows']} ({strict['answerable']} / {strict['unanswerable']}), {_cell(strict['refusal_share'])}",
        ),
        (
            "generic rule: rows (answerable / unanswerable), refusal share",
            f"{generic['rows']} ({generic['answerable']} / {generic['unanswerable']}), "
            f"{_cell(generic['refusal_share'])}",
        ),
        ("answers citing exactly 2 distinct documents", _cell(stats["answers_citing_two_documents"])),
        ("answers naming a source by number in the text", _cell(stats["answers_naming_source"])),
        ("refusals naming a source by number in the text", _cell(stats["refusals_naming_source"])),
        (
            f"kept rows the stricter quoting rules flag (partial_word / too_short; ours, {verb})",
            f"{flags['kept_rows_flagged']} ({flags[PARTIAL_WORD]} / {flags[TOO_SHORT]})",
        ),
    ]
    return [f"### `{config}`: the card's statistics", "", markdown_table(["measure", "value"], rows), ""]


def card_section(stats: Mapping[str, Any], config: str) -> list[str]:
    """The card's markdown lines for a config's :func:`chain_statistics` (the seed card's tables).

    The recipe ("as the card" or its differences) and the prompt's parts quoted from the card;
    documents per prompt; words of answers and of refusals (median, p90); ``<ref>`` tags per
    answer; the share of rows with an elided excerpt; token lengths and the tokenizer that
    counted them; the card's statistics (:func:`recipe_statistics`); the commitment table beside
    the card's; and the type (bridge/comparison) and level shares of the generated and the kept
    questions side by side, so that a skew from the filter shows.
    """
    from ragsft_assets.table_stats import markdown_table

    lines_head = recipe_lines(stats, config)
    docs = stats.get("documents_per_prompt") or {}
    ans, ref = stats.get("answer_words") or {}, stats.get("refusal_words") or {}
    tags = stats.get("ref_tags_per_answerable") or {}
    lines = [*lines_head, f"### `{config}`: citations and answers", ""]
    lines += [
        markdown_table(
            ["measure", "value"],
            [
                (
                    "rows (answerable / unanswerable)",
                    f"{stats.get('answerable')} / {stats.get('unanswerable')}",
                ),
                (
                    "documents per prompt (mean, median, min-max)",
                    f"{_cell(docs.get('mean'))}, {_cell(docs.get('median'))}, "
                    f"{_cell(docs.get('min'))}-{_cell(docs.get('max'))}",
                ),
                ("answer words (median, p90)", f"{_cell(ans.get('median'))}, {_cell(ans.get('p90'))}"),
                ("refusal words (median, p90)", f"{_cell(ref.get('median'))}, {_cell(ref.get('p90'))}"),
                (
                    "`<ref>` tags per answer (mean, median)",
                    f"{_cell(tags.get('mean'))}, {_cell(tags.get('median'))}",
                ),
                ("rows with an elided excerpt (`A ... B`)", _cell(stats.get("elided_excerpt_share"))),
                ("refusals that quote before declining", _cell(stats.get("refusals_that_quote_share"))),
                *_tokens_rows(stats),
            ],
        ),
        "",
    ]
    lines += card_statistics_lines(stats, config)
    com = stats.get("commitment") or {}
    if com.get("mix_rows"):
        lines += [
            f"### `{config}`: refusal commitment (on a mix resampled to 10% refusals)",
            "",
            markdown_table(
                ["measure", "this build", *CARD_COMMITMENT_HEADERS],
                [
                    ("mix (rows, refusals)", f"{com['mix_rows']}, {com['mix_refusals']}", "", "", ""),
                    *(
                        (label, _ours(key, com[key]), *_card_values(key))
                        for label, key in COMMITMENT_MEASURES
                    ),
                ],
            ),
            "",
            "Commitment after k words: the mean, over refusals, of the share of refusals among the "
            f"rows that open with the same k words. Tokenization: {com['tokenization']}. The card's "
            'columns are its table "How refusals start", its own figures (hotpotqa_fr_abstracts is '
            "the earlier French config whose refusal openings step 7 rewrites).",
            "",
        ]
    mix = stats.get("question_mix") or {}
    gen, kept = mix.get("generated") or {}, mix.get("kept") or {}
    if gen:
        rows = [("questions", "", gen.get("questions"), kept.get("questions"))]
        for facet in ("type", "level"):
            values = sorted(set(gen.get(facet) or {}) | set(kept.get(facet) or {}))
            rows += [
                (facet, v, (gen.get(facet) or {}).get(v, 0.0), (kept.get(facet) or {}).get(v, 0.0))
                for v in values
            ]
        lines += [
            f"### `{config}`: question mix, generated vs kept",
            "",
            "Shares of the questions that got a prompt and of those with a kept row: the filter "
            "should not skew them.",
            "",
            markdown_table(["facet", "value", "generated", "kept"], rows),
            "",
        ]
    return lines
