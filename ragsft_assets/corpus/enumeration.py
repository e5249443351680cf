"""The enumeration rule: is a link's alias only an item of a list ("des peintres tels que X, Y et Z")?

A link whose anchor stands only inside such a list says little about the target (the source does not
describe the relation), so the link graph drops it. The rule, per occurrence of the alias in its
sentence:

1. The sentence is cut into clauses at ``; : ( ) [ ]``; the clause holding the occurrence is cut into
   items at list separators: a comma (optionally followed by et/ou/and/or), or a bare
   ``et``/``ou``/``and``/``or``/``ainsi que``.
2. The alias must sit at an item's edge: at its end (then the list can continue to the right), at its
   start after determiners or a trigger (then it can continue to the left), or fill the whole item.
3. From there the list is followed over separators; an item in the middle of a list has at most
   ``MAX_INNER_WORDS`` words (the first and last items may carry the rest of the clause: "Elle
   traverse Castelmaure, Valrenne et Lanvière avant de ...").
4. It is an enumeration when the list has at least 3 items and a conjunction or a trigger ("tels
   que", "comme", "notamment", "such as", "including", a colon...), or at least 2 items and a trigger.

"Il peint Paris et Rome." (2 items, no trigger) and appositions "Valrenne, chef-lieu de l'Orbelle,
est ..." (no conjunction) are not enumerations. An alias with at least one occurrence outside any
enumeration keeps its edge.
"""

from __future__ import annotations

import re
from typing import Any

MAX_INNER_WORDS = 4
WINDOW = 160  # characters on each side of the alias that the rule looks at

_BARRIER = re.compile(r"[;:()\[\]]")
_SEPARATOR_SRC = r"\s*,\s*(?:(?:et|ou|and|or)\s+)?|\s+(?:et|ou|and|or|ainsi\s+que|as\s+well\s+as)\s+"
# Every separator starts with a space or a comma: the lookahead finds the same matches, but rejects the
# other positions at once instead of trying both alternatives there (a third less time in _items).
_SEPARATOR = re.compile(r"(?=[\s,])(?:" + _SEPARATOR_SRC + ")", re.I)
_CONJUNCTION = re.compile(r"\b(?:et|ou|and|or|ainsi\s+que|as\s+well\s+as)\b", re.I)
_TRIGGERS_SRC = (
    r"(?:\b(?:tel(?:le)?s?\s+que|comme|notamment|dont|parmi\s+lesquel(?:le)?s|en\s+particulier"
    r"|such\s+as|including|like|among\s+them|among\s+which|namely)\b|:)"
)
_TRIGGER_END = re.compile(_TRIGGERS_SRC + r"\s*$", re.I)
_TRIGGER_ANY = re.compile(_TRIGGERS_SRC, re.I)
_DETERMINERS_END = re.compile(
    r"(?:^|\s)(?:(?:le|la|les|l['’]|un|une|des|du|de|d['’]|à|au|aux|en|the|a|an|of|in|at)\s*)*$", re.I
)
_TRAILING = re.compile(r"^[\s.,;!?…»”\"')\]]*$")
_FAST_HINT = re.compile(r",|\b(?:et|ou|and|or|que|comme|notamment|dont|such|including|like)\b|:", re.I)


def _items(clause: str) -> tuple[list[tuple[int, int]], list[str]]:
    """Item spans of a clause and the separators between them."""
    spans: list[tuple[int, int]] = []
    seps: list[str] = []
    pos = 0
    for m in _SEPARATOR.finditer(clause):
        if m.start() == m.end():
            continue
        spans.append((pos, m.start()))
        seps.append(m.group(0))
        pos = m.end()
    spans.append((pos, len(clause)))
    return spans, seps


def _words(text: str) -> int:
    return len(text.split())


_SEP_AFTER = re.compile(r"[\"'»”’)\]]*\s*(?:,|\s(?:et|ou|and|or|ainsi\s+que|as\s+well\s+as)\s)", re.I)
_SEP_BEFORE = re.compile(
    _TRIGGERS_SRC + r"\s*(?:(?:le|la|les|l['’]|un|une|des|du|de|d['’]|à|au|aux|en|the|a|an|of|in|at)\s*)*$"
    r"|(?:,|\b(?:et|ou|and|or|que|as))\s*(?:(?:le|la|les|l['’]|un|une|des|du|de|d['’]|à|au|aux|en|the|a|an|of|in|at)\s*)*$",
    re.I,
)


def _may_be_listed(sentence: str, start: int, end: int) -> bool:
    """Cheap necessary condition: a separator or trigger right before or right after the occurrence."""
    return bool(_SEP_AFTER.match(sentence, end) or _SEP_BEFORE.search(sentence, max(0, start - 40), start))


