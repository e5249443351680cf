"""The corpus stage's fast paths give what the plain rules give (issue 10's speed-ups)."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from ragsft_assets.corpus import abstracts, enumeration, sentences
from ragsft_assets.corpus.sentences import split_sentences


def _is_abbreviation_reference(text: str, end: int, abbreviations: frozenset[str]) -> bool:
    """The abbreviation check before its fast paths (every word through the same steps)."""
    word = text[text.rfind(" ", 0, end) + 1 : end]
    for sep in "'’(":
        if sep in word:
            word = word.rsplit(sep, 1)[1]
    if not word:
        return False
    if len(word) == 1 and word.isalpha():
        return True
    if word in abbreviations or word.lower() in abbreviations:
        return True
    parts = [p for p in re.split(r"[.\-]", word) if p]
    return len(parts) > 1 and all(len(p) <= 2 and p.isalpha() for p in parts)


WORDS = [
    "1953", "l'Orbelle", "d'env", "env", "Saint-Aven-sur-Mer", "J.-C", "U.S", "R.F.A", "av. J.-C",
    "Mérimée)", "(M", "km²", "XIXe", "l'art", "A", "d'A", "n°", "3-4", "a-b", "ab.cd", "abc.d", "",
    "(", "l'", "Mgr", "etc", "Vol", "x.-y", "1er", "É.-U",
]  # fmt: skip


def test_abbreviation_check_matches_the_reference() -> None:
    for rules in (*sentences.RULES.values(), sentences._ANY_RULES):
        for word in WORDS:
            text = f"Il vit {word}. Il part."
            end = text.index(". Il part")
            assert sentences._is_abbreviation(text, end, rules.all) == _is_abbreviation_reference(
                text, end, rules.all
            ), word


def test_a_number_or_a_cut_word_before_a_period_ends_the_sentence() -> None:
    text = "Il naît en 1953. Il meurt à l'Orbelle. Elle passe d'env. 5 km au nord de Saint-Aven-sur-Mer. Fin."
    assert split_sentences(text, "fr") == [
        "Il naît en 1953.",
        "Il meurt à l'Orbelle.",
        "Elle passe d'env. 5 km au nord de Saint-Aven-sur-Mer.",
        "Fin.",
    ]


DISAMBIGUATION_TEXTS = [
    "Paris peut désigner : la capitale ; un prénom.",
    "PARIS PEUVENT FAIRE RÉFÉRENCE À : x",
    "Mercury may refer to: a planet.",
    "MERCURY MAY ALSO REFER TO : an element.",
    "Mercury may refer to the following things, among them one: x",
    "Marchal est un nom de famille notamment PORTÉ PAR : Jean.",
    "Voir : cette page d'homonymie.",
    "Thiſ diſambiguation page lists: x",  # ſ folds onto s under re.I: only the regex sees it
    "Mercury MAY REFER TO: x, with a Kelvin sign \u212a.",
    "Une ville : elle est peuplée de 3 000 habitants.",
    "Une ville : rien à voir.",
    "Une ville sans deux-points, cette page d'homonymie.",
    "",
]


def test_disambiguation_check_matches_the_regex() -> None:
    for text in DISAMBIGUATION_TEXTS:
        bare = abstracts._DISAMBIGUATION_TEXT.search(text) is not None
        if ":" not in text and "homonymie" not in text and "isambiguation" not in text:
            bare = False  # the check's first, literal step (unchanged)
        assert abstracts.is_disambiguation_text(text) == bare, text
    assert abstracts.is_disambiguation_text("Thiſ diſambiguation page lists: x")


def test_separator_lookahead_finds_the_same_separators() -> None:
    plain = re.compile(enumeration._SEPARATOR_SRC, re.I)
    rng = random.Random(7)
    pieces = [" ", "  ", "\u00a0", "\t", ",", " , ", "et", "ou", "ET", "and", "or", "ainsi", "que", "as",
              "well", "Paris", "Rome", "é", "ſ", "K", ";", "x"]  # fmt: skip
    texts = ["Paris, Rome et Londres ainsi que Berlin", " ,et ou, AND x as  well as y", ""]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    for text in texts:
        expected = [(m.span(), m.group(0)) for m in plain.finditer(text)]
        assert [(m.span(), m.group(0)) for m in enumeration._SEPARATOR.finditer(text)] == expected, text


def test_an_abstract_shorter_than_min_chars_is_too_short_without_splitting(monkeypatch) -> None:
    calls = []
    real_split = abstracts.split_sentences

    def counting_split(text: str, lang: str = "fr") -> list[str]:
        calls.append(text)
        return real_split(text, lang)

    monkeypatch.setattr(abstracts, "split_sentences", counting_split)
    cfg = abstracts.AbstractsConfig(min_chars=41, min_sentences=2)
    record = {"name": "Valrenne", "url": "https://fr.wikipedia.org/wiki/Valrenne"}
    short = "Valrenne est une ville. Elle est petite."  # 40 characters
    assert abstracts._process_record({**record, "abstract": short}, cfg, Counter()) == abstracts.TOO_SHORT
    assert calls == []
    # Long only through its whitespace: split, then too short once normalised.
    spaced = "Valrenne   est une ville.\n\n Elle   est petite."
    assert len(spaced) >= 41
    assert abstracts._process_record({**record, "abstract": spaced}, cfg, Counter()) == abstracts.TOO_SHORT
    assert calls == [spaced]
    kept = abstracts._process_record({**record, "abstract": short + "!"}, cfg, Counter())
    assert isinstance(kept, tuple) and kept[6] == short + "!"


def test_joined_sentences_are_never_longer_than_the_text() -> None:
    rng = random.Random(11)
    pieces = [
        "Il part",
        ".",
        " ",
        "  ",
        "\n",
        "\u00a0",
        "\t",
        "J.",
        "M.",
        "etc.",
        "« Oui. »",
        "!",
        "A",
        "1953",
    ]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        assert len(" ".join(split_sentences(text, "fr"))) <= len(text), text


def test_top_linked_equals_select_bridges() -> None:
    import pyarrow as pa

    from ragsft_assets.corpus.link_graph import select_bridges, top_linked

    rng = random.Random(3)
    alphabet = ["a", "b", "Z", "é", "\u4e2d", "\U0001f600", "0"]
    ids = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(400)})
    rng.shuffle(ids)
    degrees = [rng.choice([0, 1, 1, 2, 3, 5]) for _ in ids]  # many ties, some zeros
    for k in (0, 1, 7, 50, len(ids), len(ids) + 5, -1):
        expected = select_bridges(dict(zip(ids, degrees, strict=True)), (), k)
        assert top_linked(pa.array(ids), pa.array(degrees, pa.int64()), k) == expected, k


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distinct_sources_counts_each_source_once_per_target(seed: int) -> None:
    """link_graph.distinct_sources against a set per target (repeated pairs, rows without edges)."""
    import numpy as np

    from ragsft_assets.corpus.link_graph import distinct_sources

    rng = random.Random(seed)
    n = rng.randint(1, 60)
    edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 400))]
    targets = np.array([t for t, _ in edges], np.int32)
    sources = np.array([s for _, s in edges], np.int32)
    expected = [len({s for t, s in edges if t == row}) for row in range(n)]
    assert distinct_sources(targets, sources, n).tolist() == expected
