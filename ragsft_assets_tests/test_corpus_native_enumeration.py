"""The compiled enumeration rule (``_enumeration_native.c``) gives the Python rule's answers.

Compared on every word and link anchor of real French and English sentences, and on seeded random
sentences built from the rule's own vocabulary (separators, triggers, determiners, barriers, the
characters that ``re.IGNORECASE`` folds onto ASCII, line breaks and odd spaces). Skipped where the
extension is not built, except under ``RAGSFT_REQUIRE_NATIVE=1`` (CI), where loading it fails.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ragsft_assets.corpus import enumeration as E
from ragsft_assets.corpus import native
from ragsft_assets.corpus.sentences import split_sentences
from ragsft_assets_tests.native_checks import structured_records

C = native.load("enumeration")
pytestmark = pytest.mark.skipif(
    C is None, reason="the compiled enumeration rule is not built (no C compiler?)"
)

PACKAGE = Path(__file__).resolve().parents[1] / "ragsft_assets"
DATA = Path(__file__).resolve().parent / "data"


def _paragraphs(parts: list) -> Iterator[dict]:
    for part in parts:
        if isinstance(part, dict):
            if part.get("type") == "paragraph" and part.get("value"):
                yield part
            yield from _paragraphs(part.get("has_parts") or [])


def real_pairs() -> list[tuple[str, str]]:
    """(sentence, alias) of real text: every link anchor of its sentence, every word and word pair."""
    pairs: list[tuple[str, str]] = []

    def add(sentence: str, anchors: list[str]) -> None:
        words = sentence.split()
        aliases = set(anchors) | set(words) | {f"{a} {b}" for a, b in zip(words, words[1:], strict=False)}
        pairs.extend((sentence, a) for a in sorted(aliases) if a in sentence)

    for record in structured_records():
        for para in _paragraphs(record.get("sections") or []):
            anchors = [ln["text"] for ln in para.get("links") or [] if isinstance(ln.get("text"), str)]
            for sentence in split_sentences(para["value"], "fr"):
                add(sentence, [a for a in anchors if a in sentence])
    hotpot = json.loads((DATA / "hotpotqa" / "hotpotqa_train_distractor_70.json").read_text("utf-8"))
    for example in hotpot:
        for title, sentences in example["context"]:
            for sentence in sentences:
                add(sentence.strip(), [title])
    return pairs


VOCABULARY = [
    "Paris", "Rome", "Venise", "et", "ET", "Et", "ou", "and", "or", "OR", "ainsi que", "ainsi  que",
    "as well as", "tels que", "telles que", "tel que", "comme", "notamment", "dont", "parmi lesquels",
    "parmi lesquelles", "en particulier", "such as", "including", "like", "among them", "among which",
    "namely", "le", "la", "les", "l'", "l’", "un", "une", "des", "du", "de", "d'", "d’", "à", "À", "au",
    "aux", "en", "the", "a", "an", "of", "in", "at", "que", "as", "etc", "ethe", ",", ", ", " ,", ":",
    ";", "(", ")", "[", "]", ".", "!", "?", "…", "»", "«", "”", "’", "'", '"', " ", "  ", "\u00a0",
    "\n", "\t", "\u2028", "\x1c", "İ", "ı", "ſ", "K", "lıke", "ſuch", "LIKE", "İncluding", "x", "Abc",
    "12", "_", "é", "🙂", "X-Y", "Saint-Jean",
]  # fmt: skip


def fuzz_cases(n: int, seed: int) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed)
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 40)):
            parts.append(rng.choice(VOCABULARY))
            if rng.random() < 0.6:
                parts.append(" ")
        sentence = "".join(parts)
        words = sentence.replace(",", " ").split() or ["x"]
        if rng.random() < 0.3 and len(words) > 1:
            j = rng.randrange(len(words) - 1)
            alias = f"{words[j]} {words[j + 1]}"
        else:
            alias = rng.choice(words) if rng.random() < 0.7 else rng.choice(VOCABULARY)
        yield sentence, alias


def test_real_sentences_give_the_python_answers() -> None:
    pairs = real_pairs()
    assert len(pairs) > 20_000  # both languages, thousands of sentences
    expected = E.python_enumeration_flags(pairs)
    assert C.enumeration_flags(pairs) == expected
    assert sum(expected) > 100  # real enumerations among them, not only the easy False
    for sentence, alias in pairs[::7]:
        assert C.alias_only_in_enumeration(sentence, alias) is E.alias_only_in_enumeration(sentence, alias)


def test_random_sentences_give_the_python_answers() -> None:
    cases = list(fuzz_cases(30_000, seed=20260731))
    expected = [E.alias_only_in_enumeration(s, a) for s, a in cases]
    assert C.enumeration_flags(cases) == expected
    assert 0.03 < sum(expected) / len(cases) < 0.5  # the rule is exercised both ways
    occurrences = hints = 0
    for sentence, _ in cases[:8000]:
        assert C.has_hint(sentence) is E._has_hint(sentence)
        hints += E._has_hint(sentence)
        for start in range(0, len(sentence), 3):
            for width in (0, 2, 5, 11):
                end = min(len(sentence), start + width)
                want = E.occurrence_in_enumeration(sentence, start, end)
                assert C.occurrence_in_enumeration(sentence, start, end) is want, (sentence, start, end)
                occurrences += want
    assert hints > 1000 and occurrences > 1000


@pytest.mark.parametrize(
    ("sentence", "alias"),
    [
        ("Il peint des villes telles que Paris, Rome et Venise.", "Rome"),
        ("Des villes comme\nLyon et Nantes.", "Lyon"),  # a line break before the alias ($ before "\n")
        ("Il cite notamment\n", "x"),
        ("Parmi lesquelles : Lyon, Nantes et Brest.", "Lyon"),
        ("Des peintres tels que Monet (le maître), Renoir et Degas.", "Renoir"),
        ("ſuch aſ Lyon, Nantes, Brest.", "Lyon"),  # long s folds onto s under re.IGNORECASE
        ("Among them Lyon, Nantes, Brest.", "Nantes"),
        ("Lıke Lyon and Nantes.", "Lyon"),  # dotless i folds onto i
        ("Villes : Lyon", "Lyon"),
        ("", "Lyon"),
        ("Lyon, Lyon et Lyon", "Lyon"),
    ],
)
def test_edge_cases(sentence: str, alias: str) -> None:
    assert C.alias_only_in_enumeration(sentence, alias) is E.alias_only_in_enumeration(sentence, alias)
    assert C.enumeration_flags([(sentence, alias)]) == E.python_enumeration_flags([(sentence, alias)])


def test_enumeration_flags_uses_the_compiled_rule_and_falls_back_on_other_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pairs = [("Des villes comme Lyon, Nantes et Brest.", "Nantes"), ("Des villes comme Lyon.", None)]
    assert E.enumeration_flags(pairs) == [True, False]  # None: the Python rule's answer, no TypeError
    calls = []
    monkeypatch.setattr(
        E, "NATIVE", type("Spy", (), {"enumeration_flags": lambda self, p: calls.append(p) or []})()
    )
    E.enumeration_flags(pairs[:1])
    assert calls == [pairs[:1]]


def test_occurrence_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        C.occurrence_in_enumeration("abc", 2, 9)
    with pytest.raises(TypeError):
        C.enumeration_flags([("abc", 3)])


def _arrays(pairs: list[tuple[str, str]]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Sentences (each once), the index of each pair's sentence, and the aliases, as Arrow arrays."""
    sentences = sorted({s for s, _ in pairs})
    position = {s: i for i, s in enumerate(sentences)}
    return (
        pa.array(sentences, pa.string()),
        pa.array([position[s] for s, _ in pairs], pa.int32()),
        pa.array([a for _, a in pairs], pa.string()),
    )


