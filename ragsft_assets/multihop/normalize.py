"""Answer normalization and matching shared by the checks, the distractors, the judge and the audit.

One definition everywhere, so "the answer is in this document" means the same thing
when a distractor is excluded, when the judge's reply is scored and when the audit
re-checks the release.
"""

from __future__ import annotations

import re
import unicodedata

# English and French articles (``l'`` becomes ``l`` once the apostrophe is punctuation).
ARTICLES = frozenset({"a", "an", "the", "le", "la", "les", "l", "un", "une", "des"})
IMPOSSIBLE = "impossible"  # the same word in French and English
_SPACE_RE = re.compile(r"\s+")


class _Folded(dict[int, str]):
    """Code point -> what it becomes once accents are stripped (its NFKD decomposition without
    combining marks) and punctuation and symbols are spaces; filled as characters are met.

    Per character, this is exactly the rule applied to the whole text: NFKD decomposes each
    character alone, and its reordering moves only combining marks (ccc > 0), which are dropped.
    ``str.translate`` over it is about 3.7x faster than generators over the characters (the
    audit and the checks normalize every paragraph of every question)."""

    def __missing__(self, code: int) -> str:
        kept = (c for c in unicodedata.normalize("NFKD", chr(code)) if not unicodedata.combining(c))
        out = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in kept)
        self[code] = out
        return out


_FOLDED = _Folded()


def normalize_text(text: str, drop_articles: bool = True) -> str:
    """Lowercase, strip accents, turn punctuation/symbols into spaces, drop articles, squeeze spaces."""
    tokens = text.lower().translate(_FOLDED).split()
    if drop_articles:
        tokens = [t for t in tokens if t not in ARTICLES]
    return " ".join(tokens)


def contains_normalized(haystack_norm: str, needle_norm: str) -> bool:
    """True when the normalized needle occurs in the normalized haystack on token boundaries."""
    if not needle_norm:
        return False
    return f" {needle_norm} " in f" {haystack_norm} "


def answer_matches(gold: str, response: str) -> bool:
    """The judge's response gives the gold answer: equal after normalization, or contains it."""
    g, r = normalize_text(gold), normalize_text(response)
    if not g or not r or is_impossible(response):
        return False
    return r == g or contains_normalized(r, g)


def is_impossible(response: str) -> bool:
    """The response declares the question unanswerable (first word IMPOSSIBLE, any case/punctuation)."""
    tokens = normalize_text(response, drop_articles=False).split()
    return bool(tokens) and tokens[0] == IMPOSSIBLE


def squeeze_spaces(text: str) -> str:
    return _SPACE_RE.sub(" ", text).strip()
