"""The multi-answer recipe of the SFT chain: ``trust_align`` (Trust-Align's ASQA/QAMPARI rows).

The same stages as the citation config (``defs/rag_sft/assets.build_sft_chain``), with what the
card changes (its recipe, ``recipes.TRUST_ALIGN_RECIPE``): no twins (the source brings its own
unanswerable rows, ``sources/trust_align.py``), inline citations only, the strict refusal rule on
about 4% of examples, a factual judge on a multi-answer rubric that reads the passages and no
citation-F1 requirement; in formatting, an ``A ... B`` excerpt becomes consecutive tags, and a
response naming a document by number outside a tag, or an answerable one without any ``<ref>``,
is a counted, recorded drop. This module holds those formatting rules and the card's statistics.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import mean
from typing import Any

from ragsft_assets.rag_sft import recipes
from ragsft_assets.rag_sft.citations import (
    ELLIPSIS_PATTERN,
    RefTag,
    normalize,
    outside_tags,
    parse_refs,
    rewrite_inline_tags,
)

PRODUCT = recipes.TRUST_ALIGN
FACTUAL_TASK = recipes.TRUST_ALIGN_RECIPE.factual_rubric
NAMES_DOCUMENT = "names_document_number"
NO_REF = "answerable_without_ref"

# "Document 3", "document [3]", "Doc. 3", a bare "[5]" (the source's own citation style).
_DOCUMENT_NUMBER_RE = re.compile(
    r"\b(?:documents?|docs?\.?)\s*\[?\s*(\d+)\s*\]?|\[\s*(\d+)\s*\]", re.IGNORECASE
)


_SPLIT_KEEP_RE = re.compile(f"({ELLIPSIS_PATTERN})")


def is_multi_answer(partition: str) -> bool:
    """Whether a partition key is a source of this recipe (``trust_align.<lang>``)."""
    return recipes.is_trust_align_partition(partition)


def answers(answer: str) -> list[str]:
    """The reference answers of a prompt (``sources/trust_align`` joins them with ``; ``)."""
    return [a for a in (x.strip() for x in answer.split(";")) if a]


def split_elided_tags(response: str, documents: Sequence[str]) -> tuple[str, int]:
    """Each inline ``<ref id="N">A ... B</ref>`` as consecutive tags ``<ref id="N">A</ref><ref id="N">B</ref>``.

    Every fragment keeps its text verbatim (only the ellipsis and the space around it go); a
    response with markup defects, or a tag whose id is no document, is left as it is (the
    verifier rejects it). Returns the response and the number of tags split.
    """

    def split(t: RefTag, document: str) -> tuple[int, int, str] | None:
        parts = source_ellipses_kept(t.excerpt, document)
        if len(parts) < 2:
            return None
        return t.start, t.end, "".join(f'<ref id="{t.id}">{p}</ref>' for p in parts)

    return rewrite_inline_tags(response, documents, split)


def source_ellipses_kept(excerpt: str, document: str) -> list[str]:
    """The excerpt's pieces once split at the ellipses the document does not hold.

    The card: "the only ellipses left (9 examples) are part of the source text". An ellipsis is
    kept, with the fragments it joins, when that text is verbatim in the document (whitespace
    collapsed); every other one splits the excerpt. Pieces are stripped; empty ones go.
    """
    pieces = _SPLIT_KEEP_RE.split(excerpt)  # fragment, ellipsis, fragment, ...
    doc = normalize(document)
    out: list[str] = []
    current = pieces[0]
    for sep, frag in zip(pieces[1::2], pieces[2::2], strict=True):
        joined = current + sep + frag
        if current.strip() and frag.strip() and normalize(joined) in doc:
            current = joined  # the ellipsis is the source's own
        else:
            out.append(current)
            current = frag
    out.append(current)
    return [p for p in (x.strip() for x in out) if p]


def named_document_numbers(response: str) -> list[int]:
    """Document numbers named outside tags (``Document 3``, ``[5]``): the reader never sees numbers."""
    text = outside_tags(response)
    found = set()
    for m in _DOCUMENT_NUMBER_RE.finditer(text):
        found.add(int(m.group(1) or m.group(2)))
    return sorted(found)


def has_ref(response: str) -> bool:
    """Whether the response holds any ``<ref>`` tag."""
    return bool(parse_refs(response).tags)


def card_statistics(
    rows: Sequence[Mapping[str, Any]],
    prompts: Sequence[Mapping[str, Any]],
    questions: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The trust_align card's statistics.

    Args:
        rows: the ``rag_sft`` rows (chat messages; ``id``).
        prompts: ``rag_prompts`` rows (``id``, ``question_id``, ``kind``).
        questions: ``qa/questions`` rows (``id``, ``type``, ``gold_answers``, ``answers_present``,
            ``label_origin`` where the source reader wrote it).
        verdicts: ``rag_verdicts`` rows (``id``, ``kept``).

    Returns:
        ``partial_answer_share`` (answerable kept rows whose documents hold only some of the
        expected answers), ``cited_documents`` (distinct cited documents per kept answer: mean,
        share citing 1, share citing 3 or more), ``refusals_quoting`` (kept refusals with a tag
        before they decline), ``pass_rate_by_answers_present`` (verdicts kept / judged, by the
        number of expected answers present), ``subsets`` (ASQA vs QAMPARI, generated and kept)
        and ``label_origin`` (the questions that got a prompt, by where their answerable /
        unanswerable label came from: Trust-Align's own, ``source``, or ``inferred`` from the target).
    """
    by_prompt = {p["id"]: p for p in prompts}
    by_question = {q["id"]: q for q in questions}
    kept_rows = [r for r in rows if r["id"] in by_prompt]
    answered = [r for r in kept_rows if by_prompt[r["id"]]["kind"] == "answerable"]
    refusals = [r for r in kept_rows if by_prompt[r["id"]]["kind"] != "answerable"]

    def q_of(eid: str) -> Mapping[str, Any]:
        return by_question.get(by_prompt[eid]["question_id"], {})

    partial = [
        r
        for r in answered
        if 0 < (q_of(r["id"]).get("answers_present") or 0) < len(q_of(r["id"]).get("gold_answers") or [])
    ]
    cited = [len({t.id for t in parse_refs(r["messages"][2]["content"]).tags}) for r in answered]
    quoting = [r for r in refusals if has_ref(r["messages"][2]["content"])]
    judged: Counter = Counter()
    passed: Counter = Counter()
    for v in verdicts:
        if v["id"] not in by_prompt:
            continue
        n = int(q_of(v["id"]).get("answers_present") or 0)
        judged[n] += 1
        passed[n] += bool(v["kept"])
    gen = Counter(q_of(p["id"]).get("type", "") for p in prompts)
    prompted = {p["question_id"] for p in prompts}
    origin = Counter(q.get("label_origin") or "inferred" for q in questions if q["id"] in prompted)
    kept = Counter(q_of(r["id"]).get("type", "") for r in kept_rows)
    return {
        "rows": len(kept_rows),
        "answerable": len(answered),
        "refusals": len(refusals),
        "partial_answer_share": round(len(partial) / len(answered), 4) if answered else None,
        "cited_documents": {
            "mean": round(mean(cited), 4) if cited else None,
            "one": round(sum(c == 1 for c in cited) / len(cited), 4) if cited else None,
            "three_or_more": round(sum(c >= 3 for c in cited) / len(cited), 4) if cited else None,
        },
        "refusals_quoting": round(len(quoting) / len(refusals), 4) if refusals else None,
        "pass_rate_by_answers_present": {str(n): round(passed[n] / judged[n], 4) for n in sorted(judged)},
        "subsets": {"generated": dict(sorted(gen.items())), "kept": dict(sorted(kept.items()))},
        "label_origin": dict(sorted(origin.items())),
    }


