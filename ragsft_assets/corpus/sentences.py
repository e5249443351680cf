"""A rule-based sentence splitter for French and English abstracts.

Why rule-based and not a compiled model (blingfire, pysbd...): only the abstract of each article is
split (a few hundred characters), so one precompiled regular expression plus an abbreviation check
costs a few microseconds per abstract — far below the JSON decode of the record it comes from — and
adds no dependency. Blingfire's default model is trained on English and splits French abbreviations
such as ``av. J.-C.`` or ``Mgr.``; here the abbreviation lists are explicit, per language, and tested.

The rule: a boundary is one or more of ``. ! ? …`` (optionally followed by closing quotes or brackets),
then whitespace, then something that can open a sentence (an uppercase letter, a digit, an opening
quote or bracket). It is not a boundary when the word before the period is a known abbreviation or a
single-letter initial (``J. R. R. Tolkien``). Line breaks always end a sentence.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from importlib import resources

# The abbreviation lists are data files per language (``data/abbreviations.<lang>.json``) so they can be
# reviewed and extended without touching code. Three kinds: those that never end a sentence ("M.",
# "p."), "etc." that ends one before any capitalised word, and words that are also abbreviations
# ("art", "col", "vol", "cap") that end one only before a sentence opener (a pronoun, article or
# determiner: "l'art. Il" splits, "le col. Picquart" and "art. 5" do not).


@dataclass(frozen=True)
class AbbreviationRules:
    """One language's abbreviation lists (see ``data/abbreviations.<lang>.json``)."""

    before_names_and_numbers: frozenset[str]
    ends_sentence_before_capital: frozenset[str]
    ends_sentence_before_opener: frozenset[str]
    sentence_openers: frozenset[str]
    # The union of the three abbreviation lists, computed once (it is read for every abstract).
    all: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        union = (
            self.before_names_and_numbers
            | self.ends_sentence_before_capital
            | self.ends_sentence_before_opener
        )
        object.__setattr__(self, "all", union)

    def __or__(self, other: AbbreviationRules) -> AbbreviationRules:
        return AbbreviationRules(
            *(getattr(self, f.name) | getattr(other, f.name) for f in dataclasses.fields(self) if f.init)
        )


def _load_rules(lang: str) -> AbbreviationRules:
    doc = json.loads(
        resources.files("ragsft_assets.corpus").joinpath(f"data/abbreviations.{lang}.json").read_text("utf-8")
    )
    return AbbreviationRules(
        *(frozenset(doc[f.name]) for f in dataclasses.fields(AbbreviationRules) if f.init)
    )


RULES: dict[str, AbbreviationRules] = {lang: _load_rules(lang) for lang in ("fr", "en")}
_ANY_RULES = RULES["fr"] | RULES["en"]
ABBREVIATIONS: dict[str, frozenset[str]] = {lang: r.all for lang, r in RULES.items()}

# Terminal punctuation, optional closers, whitespace, then a plausible sentence opener.
# French typography puts a (non-breaking) space before the closing guillemet: "« Oui. » Il part."
# The opener is a lookahead of the boundary pattern, so the regex engine (C) skips the boundaries that no
# sentence opener follows instead of returning each one to the Python loop. Same boundaries as matching
# ``_BOUNDARY_ONLY`` then ``_OPENER_SRC`` at its end: a boundary's run of punctuation, closers and whitespace
# holds no other boundary's start, and a shorter backtracked match never passes the opener check when the
# longest one fails (test_corpus_sentences checks both forms agree on real and fuzzed text).
_BOUNDARY_ONLY = r"([.!?…]+)(?:[\"'»”’)\]]|[ \u00a0\u202f]»)*(\s+)"
_OPENER_SRC = r"[\"«“(\[]?\s*[A-ZÀ-ÖØ-ÞŒ0-9]"
_BOUNDARY = re.compile(_BOUNDARY_ONLY + "(?=" + _OPENER_SRC + ")")
# Whitespace that the final normalisation would change: any but a space (line breaks, tabs, non-breaking
# spaces, which ``str.split`` also splits at), or two spaces in a row.
_ODD_SPACE = re.compile(r"[^\S ]| {2}")