def occurrence_in_enumeration(sentence: str, start: int, end: int) -> bool:
    """Whether the alias at ``sentence[start:end]`` is an item of an enumeration (see module doc)."""
    if not _may_be_listed(sentence, start, end):
        return False
    # Only a window around the alias can hold its list (inner items are short): bounded work per edge.
    lo, hi = max(0, start - WINDOW), min(len(sentence), end + WINDOW)
    cs = 0
    for m in _BARRIER.finditer(sentence, lo, start):
        cs = m.end()
    cs = max(cs, lo)
    m = _BARRIER.search(sentence, end, hi)
    ce = m.start() if m else hi
    clause_trigger = cs > 0 and sentence[cs - 1] == ":"
    clause = sentence[cs:ce]
    a, b = start - cs, end - cs
    spans, seps = _items(clause)
    k = next((i for i, (s, e) in enumerate(spans) if s <= a and b <= e), None)
    if k is None:
        return False  # the alias spans a separator: it is not one item
    s, e = spans[k]
    before, after = clause[s:a], clause[b:e]
    at_end = bool(_TRAILING.match(after))
    det = _DETERMINERS_END.search(before)
    core = before[: det.start()] if det else before  # what precedes the alias, determiners removed
    trigger = bool(_TRIGGER_END.search(core))
    at_start = trigger or not core.strip()
    if not at_end and not at_start:
        return False
    if at_start and not before.strip() and k == 0 and clause_trigger:
        trigger = True
    n = 1
    conj = False
    if at_start:
        j = k - 1
        while j >= 0:
            n += 1
            conj = conj or bool(_CONJUNCTION.search(seps[j]))
            left = clause[spans[j][0] : spans[j][1]]
            # A trigger inside the leftmost item ("des peintres tels que X") or before the clause.
            if _TRIGGER_ANY.search(left) or (j == 0 and clause_trigger):
                trigger = True
            if _words(left) > MAX_INNER_WORDS:
                break
            j -= 1
    if at_end:
        j = k + 1
        while j < len(spans):
            n += 1
            conj = conj or bool(_CONJUNCTION.search(seps[j - 1]))
            if _words(clause[spans[j][0] : spans[j][1]]) > MAX_INNER_WORDS:
                break
            j += 1
    return (n >= 3 and (conj or trigger)) or (n >= 2 and trigger)


def _has_hint(sentence: str) -> bool:
    """``_FAST_HINT.search(sentence)``, with its two literal alternatives tried first (``in`` is C-fast;
    the regex scans every position for its word alternatives)."""
    return "," in sentence or ":" in sentence or _FAST_HINT.search(sentence) is not None


def alias_only_in_enumeration(sentence: str, alias: str) -> bool:
    """True when every occurrence of ``alias`` in ``sentence`` is inside an enumeration.

    An alias that does not occur in the sentence is not "in an enumeration" (False).
    """
    if not alias or not _has_hint(sentence):
        return False
    return _alias_only(sentence, alias)


def _alias_only(sentence: str, alias: str) -> bool:
    """:func:`alias_only_in_enumeration` for a non-empty alias of a sentence known to hold a hint."""
    found = False
    pos = sentence.find(alias)
    while pos >= 0:
        end = pos + len(alias)
        # Only whole-word occurrences count ("D" is not found inside "Des").
        if (pos == 0 or not sentence[pos - 1].isalnum()) and (
            end == len(sentence) or not sentence[end].isalnum()
        ):
            found = True
            if not occurrence_in_enumeration(sentence, pos, end):
                return False
        pos = sentence.find(alias, pos + 1)
    return found


# The same hint for Arrow's RE2, over whole arrays in C++. RE2's \b and case folding are ASCII-based:
# wherever Python's pattern matches, this one does too, except through the four letters that Python
# (not RE2) folds onto ASCII ones (İ ı ſ K): sentences holding one of those are always "maybe".
_HINT_RE2 = r"[,:]|\b(?:et|ou|and|or|que|comme|notamment|dont|such|including|like)\b"
_PYTHON_ONLY_FOLDS = "[\u0130\u0131\u017f\u212a]"


def may_hold_enumeration(sentences: Any) -> Any:
    """Per sentence of a pyarrow string array: False only where no alias of it can be in an enumeration.

    A superset of the sentences where :func:`alias_only_in_enumeration` can be True (it needs what
    ``_FAST_HINT`` looks for), computed in C++: the Python rule only runs on the others.
    """
    import pyarrow.compute as pc

    hint = pc.match_substring_regex(sentences, _HINT_RE2, ignore_case=True)
    return pc.or_(hint, pc.match_substring_regex(sentences, _PYTHON_ONLY_FOLDS)).fill_null(False)


def flags_of_arrays(sentences: Any, index: Any, aliases: Any) -> Any:
    """``flags[i]`` = :func:`alias_only_in_enumeration` ``(sentences[index[i]], aliases[i])``, as a numpy
    bool array, over pyarrow arrays (utf8 sentences, integer indices into them, utf8 aliases)."""
    import numpy as np

    return np.array(enumeration_flags(sentence_alias_pairs(sentences, index, aliases)), dtype=np.bool_)


def sentence_alias_pairs(sentences: Any, index: Any, aliases: Any) -> list[tuple[str, str]]:
    """``(sentences[index[i]], aliases[i])`` as Python pairs; one str per distinct sentence, shared."""
    import pyarrow as pa
    import pyarrow.compute as pc

    positions = index.to_pylist()
    distinct = sorted(set(positions))
    texts = dict(zip(distinct, pc.take(sentences, pa.array(distinct, pa.int64())).to_pylist(), strict=True))
    return [(texts[i], a) for i, a in zip(positions, aliases.to_pylist(), strict=True)]


def enumeration_flags(pairs: list[tuple[str, str]]) -> list[bool]:
    """:func:`alias_only_in_enumeration` over ``(sentence, alias)`` pairs (a worker entry point)."""
    # A sentence holds several links: scan it for a separator or trigger once, not once per link.
    hints: dict[str, bool] = {}
    out = []
    for sentence, alias in pairs:
        hint = hints.get(sentence)
        if hint is None:
            hint = hints[sentence] = _has_hint(sentence)
        out.append(hint and bool(alias) and _alias_only(sentence, alias))
    return out
