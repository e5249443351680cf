"""The deterministic citation verifier: one set of rules for building the data and checking models.

Two citation styles are recognised:

- inline: ``<ref id="N">excerpt</ref>``, where the excerpt is copied from document N;
- References-style: ``<ref id="N"/>`` (self-closing), one per cited document, in a final
  ``References:`` section.

Matching rules (the same everywhere: the data build, the verdicts and ``ragsft citations check``):

- Whitespace runs (any Unicode whitespace: spaces, no-break spaces, tabs, newlines) collapse
  to one space on both sides before matching, and the excerpt is trimmed. HotpotQA sentences
  carry their own leading spaces, so a quote spanning two sentences must still match.
- Nothing else is folded: case, punctuation, quotes (``"`` is not ``“``) and accents must match.
- An excerpt holding an ellipsis (``...``, ``…``, ``[...]``, ``[…]`` or ``. . .``) is split there:
  each fragment must be verbatim in the document and the fragments must appear in order, without
  overlapping. An excerpt that is verbatim as a whole (a document that itself holds ``...``) is
  one fragment.
- Strict quoting (on by default, ``strict=False`` turns it off to compare with data built
  without it): a fragment that starts or ends inside a word of the document (``aris is the
  capit``) is ``partial_word``; a fragment of fewer than ``min_words`` words (default 3) is
  ``too_short``, with or without an ellipsis. Both fail the tag like ``not_found``.
- Each tag gets a verdict: ``ok``, ``unknown_id`` (no document N), ``not_found`` (a fragment is
  not in the document), ``out_of_order`` (every fragment is there, not in order),
  ``partial_word``, ``too_short`` or ``malformed`` (bad attributes, unclosed, nested, empty
  excerpt).
- Malformed markup is a reported defect, never an exception.
- Precision, recall and F1 are over the distinct cited documents (tags whose id exists)
  against the gold titles; ``None`` when no gold titles are given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

OK = "ok"
UNKNOWN_ID = "unknown_id"
NOT_FOUND = "not_found"
OUT_OF_ORDER = "out_of_order"
MALFORMED = "malformed"
PARTIAL_WORD = "partial_word"
TOO_SHORT = "too_short"
VERDICTS = (OK, UNKNOWN_ID, NOT_FOUND, OUT_OF_ORDER, PARTIAL_WORD, TOO_SHORT, MALFORMED)
MIN_WORDS = 3

INLINE = "inline"
REFERENCE = "reference"

# The single definitions of the family's patterns (formatting and statistics import them).
WS_RE = re.compile(r"\s+")
# Bracketed forms first, so that "[...]" is one ellipsis and leaves no bracket in a fragment.
ELLIPSIS_PATTERN = r"\[\s*(?:\.\.\.+|…)\s*\]|\.\.\.+|…|\.(?:[ \u00a0]\.){2,}"
ELLIPSIS_RE = re.compile(ELLIPSIS_PATTERN)
# Any piece of ref markup, complete or not (residual Wikipedia <ref name=...> included).
TAG_MARKUP_RE = re.compile(r"</?ref\b[^<>]*>?", re.IGNORECASE)
_WORDS_RE = re.compile(r"\w+")
_WS_RE = WS_RE
_ELLIPSIS_RE = ELLIPSIS_RE
# Every token of ref markup: a complete tag (open, self-closing or closing) or a dangling "<ref"/"</ref"
# whose ">" never comes (the next "<" or the end of the text arrives first).
_TOKEN_RE = re.compile(r"</ref\s*>|<ref\b[^<>]*>|</?ref\b[^<>]*(?=<|$)", re.IGNORECASE)
_ID_ATTR_RE = re.compile(r'^<ref\s+id\s*=\s*"(\d+)"\s*(/?)>$')
_REFERENCES_HEADING_RE = re.compile(
    r"^\s*(?:\*\*|#+\s*)?(?:references|références|sources)\s*(?:\*\*)?\s*:?\s*(?:\*\*)?\s*$",
    re.IGNORECASE | re.MULTILINE,
)

REFERENCES_HEADING_RE = _REFERENCES_HEADING_RE  # the final References section's heading (formatting)


def collapse_ws(text: str) -> str:
    """Collapse every run of Unicode whitespace to one space (no trimming)."""
    return _WS_RE.sub(" ", text)


def normalize(text: str) -> str:
    """Whitespace runs collapsed to one space and the ends trimmed: the matching form of a text."""
    return collapse_ws(text).strip()


@dataclass(frozen=True, slots=True)
class Defect:
    """A markup problem found while parsing; ``kind`` is machine-readable."""

    kind: str  # unclosed | nested | stray_closing | bad_attributes | unterminated_tag | empty_excerpt | ...
    start: int
    text: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "start": self.start, "text": self.text}


@dataclass(slots=True)
class RefTag:
    """One citation tag as written in a response.

    ``id`` is the integer N, or None when the attributes could not be read. ``excerpt`` is the raw
    text between the tags (inline) or None (References-style). ``start``/``end`` span the whole
    tag (opening to closing) in the response; ``excerpt_start``/``excerpt_end`` the excerpt.
    """

    style: str
    id: int | None
    raw: str
    start: int
    end: int
    excerpt: str | None = None
    excerpt_start: int = -1
    excerpt_end: int = -1
    malformed: bool = False


@dataclass(slots=True)
class ParsedResponse:
    tags: list[RefTag] = field(default_factory=list)
    defects: list[Defect] = field(default_factory=list)
    has_references_heading: bool = False

    @property
    def inline(self) -> list[RefTag]:
        return [t for t in self.tags if t.style == INLINE]

    @property
    def references(self) -> list[RefTag]:
        return [t for t in self.tags if t.style == REFERENCE]


def parse_refs(response: str) -> ParsedResponse:
    """Parse every ref tag of a response; problems become defects, never exceptions.

    Inline tags nest nowhere: a tag opened inside another one marks both malformed
    (``nested``). A tag never closed is ``unclosed``; a ``</ref>`` with nothing open is a
    ``stray_closing`` defect (no tag). Attributes other than exactly ``id="<digits>"`` give a
    malformed tag (``bad_attributes``).
    """
    out = ParsedResponse(has_references_heading=bool(_REFERENCES_HEADING_RE.search(response)))
    stack: list[RefTag] = []
    for m in _TOKEN_RE.finditer(response):
        tok = m.group(0)
        if tok.startswith("</"):
            if not tok.endswith(">"):
                out.defects.append(Defect("unterminated_tag", m.start(), tok))
                continue
            if not stack:
                out.defects.append(Defect("stray_closing", m.start(), tok))
                continue
            tag = stack.pop()
            tag.end = m.end()
            tag.excerpt_end = m.start()
            tag.excerpt = response[tag.excerpt_start : tag.excerpt_end]
            if not tag.malformed and not normalize(tag.excerpt):
                tag.malformed = True
                out.defects.append(Defect("empty_excerpt", tag.start, response[tag.start : tag.end]))
            continue
        if not tok.endswith(">"):
            out.defects.append(Defect("unterminated_tag", m.start(), tok))
            out.tags.append(RefTag(INLINE, None, tok, m.start(), m.end(), malformed=True))
            continue
        attrs = _ID_ATTR_RE.match(tok)
        self_closing = tok.rstrip().endswith("/>")
        tag = RefTag(
            REFERENCE if self_closing else INLINE,
            int(attrs.group(1)) if attrs else None,
            tok,
            m.start(),
            m.end(),
        )
        if attrs is None:
            tag.malformed = True
            out.defects.append(Defect("bad_attributes", m.start(), tok))
        if stack:
            # Nested markup: neither the outer excerpt nor the inner tag can be trusted.
            tag.malformed = True
            for outer in stack:
                if not outer.malformed:
                    outer.malformed = True
            out.defects.append(Defect("nested", m.start(), tok))
        out.tags.append(tag)
        if not self_closing:
            tag.excerpt_start = m.end()
            stack.append(tag)
    for tag in stack:
        tag.malformed = True
        tag.excerpt = response[tag.excerpt_start :]
        tag.end = len(response)
        out.defects.append(Defect("unclosed", tag.start, tag.raw))
    out.tags.sort(key=lambda t: t.start)
    out.defects.sort(key=lambda d: (d.start, d.kind))
    return out


def rewrite_inline_tags(
    response: str,
    documents: Sequence[str],
    rewrite: Callable[[RefTag, str], tuple[int, int, str] | None],
) -> tuple[str, int]:
    """Apply ``rewrite(tag, its document) -> (start, end, text) or None`` to every inline tag.

    Only a response without markup defects is touched, and only tags whose id names one of
    ``documents`` (the verifier rejects the others as they are). Edits are applied from the end,
    so their offsets (into the original response) stay valid. Returns the response and the number
    of edits.
    """
    parsed = parse_refs(response)
    if parsed.defects:
        return response, 0
    edits = []
    for t in parsed.tags:
        if t.style != INLINE or t.excerpt is None or t.id is None or not 1 <= t.id <= len(documents):
            continue
        edit = rewrite(t, documents[t.id - 1])
        if edit is not None:
            edits.append(edit)
    for start, end, new in sorted(edits, reverse=True):
        response = response[:start] + new + response[end:]
    return response, len(edits)


def split_fragments(excerpt: str) -> list[str]:
    """The non-empty fragments of an excerpt around its ellipses, each normalized."""
    return [f for f in (normalize(p) for p in _ELLIPSIS_RE.split(excerpt)) if f]


def has_ellipsis(excerpt: str) -> bool:
    return bool(_ELLIPSIS_RE.search(excerpt))


def _on_word_bounds(doc: str, frag: str, i: int) -> bool:
    """Whether ``frag`` at ``doc[i:]`` neither starts nor ends inside a word of ``doc``."""
    j = i + len(frag)
    starts_inside = i > 0 and frag[0].isalnum() and doc[i - 1].isalnum()
    ends_inside = j < len(doc) and frag[-1].isalnum() and doc[j].isalnum()
    return not (starts_inside or ends_inside)


def _place(fragments: Sequence[str], doc: str, *, bounded: bool) -> list[tuple[int, int]] | None:
    """Greedy in-order placement of normalized fragments in a normalized document.

    The earliest acceptable match of each fragment after the previous one finds an in-order
    placement whenever one exists (a later match only leaves less room for the rest).
    """
    spans = []
    pos = 0
    for frag in fragments:
        i = doc.find(frag, pos)
        while bounded and i >= 0 and not _on_word_bounds(doc, frag, i):
            i = doc.find(frag, i + 1)
        if i < 0:
            return None
        spans.append((i, i + len(frag)))
        pos = i + len(frag)
    return spans or None


def locate_fragments(excerpt: str, document: str) -> list[tuple[int, int]] | None:
    """Spans, in ``normalize(document)``, of the excerpt's fragments matched in order; None if not."""
    return _place(split_fragments(excerpt), normalize(document), bounded=False)