def test_flags_of_arrays_read_the_buffers_and_give_the_python_answers() -> None:
    pairs = real_pairs()[::3] + list(fuzz_cases(5000, seed=3))
    expected = E.python_enumeration_flags(pairs)
    sentences, index, aliases = _arrays(pairs)
    assert E.flags_of_arrays(sentences, index, aliases).tolist() == expected
    # Slices (an array offset into the buffers) and a wider index type.
    k = len(pairs) // 3
    sliced = pa.concat_arrays([pa.array(["x"] * 7, pa.string()), sentences]).slice(7)
    assert E.flags_of_arrays(sliced, index.cast(pa.int64()), aliases).tolist() == expected
    assert E.flags_of_arrays(sentences, index.slice(k), aliases.slice(k)).tolist() == expected[k:]


def test_flags_of_arrays_falls_back_to_python_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = [("Des villes comme Lyon, Nantes et Brest.", "Nantes"), ("Il peint Paris et Rome.", "Rome")]
    sentences, index, aliases = _arrays(pairs)
    with_null = pa.array(["Nantes", None], pa.string())
    assert E.flags_of_arrays(sentences, index, with_null).tolist() == [True, False]  # nulls: the pairs
    assert E.flags_of_arrays(sentences.cast(pa.large_string()), index, aliases).tolist() == [True, False]
    monkeypatch.setattr(E, "NATIVE", None)  # no compiled rule: the Python one, same answers
    assert E.flags_of_arrays(sentences, index, aliases).tolist() == [True, False]


