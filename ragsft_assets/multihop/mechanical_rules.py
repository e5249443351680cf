"""The ``mechanical_rules`` filter: deterministic rules on the questions ``first_hop`` keeps.

Two rules, each a counted reason:

- ``year_answer_not_one_year``: a question that asks for a year must get an answer with exactly one
  year: not a month ("juin 1940"), two years ("1914-1918"), a century ("XIXe siècle") or no digits.
- ``names_the_document``: the question names the document itself ("selon son abstract", "mentionné
  dans le texte sur X", "according to its abstract"): the reader of a RAG context has no "abstract".

The patterns are data files per language (``data/mechanical_rules.<lang>.json``) so they can be
reviewed and extended without touching code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

YEAR_ANSWER_NOT_ONE_YEAR = "year_answer_not_one_year"
NAMES_THE_DOCUMENT = "names_the_document"
REASONS = (YEAR_ANSWER_NOT_ONE_YEAR, NAMES_THE_DOCUMENT)
KEPT = "kept"

_DIGIT_GROUP = re.compile(r"\d+")


@dataclass(frozen=True)
class RulePatterns:
    """One language's compiled patterns."""

    year_question: re.Pattern[str]
    month: re.Pattern[str]
    century: re.Pattern[str]
    names_the_document: re.Pattern[str]


@cache
def patterns(lang: str) -> RulePatterns:
    """The compiled patterns of ``lang`` (``fr`` or ``en``); ValueError for another language."""
    path = resources.files("ragsft_assets.multihop").joinpath(f"data/mechanical_rules.{lang}.json")
    if not path.is_file():
        raise ValueError(
            f"no mechanical-rule patterns for language {lang!r} (data/mechanical_rules.{lang}.json)"
        )
    doc = json.loads(path.read_text("utf-8"))
    return RulePatterns(
        year_question=re.compile("|".join(f"(?:{p})" for p in doc["year_question"]), re.I),
        month=re.compile(doc["month"], re.I),
        century=re.compile(doc["century"], re.I),
        names_the_document=re.compile("|".join(f"(?:{p})" for p in doc["names_the_document"]), re.I),
    )


def is_one_year(answer: str, pats: RulePatterns) -> bool:
    """Whether ``answer`` holds exactly one year: one group of digits, no month, no century."""
    if pats.month.search(answer) or pats.century.search(answer):
        return False
    return len(_DIGIT_GROUP.findall(answer)) == 1


def rule_verdict(question: str, answer: str, lang: str) -> str:
    """``kept`` or the first rule the question breaks (``REASONS`` order)."""
    pats = patterns(lang)
    if pats.year_question.search(question) and not is_one_year(answer, pats):
        return YEAR_ANSWER_NOT_ONE_YEAR
    if pats.names_the_document.search(question):
        return NAMES_THE_DOCUMENT
    return KEPT