def _single_spaced(text: str) -> bool:
    """``_ODD_SPACE.search(text) is None`` or False, fast: every whitespace character but the space is
    non-printable (checked over all of Unicode in test_corpus_sentences), and ``isprintable`` and ``in``
    scan in C where the regex steps through its alternation at every character."""
    return text.isprintable() and "  " not in text


# The next word, up to an apostrophe ("L'église" -> "L"), for the sentence-opener check.
_NEXT_WORD = re.compile(r"[\"«“(\[]?\s*([^\W\d_]+)")


def _last_word(text: str, end: int) -> str:
    word = text[text.rfind(" ", 0, end) + 1 : end]
    for sep in "'’(":  # "l'art" -> "art"
        if sep in word:
            word = word.rsplit(sep, 1)[1]
    return word


def _ends_sentence_anyway(text: str, end: int, after: int, rules: AbbreviationRules) -> bool:
    """Whether an abbreviation's period at ``end`` still ends a sentence, given what follows ``after``."""
    word = _last_word(text, end)
    nxt = _NEXT_WORD.match(text, after)
    if nxt is None or not nxt.group(1)[0].isupper():
        return False  # a digit or lowercase follows: "art. 5"
    if word in rules.ends_sentence_before_capital or word.lower() in rules.ends_sentence_before_capital:
        return True
    if word in rules.ends_sentence_before_opener or word.lower() in rules.ends_sentence_before_opener:
        return nxt.group(1) in rules.sentence_openers
    return False


_INITIALS_SEP = re.compile(r"[.\-]")


def _is_abbreviation(text: str, end: int, abbreviations: frozenset[str]) -> bool:
    """Whether the period ending at ``end`` closes an abbreviation or an initial."""
    start = text.rfind(" ", 0, end) + 1
    word = text[start:end]
    if word.isalpha():
        # The usual case, a plain word: no separator to cut at, and a single part (not dotted).
        return len(word) == 1 or word in abbreviations or word.lower() in abbreviations
    for sep in "'’(":  # "d'env." -> "env"
        if sep in word:
            word = word.rsplit(sep, 1)[1]
    if not word:
        return False
    if len(word) == 1 and word.isalpha():
        return True  # an initial: "J. Verne", "Charles M. Schulz"
    if word in abbreviations or word.lower() in abbreviations:
        return True
    if "." not in word and "-" not in word:
        return False  # one part ("1953", "l'Orbelle" cut to "Orbelle"): not dotted initials
    # Dotted initials and acronyms: "J.-C", "U.S", "R.F.A" — each part one or two letters.
    parts = [p for p in _INITIALS_SEP.split(word) if p]
    return len(parts) > 1 and all(len(p) <= 2 and p.isalpha() for p in parts)


def split_sentences(text: str, lang: str = "fr") -> list[str]:
    """Split ``text`` into sentences.

    Args:
        text: the text (an abstract). Runs of whitespace inside a sentence become one space.
        lang: ``fr`` or ``en`` (other languages use the union of both abbreviation lists).

    Returns:
        The non-empty sentences, stripped, in order; ``" ".join`` of them equals the text with its
        whitespace normalised.
    """
    rules = RULES.get(lang) or _ANY_RULES
    abbreviations = rules.all
    out: list[str] = []
    for block in text.splitlines():
        block = block.strip()
        if not block:
            continue
        start = 0
        for m in _BOUNDARY.finditer(block):
            if (
                m.group(1) == "."
                and _is_abbreviation(block, m.start(1), abbreviations)
                and not _ends_sentence_anyway(block, m.start(1), m.end(), rules)
            ):
                continue
            out.append(block[start : m.start(2)])
            start = m.end()
        tail = block[start:]
        if tail.strip():
            out.append(tail)
    if _single_spaced(text):
        # Only single ASCII spaces in the text: every piece starts and ends next to a non-space (a
        # boundary's punctuation or closer, the opener after its whitespace, the stripped block's ends),
        # so each is already normalised. Two C scans instead of a split and a join per sentence.
        return out
    # str.split/join (C speed) normalises inner whitespace runs to one space.
    return [" ".join(s.split()) for s in out if not s.isspace()]