def test_flags_of_arrays_refuses_bad_buffers() -> None:
    sentences, index, aliases = _arrays([("Des villes comme Lyon, Nantes et Brest.", "Nantes")])
    out = bytearray(1)
    buffers = (sentences.buffers()[1], sentences.buffers()[2], 0, 1)
    with pytest.raises(ValueError, match="out of bounds"):
        C.enumeration_flags_utf8(
            buffers, np.array([5], np.int32), (aliases.buffers()[1], aliases.buffers()[2], 0, 1), out
        )
    bad = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(np.array([0, 2], np.int32)), pa.py_buffer(b"\xc3(")]
    )
    with pytest.raises(ValueError, match="not UTF-8"):
        C.enumeration_flags_utf8(
            (bad.buffers()[1], bad.buffers()[2], 0, 1),
            np.array([0], np.int32),
            (aliases.buffers()[1], aliases.buffers()[2], 0, 1),
            out,
        )
    with pytest.raises(ValueError, match="lengths"):
        C.enumeration_flags_utf8(
            buffers, np.array([0], np.int32), (aliases.buffers()[1], aliases.buffers()[2], 0, 1), bytearray(2)
        )


def test_the_link_graph_is_the_same_with_the_compiled_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the sample snapshot: same edges, funnel and dropped edges with the C rule (no prefilter, the
    array path) as with the Python rule behind the C++ prefilter."""
    from ragsft_assets.corpus import link_graph as G
    from ragsft_assets.corpus.abstracts import AbstractsConfig
    from ragsft_assets.corpus.build import build_abstracts

    dumps = sorted((PACKAGE / "sample_snapshot" / "sample.fr").glob("*.jsonl"))
    table = build_abstracts(dumps, AbstractsConfig(min_chars=50, min_sentences=1)).table
    compiled = G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=5, bridge_top_k=20))
    monkeypatch.setattr(E, "NATIVE", None)
    python = G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=5, bridge_top_k=20))
    assert compiled.table.equals(python.table)
    assert (compiled.funnel, compiled.dropped, compiled.bridge_ids) == (
        python.funnel,
        python.dropped,
        python.bridge_ids,
    )
    assert compiled.funnel[G.ENUMERATION] > 0 and compiled.funnel[G.IN_DEGREE_CAP] > 0
