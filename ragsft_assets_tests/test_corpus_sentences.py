"""The rule-based sentence splitter (French and English)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragsft_assets.corpus.sentences import split_sentences


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        ("Une phrase. Une autre.", "fr", ["Une phrase.", "Une autre."]),
        (
            "Il meurt en 44 av. J.-C. à Rome. Son fils règne.",
            "fr",
            ["Il meurt en 44 av. J.-C. à Rome.", "Son fils règne."],
        ),
        ("M. Delcros est maire. Il règne.", "fr", ["M. Delcros est maire.", "Il règne."]),
        ("Il cite J.-S. Bach. Puis il part.", "fr", ["Il cite J.-S. Bach.", "Puis il part."]),
        (
            "Un barrage d'env. 300 m de long. Il date de 1900.",
            "fr",
            ["Un barrage d'env. 300 m de long.", "Il date de 1900."],
        ),
        ("La symphonie n° 2 est jouée. Elle plaît.", "fr", ["La symphonie n° 2 est jouée.", "Elle plaît."]),
        (
            "Écrit par J. R. R. Tolkien. Publié en 1954.",
            "fr",
            ["Écrit par J. R. R. Tolkien.", "Publié en 1954."],
        ),
        ("Quoi ? Rien ! Enfin… Voilà.", "fr", ["Quoi ?", "Rien !", "Enfin…", "Voilà."]),
        ("« Oui. » Il part.", "fr", ["« Oui. »", "Il part."]),
        ("Il vaut 3.5 euros. Fin.", "fr", ["Il vaut 3.5 euros.", "Fin."]),
        ("il est né en 1900. et il est mort.", "fr", ["il est né en 1900. et il est mort."]),
        ("Mr. Smith met Dr. Jones. They talked.", "en", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("The U.S. Army won. It was 1945.", "en", ["The U.S. Army won.", "It was 1945."]),
        ("Premier paragraphe\nSecond paragraphe", "fr", ["Premier paragraphe", "Second paragraphe"]),
        ("  Espaces   multiples.   Ici. ", "fr", ["Espaces multiples.", "Ici."]),
        ("", "fr", []),
    ],
)
def test_split_sentences(text: str, lang: str, expected: list[str]) -> None:
    assert split_sentences(text, lang) == expected


def test_joined_sentences_equal_normalised_text() -> None:
    text = "Le manoir est situé à Plaudren. Il date du XVIe s. et fut restauré. Mme Dupont y vit."
    sentences = split_sentences(text, "fr")
    assert " ".join(sentences) == " ".join(text.split())
    # "XVIe s." before a lowercase word is no boundary; "Mme" before a name neither, but the period before it is.
    assert sentences == [
        "Le manoir est situé à Plaudren.",
        "Il date du XVIe s. et fut restauré.",
        "Mme Dupont y vit.",
    ]


_CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "cases" / "sentences.jsonl").read_text("utf-8").splitlines()
    if line.strip()
]


@pytest.mark.parametrize("case", _CASES, ids=[c["case"] for c in _CASES])
def test_sentence_cases_data_file(case: dict) -> None:
    """Abbreviations that can end a sentence, both directions (cases/sentences.jsonl)."""
    assert split_sentences(case["text"], case["lang"]) == case["expected"]


def test_abbreviation_lists_are_data_files_per_language() -> None:
    from ragsft_assets.corpus import sentences as S

    for lang in ("fr", "en"):
        rules = S.RULES[lang]
        assert "etc" in rules.ends_sentence_before_capital
        assert rules.sentence_openers and rules.before_names_and_numbers
        # a word is one kind only
        assert not rules.before_names_and_numbers & rules.ends_sentence_before_opener
    assert {"art", "col", "vol", "cap"} <= S.RULES["fr"].ends_sentence_before_opener
    assert {"Il", "Elle", "Le", "La", "Les", "Ce", "Cette", "En", "Un", "Une"} <= S.RULES[
        "fr"
    ].sentence_openers


def _two_step_boundaries(block: str) -> list[tuple[int, int, int]]:
    """The boundaries as first written: every ``_BOUNDARY_ONLY`` match whose end an opener follows."""
    import re

    from ragsft_assets.corpus import sentences as S

    boundary, opener = re.compile(S._BOUNDARY_ONLY), re.compile(S._OPENER_SRC)
    return [
        (m.start(1), m.start(2), m.end()) for m in boundary.finditer(block) if opener.match(block, m.end())
    ]


def test_boundary_lookahead_finds_the_two_step_boundaries() -> None:
    """The opener as a lookahead of the boundary regex gives the same boundaries (real and fuzzed text)."""
    import random

    import orjson

    from ragsft_assets.corpus import sentences as S

    sample = Path(__file__).resolve().parents[1] / "ragsft_assets" / "sample_snapshot" / "sample.fr"
    texts = []
    for path in sorted(sample.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                texts.append(orjson.loads(line)["abstract"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # the sample's deliberately broken lines
    rng = random.Random(11)
    pieces = list(".!?…\"'»”’)] \u00a0\u202f«“([\nAaÉé0-") + ["av", "J.-C.", "Il", "M", " ", "l'"]
    texts += ["".join(rng.choices(pieces, k=rng.randint(1, 25))) for _ in range(20_000)]
    found = 0
    for text in texts:
        new = [(m.start(1), m.start(2), m.end()) for m in S._BOUNDARY.finditer(text)]
        assert new == _two_step_boundaries(text), text
        found += len(new)
    assert found > 1000


def test_single_spaced_text_skips_the_normalisation_with_the_same_sentences() -> None:
    """Text with only single spaces returns its pieces as they are: the same as normalising them."""
    import random

    from ragsft_assets.corpus import sentences as S

    rng = random.Random(17)
    pieces = ["Il", "part", ".", "!", "?", "…", " ", " ", "»", "«", '"', "M.", "J.-C.", "etc.", "art.", "5"]
    pieces += ["\u00a0", "\u202f", "\n", "\t", "  ", "é", "Le", "(", ")", "'"]
    fast = 0
    for _ in range(20_000):
        text = "".join(rng.choices(pieces, k=rng.randint(1, 20)))
        got = split_sentences(text, "fr")
        assert got == [" ".join(s.split()) for s in got if not s.isspace()], text
        assert " ".join(got) == " ".join(text.split()), text
        fast += S._single_spaced(text)
        if S._single_spaced(text):
            assert S._ODD_SPACE.search(text) is None, text  # the fast test never passes odd space
    assert fast > 1000


def test_every_whitespace_but_the_space_is_non_printable() -> None:
    """What ``_single_spaced`` relies on, over all of Unicode."""
    from ragsft_assets.corpus import sentences as S

    odd = [chr(c) for c in range(0x110000) if chr(c).isspace() and c != 0x20]
    assert len(odd) > 20
    assert not any(c.isprintable() for c in odd)
    assert all(not S._single_spaced(f"a{c}b") and S._ODD_SPACE.search(f"a{c}b") for c in odd)
    assert not S._single_spaced("a  b") and S._single_spaced("a b")