def match_excerpt(excerpt: str, document: str, *, strict: bool = True, min_words: int = MIN_WORDS) -> str:
    """Verdict of one excerpt against one document.

    ok, not_found, out_of_order, and under ``strict`` partial_word or too_short (malformed if
    empty). not_found and out_of_order come first: they say the text is not there at all.
    """
    doc = normalize(document)
    whole = normalize(excerpt)
    if not whole:
        return MALFORMED
    # Verbatim as a whole (a document that itself holds the dots): one fragment.
    fragments = [whole] if whole in doc else split_fragments(excerpt)
    if not fragments:
        return MALFORMED
    if any(f not in doc for f in fragments):
        return NOT_FOUND
    if _place(fragments, doc, bounded=False) is None:
        return OUT_OF_ORDER
    if not strict:
        return OK
    if any(len(_WORDS_RE.findall(f)) < min_words for f in fragments):
        return TOO_SHORT
    return OK if _place(fragments, doc, bounded=True) is not None else PARTIAL_WORD


@dataclass(slots=True)
class TagVerdict:
    id: int | None
    verdict: str
    style: str
    excerpt: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "verdict": self.verdict}


@dataclass(slots=True)
class CitationReport:
    """The verdict of one response: what ``ragsft citations check`` prints per row."""

    tags: list[TagVerdict]
    defects: list[Defect]
    cited_ids: list[int]  # distinct existing document ids cited, ascending
    precision: float | None
    recall: float | None
    f1: float | None

    @property
    def tags_valid(self) -> bool:
        """No defect and every tag ``ok`` (a response without tags is valid)."""
        return not self.defects and all(t.verdict == OK for t in self.tags)

    @property
    def passes(self) -> bool:
        """Tags valid and, when golds are given, the cited documents are exactly the golds."""
        return self.tags_valid and (self.f1 is None or self.f1 == 1.0)

    @property
    def n_tags(self) -> int:
        return len(self.tags)

    def to_dict(self) -> dict[str, object]:
        return {
            "tags": [t.to_dict() for t in self.tags],
            "defects": [d.to_dict() for d in self.defects],
            "tags_valid": self.tags_valid,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "passes": self.passes,
        }