def card_section(stats: Mapping[str, Any]) -> list[str]:
    """The trust_align statistics as Markdown lines for the release card."""
    cd = stats["cited_documents"]
    lines = [
        "## trust_align statistics",
        "",
        f"- rows: {stats['rows']} ({stats['answerable']} answers, {stats['refusals']} refusals)",
        f"- partial answers (the documents hold only some expected answers): {stats['partial_answer_share']}",
        f"- distinct cited documents per answer: mean {cd['mean']}; share citing 1: {cd['one']}; "
        f"3 or more: {cd['three_or_more']}",
        f"- refusals that quote before declining: {stats['refusals_quoting']}",
        "- answerable / unanswerable: Trust-Align's own label for "
        f"{stats.get('label_origin', {}).get('source', 0)} question(s), inferred from the target (no gold "
        f"answer in it) for {stats.get('label_origin', {}).get('inferred', 0)}",
        "",
        "| expected answers present | pass rate |",
        "|---|---|",
        *(f"| {n} | {r} |" for n, r in stats["pass_rate_by_answers_present"].items()),
        "",
        "| subset | generated | kept |",
        "|---|---|---|",
        *(
            f"| {s} | {stats['subsets']['generated'].get(s, 0)} | {stats['subsets']['kept'].get(s, 0)} |"
            for s in sorted(set(stats["subsets"]["generated"]) | set(stats["subsets"]["kept"]))
        ),
        "",
    ]
    return lines
