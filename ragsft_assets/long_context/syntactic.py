"""Synthetic "syntactic" questions about a passage, answered exactly by counting.

Five question types per passage (the long-context recipe's syntactic variant), in the
Synth-Long-SFT32K card's words (``QUESTIONS``):

====================  ==========================================================  ==================
type                  question                                                    answer
====================  ==========================================================  ==================
``word_occurs``       Does the word `X` occur in the passage?                     ``yes`` / ``no``
``word_count``        How often does the word `X` occur in the passage?           a count in digits
``phrase_occurs``     Does the phrase `X` occur in the passage? (a word 4-gram)   ``yes`` / ``no``
``phrase_count``      How often does the phrase `X` occur in the passage?         a count in digits
                      (overlapping occurrences counted)
``word_position``     Where does the word `X` occur in the passage? (the third    ``beginning`` /
                      of its first occurrence)                                    ``middle`` / ``end``
====================  ==========================================================  ==================

The one tokenization rule: **words are maximal runs of characters for which ``str.isalnum()`` is
true** (Unicode letters and digits; everything else, apostrophes and hyphens included, separates
words), compared after ``str.lower()``. A phrase is 4 consecutive words; its occurrences are counted
with overlaps. The third of ``word_position`` is ``floor(3 * i / n)`` for the first occurrence's
word index ``i`` among the passage's ``n`` words.

A question counts over its passage. ``ragsft syntactic`` asks about one passage; the long-context
variant asks the same words of a context of several documents, which is its passage: words are
counted over all of them and the third is taken over their words in the order shown, but a phrase is
a 4-gram *within* one document: no 4-gram spans two documents.

Targets are drawn among the words (or phrases) that make up less than 10% of the passage's words
(or 4-grams), so that the question is not trivial. Absent targets (answer ``no`` / ``0``) are drawn
from the other passages' words and phrases; ``word_position`` is asked only for words that occur.
Every draw comes from (seed, stage, passage id, type): the same input gives the same questions.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from ragsft_assets.ids import DEFAULT_SEED, item_rng

STAGE = "syntactic"
TYPES: tuple[str, ...] = ("word_occurs", "word_count", "phrase_occurs", "phrase_count", "word_position")
PHRASE_LEN = 4
THIRDS: tuple[str, ...] = ("beginning", "middle", "end")

# Runs of alphanumerics: [^\W_] is \w without the underscore, i.e. exactly str.isalnum() characters.
_WORD_RE = re.compile(r"[^\W_]+")

# The Synth-Long-SFT32K card's five questions, word for word, X in backticks as the card writes it:
# "(1) Does the word `X` occur in the passage? (2) How often does the word `X` occur in the passage?
# (3) Does the phrase `X` occur in the passage? (4) How often does the phrase `X` occur in the
# passage? and (5) Where does the word `X` occur in the passage?" The long-context variant asks them
# of its whole context of documents (the passage is every document shown, in order).
QUESTIONS: dict[str, str] = {
    "word_occurs": "Does the word `{x}` occur in the passage?",
    "word_count": "How often does the word `{x}` occur in the passage?",
    "phrase_occurs": "Does the phrase `{x}` occur in the passage?",
    "phrase_count": "How often does the phrase `{x}` occur in the passage?",
    "word_position": "Where does the word `{x}` occur in the passage?",
}


@dataclass(frozen=True, slots=True)
class SyntacticQA:
    """One generated question with its exact answer; ``target`` is X, lower-cased, words joined by a space."""

    id: str
    type: str
    question: str
    answer: str
    target: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SyntacticConfig:
    """Draw settings.

    Attributes:
        max_share: a present target must make up less than this share of the words (or 4-grams).
        absent_share_occurs: chance that an occurs-question asks about an absent target ("no").
        absent_share_count: chance that a count-question asks about an absent target (0).
    """

    max_share: float = 0.10
    absent_share_occurs: float = 0.5
    absent_share_count: float = 0.2


def words(text: str) -> list[str]:
    """The passage's words under the module's tokenization rule, lower-cased, in order."""
    return [w.lower() for w in _WORD_RE.findall(text)]


def phrases(tokens: Sequence[str]) -> list[str]:
    """Every word 4-gram of ``tokens`` (overlapping), words joined by one space."""
    return [" ".join(tokens[i : i + PHRASE_LEN]) for i in range(len(tokens) - PHRASE_LEN + 1)]


@dataclass(slots=True)
class _Passage:
    id: str
    tokens: list[str]
    word_counts: Counter[str]
    phrase_counts: Counter[str]

    @classmethod
    def of(cls, pid: str, text: str | Sequence[str]) -> _Passage:
        """A passage, or documents (a sequence of texts): 4-grams never span two of them."""
        docs = [words(t) for t in ([text] if isinstance(text, str) else text)]
        tokens = [w for d in docs for w in d]
        return cls(pid, tokens, Counter(tokens), Counter(p for d in docs for p in phrases(d)))


def _rare(counts: Counter[str], max_share: float) -> list[str]:
    total = sum(counts.values())
    return sorted(x for x, c in counts.items() if c < max_share * total)


def _draw_absent(rng, pool: Sequence[str], present: Counter[str], tries: int = 64) -> str | None:
    """A pool entry (sorted list) that the passage lacks; None when none is found in ``tries`` draws."""
    if not pool:
        return None
    for _ in range(tries):
        x = pool[rng.randrange(len(pool))]
        if x not in present:
            return x
    # Dense overlap with the pool: scan from a random start so the result stays seeded.
    start = rng.randrange(len(pool))
    for k in range(len(pool)):
        x = pool[(start + k) % len(pool)]
        if x not in present:
            return x
    return None


def _one(
    p: _Passage,
    qtype: str,
    seed: int,
    config: SyntacticConfig,
    word_pool: Sequence[str],
    phrase_pool: Sequence[str],
) -> SyntacticQA | None:
    rng = item_rng(seed, STAGE, f"{p.id}\x1f{qtype}")
    is_phrase = qtype.startswith("phrase")
    counts = p.phrase_counts if is_phrase else p.word_counts
    candidates = _rare(counts, config.max_share)
    absent_share = 0.0
    if qtype.endswith("occurs"):
        absent_share = config.absent_share_occurs
    elif qtype.endswith("count"):
        absent_share = config.absent_share_count
    target: str | None = None
    if absent_share and rng.random() < absent_share:
        target = _draw_absent(rng, phrase_pool if is_phrase else word_pool, counts)
    if target is None:
        if not candidates:
            return None
        target = candidates[rng.randrange(len(candidates))]
    count = counts.get(target, 0)
    if qtype.endswith("occurs"):
        answer = "yes" if count else "no"
    elif qtype.endswith("count"):
        answer = str(count)
    else:  # word_position: only present words are candidates here
        answer = third_of(p.tokens.index(target), len(p.tokens))
    return SyntacticQA(p.id, qtype, QUESTIONS[qtype].format(x=target), answer, target)


def _pool(passages: Iterable[_Passage], attr: str, max_share: float) -> list[str]:
    pool: set[str] = set()
    for p in passages:
        pool.update(_rare(getattr(p, attr), max_share))
    return sorted(pool)


def generate(
    passages: Iterable[tuple[str, str | Sequence[str]]],
    *,
    seed: int = DEFAULT_SEED,
    config: SyntacticConfig | None = None,
    types: Sequence[str] = TYPES,
) -> tuple[list[SyntacticQA], Counter[str]]:
    """Five exact QA pairs per passage (one per type, in ``TYPES`` order), and counted skips.

    Args:
        passages: ``(id, text)`` pairs, or ``(id, [document texts])`` for a context of several
            documents (4-grams then stay within a document); ids must be unique (they seed the draws).
        seed: the run seed.
        config: draw settings (defaults: the 10% rarity bar, half the occurs-questions absent).
        types: the question types to ask.

    Returns:
        The questions, passage by passage, and a counter of skipped ``<type>:<reason>``
        (``no_rare_target``: no word or phrase under the rarity bar, e.g. a passage under 4 words).

    Raises:
        ValueError: on an unknown type or a repeated passage id.
    """
    config = config or SyntacticConfig()
    unknown = [t for t in types if t not in QUESTIONS]
    if unknown:
        raise ValueError(f"unknown syntactic question type(s) {unknown}; known: {list(TYPES)}")
    parsed: list[_Passage] = []
    seen: set[str] = set()
    for pid, text in passages:
        if pid in seen:
            raise ValueError(f"passage id {pid!r} appears twice; ids seed the draws and must be unique")
        seen.add(pid)
        parsed.append(_Passage.of(pid, text))
    word_pool = _pool(parsed, "word_counts", config.max_share)
    phrase_pool = _pool(parsed, "phrase_counts", config.max_share)
    out: list[SyntacticQA] = []
    skipped: Counter[str] = Counter()
    for p in parsed:
        for qtype in types:
            qa = _one(p, qtype, seed, config, word_pool, phrase_pool)
            if qa is None:
                skipped[f"{qtype}:no_rare_target"] += 1
            else:
                out.append(qa)
    return out, skipped


def third_of(index: int, n_words: int) -> str:
    """``beginning`` / ``middle`` / ``end`` for word ``index`` among ``n_words`` (floor(3 i / n))."""
    if not 0 <= index < n_words:
        raise ValueError(f"word index {index} outside a passage of {n_words} words")
    return THIRDS[3 * index // n_words]