def citation_scores(
    cited_titles: Sequence[str], gold_titles: Sequence[str] | None
) -> tuple[float | None, float | None, float | None]:
    """Precision, recall, F1 of distinct cited titles against distinct gold titles (None without golds).

    Citing nothing against non-empty golds scores 0/0/0.
    """
    if not gold_titles:
        return None, None, None
    cited, gold = set(cited_titles), set(gold_titles)
    hit = len(cited & gold)
    precision = hit / len(cited) if cited else 0.0
    recall = hit / len(gold)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def check_response(
    response: str,
    documents: Sequence[str],
    titles: Sequence[str] | None = None,
    gold_titles: Sequence[str] | None = None,
    *,
    style: str | None = None,
    strict: bool = True,
    min_words: int = MIN_WORDS,
) -> CitationReport:
    """Check every citation of a response against its documents (1-based ids).

    Args:
        response: the assistant's text.
        documents: the text of document 1, 2, ... as shown to the model.
        titles: the title of each document (for scoring against ``gold_titles``); defaults to
            ``"1"``, ``"2"``, ... so scores then compare positions given as strings.
        gold_titles: the titles the answer must rest on; None or empty: no scores.
        style: ``"inline"`` or ``"reference"`` when the instructions asked for one style: tags of
            the other style become a ``wrong_style`` defect, and the References style also needs
            its ``References:`` heading, one tag per document. None accepts either.
        strict: apply the ``partial_word`` and ``too_short`` verdicts (see the module docstring).
        min_words: the fewest words a fragment may hold under ``strict``.
    """
    parsed = parse_refs(response)
    defects = list(parsed.defects)
    titles = list(titles) if titles is not None else [str(i + 1) for i in range(len(documents))]
    verdicts: list[TagVerdict] = []
    for tag in parsed.tags:
        if tag.malformed or tag.id is None:
            v = MALFORMED
        elif not 1 <= tag.id <= len(documents):
            v = UNKNOWN_ID
        elif tag.style == REFERENCE:
            v = OK
        else:
            v = match_excerpt(tag.excerpt or "", documents[tag.id - 1], strict=strict, min_words=min_words)
        verdicts.append(TagVerdict(tag.id, v, tag.style, tag.excerpt))
    if style is not None:
        for tag in parsed.tags:
            if tag.style != style:
                defects.append(Defect("wrong_style", tag.start, tag.raw))
        if style == REFERENCE and parsed.references:
            if not parsed.has_references_heading:
                defects.append(Defect("no_references_heading", parsed.references[0].start, ""))
            seen: set[int | None] = set()
            for tag in parsed.references:
                if tag.id in seen:
                    defects.append(Defect("duplicate_reference", tag.start, tag.raw))
                seen.add(tag.id)
    cited = sorted(
        {t.id for t in verdicts if t.id is not None and t.verdict != UNKNOWN_ID and t.verdict != MALFORMED}
    )
    precision, recall, f1 = citation_scores([titles[i - 1] for i in cited], gold_titles)
    defects.sort(key=lambda d: (d.start, d.kind))
    return CitationReport(verdicts, defects, cited, precision, recall, f1)


def strip_tags(response: str) -> str:
    """The response with ref markup removed (inline excerpts kept as plain text)."""
    return _TOKEN_RE.sub("", response)


def outside_tags(response: str) -> str:
    """The response's own words: every tag (opening to closing, excerpt included) cut out, stray
    ref markup blanked, whitespace normalized."""
    parsed = parse_refs(response)
    outside, pos = [], 0
    for t in sorted(parsed.tags, key=lambda t: t.start):
        outside.append(response[pos : t.start])
        pos = max(pos, t.end)
    outside.append(response[pos:])
    return normalize(TAG_MARKUP_RE.sub(" ", " ".join(outside)))
