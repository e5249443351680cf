"""The compiled abstracts rules (``_abstracts_native.c``) give the Python reference's answers.

``split_sentences``, ``abstract_links`` and ``_locate_links`` are compared with ``_split_sentences_py``,
``_abstract_links_py`` and ``_locate_links_py`` on every abstract and link of the real data the
repository ships (French structured-Wikipedia records, the English XML dump sample, English plain
texts), on the splitter's own test cases, on every Unicode code point in the contexts the rules look
at, and on seeded random text and link lists built from what the rules react to. Results must be
equal (same list of str, same link tuples), and so must the Counter of link reasons (values and key
order) and any exception. Skipped where the extension is not built, except under
``RAGSFT_REQUIRE_NATIVE=1`` (CI), where loading it fails.
"""

from __future__ import annotations

import functools
import os
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from ragsft_assets.corpus import abstracts as A
from ragsft_assets.corpus import native
from ragsft_assets.corpus import sentences as S
from ragsft_assets_tests import test_corpus_fast_paths, test_corpus_sentences
from ragsft_assets_tests.native_checks import assert_no_leaks, structured_records

C = native.load("abstracts")
pytestmark = pytest.mark.skipif(
    C is None, reason="the compiled abstracts rules are not built (no C compiler?)"
)

PACKAGE = Path(__file__).resolve().parents[1] / "ragsft_assets"
DATA = Path(__file__).resolve().parent / "data"
LANGS = ("fr", "en", "xx")  # "xx": an unknown language, which gets both languages' lists


@pytest.fixture(autouse=True)
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public functions dispatch to the extension (whatever the modules found at import)."""
    monkeypatch.setattr(S, "_NATIVE", C)
    monkeypatch.setattr(A, "_NATIVE", C)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What a call gives: its value, or its exception's type and message."""
    try:
        return "value", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return "raised", (type(exc), str(exc))


# ---- data ---------------------------------------------------------------------------------------


@functools.cache
def real_texts() -> tuple[str, ...]:
    """Abstracts and paragraphs of the records, plus English plain texts (whole articles, summaries)."""
    texts: list[str] = []

    def paragraphs(parts: Any) -> None:
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                if isinstance(part.get("value"), str):
                    texts.append(part["value"])
                paragraphs(part.get("has_parts"))

    for record in structured_records():
        if isinstance(record.get("abstract"), str):
            texts.append(record["abstract"])
        for section in record.get("sections") or []:
            if isinstance(section, dict):
                paragraphs(section.get("has_parts"))
    for line in (DATA / "wikispeedia" / "plaintext_chemistry_191.jsonl").read_bytes().splitlines():
        texts.append(orjson.loads(line)["text"])
    for line in (DATA / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl").read_bytes().splitlines():
        texts.append(orjson.loads(line)["passage"])
    return tuple(texts)


def assert_same_split(text: Any, lang: str = "fr") -> list[str] | None:
    got = outcome(S.split_sentences, text, lang)
    assert got == outcome(S._split_sentences_py, text, lang), (text, lang)
    if got[0] == "value":
        assert all(type(s) is str for s in got[1])
        return got[1]
    return None


# ---- split_sentences ----------------------------------------------------------------------------


def test_split_on_real_text() -> None:
    texts = real_texts()
    assert len(texts) > 1000
    found = 0
    for text in texts:
        for lang in LANGS:
            found += len(assert_same_split(text, lang) or [])
    assert found > 10_000


def test_split_on_the_splitter_test_cases() -> None:
    (parametrize,) = test_corpus_sentences.test_split_sentences.pytestmark
    cases = [(text, lang) for text, lang, _expected in parametrize.args[1]]
    cases += [(case["text"], case["lang"]) for case in test_corpus_sentences._CASES]
    cases += [(f"Il vit {word}. Il part.", "fr") for word in test_corpus_fast_paths.WORDS]
    cases += [(text, "fr") for text in test_corpus_fast_paths.DISAMBIGUATION_TEXTS]
    assert len(cases) > 40
    for text, lang in cases:
        for other in (lang, *LANGS):
            assert_same_split(text, other)
    for text, lang, expected in parametrize.args[1]:
        assert S.split_sentences(text, lang) == expected


# What the rules react to: terminal punctuation, closers, openers, every kind of space and line break,
# cased letters (with İ, whose lowercase has two characters, and ı ſ K), digits, abbreviations of both
# lists (cased both ways), dotted initials, apostrophes, astral characters.
FUZZ_PIECES = [
    *".!?…»”’'\"([«“)]",
    " ", " ", " ", "  ", "\u00a0", "\u202f", "\n", "\r", "\r\n", "\t", "\x0b", "\x0c", "\x1c", "\x1f",
    "\x85", "\u2028", "\u2029", "\u3000", "\x00", "\xad",
    *"AaZzÉéÀàŒœÞßİıſKΣσς0159²_-",
    "Il", "Elle", "Le", "La", "Les", "The", "It", "M", "Mme", "MM", "Mgr", "av", "apr", "J.-C", "J.",
    "etc", "ETC", "Etc", "art", "ART", "col", "Col", "vol", "cap", "Dr", "Mr", "St", "n°", "N°", "p",
    "env", "d'env", "l'art", "U.S", "R.F.A", "É.-U", "x.-y", "ab.cd", "l'", "d’", "(M", "MÉRIMÉE",
    "İl", "ÉD", "FÉV", "Éd", "DÉC", "\U0001f600", "\U00010400", "\ud800", "中", "word", "Paris", "1953",
]  # fmt: skip


def fuzz_texts(seed: int, count: int, pieces: list[str] = FUZZ_PIECES) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(pieces, k=rng.randint(0, 30))) for _ in range(count)]


def test_split_on_fuzzed_text() -> None:
    boundaries = 0
    for i, text in enumerate(fuzz_texts(20_251_205, 24_000)):
        boundaries += len(assert_same_split(text, LANGS[i % 3]) or [])
    assert boundaries > 20_000
    # Sentence-like text: words and spaces around each punctuation, so more boundaries pass the checks.
    words = [" ", " ", " ", ". ", "? ", " « ", " » ", ".\n", "Il", "M.", "etc.", "art.", "J.-C.", "Le"]
    words += ["part", "Ici", "5", "av.", "l'art.", "Dr.", "U.S.", "Col.", "É.", "\u00a0»", "İ", "ß", "(Le"]
    words += ["Il5", "Le²", "Le_", "(«Il"]  # where the opener word ends: [^\W\d_]+
    for i, text in enumerate(fuzz_texts(7, 12_000, words)):
        assert_same_split(text, LANGS[i % 3])


def test_split_over_code_points() -> None:
    """Each code point where the rules look: around a period, as a space, word, opener, line break.

    All of the first 0x3000 (Latin-1, whose classes the C reads from a table, and every space and line
    break but U+3000) and every 61st above, U+3000 included."""
    template = (
        "Un{c}. {c}Deux. M{c}. Trois{c}!{c}Quatre. {c}etc. {c}art. {c}Il. Av{c}. x{c}y. J.{c}-C. "
        "l'ART. {c}E. A{c}B. {c}La. l'art. Il{c}x. Fin{c}"
    )
    points = [*range(0x3000), *range(0x3000, 0x110000, 61)]  # lone surrogates included: str holds them
    assert {0x85, 0xA0, 0x2028, 0x2029, 0x202F, 0x3000} <= set(points) and points[-1] > 0x10FF00
    for start in range(0, len(points), 512):  # many code points per text: boundaries between them too
        assert_same_split(" ".join(template.format(c=chr(c)) for c in points[start : start + 512]), "fr")
    for c in points[:0x3000]:  # one per text: each decides alone
        assert_same_split(template.format(c=chr(c)), "en")


def test_split_of_unusual_arguments() -> None:
    """Not an exact str: the Python function runs (same value, or same exception)."""

    class Text(str):
        def splitlines(self) -> list[str]:  # type: ignore[override]
            return ["Une. Deux.", "Trois. Quatre."]

    for value in (None, 12, b"Une. Deux.", ["Une. Deux."], Text("Un. Deux."), Text("")):
        assert_same_split(value)
    assert S.split_sentences(Text("x")) == ["Une.", "Deux.", "Trois.", "Quatre."]
    rules = S.RULES["fr"]
    assert C.split_sentences(Text("x"), rules.all, set(), set(), set()) is None
    assert C.split_sentences("x", ["M"], set(), set(), set()) is None  # not a set: Python's `in` decides
    with pytest.raises(TypeError):
        C.split_sentences("x")
    # Mutable sets work too (no length bound is cached for them).
    assert C.split_sentences("M. Dupont. Il part.", {"M"}, set(), set(), set()) == ["M. Dupont.", "Il part."]


def test_line_breaks_are_whitespace_and_not_printable() -> None:
    """The C finds line breaks only past the first non-printable character: every one is such."""
    breaks = [c for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) == 2]
    assert breaks == [0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029]
    assert all(chr(c).isspace() and not chr(c).isprintable() for c in breaks)


# ---- abstract_links and _locate_links -----------------------------------------------------------


def locate_both(
    raw: Any, sentences: Any, text: Any, title: Any, host: Any, counts: Any, cold: bool = False
) -> tuple[str, Any]:
    """Both _locate_links give the same outcome and leave the same counts (values and key order)."""
    if cold:
        A._LINK_CACHE.clear()
    before = counts.copy() if isinstance(counts, dict) else counts
    got_counts = before.copy() if isinstance(before, dict) else before
    got = outcome(A._locate_links, raw, sentences, text, title, host, got_counts)
    if cold:
        A._LINK_CACHE.clear()
    want_counts = before.copy() if isinstance(before, dict) else before
    want = outcome(A._locate_links_py, raw, sentences, text, title, host, want_counts)
    assert got == want, (raw, title)
    assert type(got_counts) is type(want_counts)
    if isinstance(want_counts, dict):
        assert list(got_counts.items()) == list(want_counts.items()), (raw, title)
    if got[0] == "value":
        assert all(type(t) is tuple and len(t) == 4 and type(t[2]) is str for t in got[1])
    return got


def test_links_of_real_records() -> None:
    records = structured_records()
    assert len(records) > 200
    kept = 0
    counts: Counter[str] = Counter()
    for i, record in enumerate(records):
        links = outcome(A.abstract_links, record)
        assert links == outcome(A._abstract_links_py, record)
        assert links[0] == "value"
        # The same dict objects, not copies.
        assert all(a is b for a, b in zip(links[1], A._abstract_links_py(record), strict=True))
        abstract = record.get("abstract")
        if not isinstance(abstract, str):
            continue
        sentences = S._split_sentences_py(abstract, "fr")
        text = " ".join(sentences)
        title = str(record.get("name") or "").strip()
        host = A.wiki_host(record.get("url") if isinstance(record.get("url"), str) else None)
        locate_both(links[1], sentences, text, title, host, Counter(), cold=i % 2 == 0)
        locate_both(links[1], sentences, text, title, host, counts)  # a Counter that already holds keys
        kept += len(A._locate_links(links[1], sentences, text, title, host, counts))
    assert kept > 500 and counts[A.LINK_KEPT] > 1000 and len(counts) >= 5


class Link(dict):
    """A dict subclass whose .get the Python code calls (the C leaves it to Python)."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "Paris" if key == "text" else super().get(key, default)


TITLES = ["Paris", "Rome", "Le Chat noir", "Mali", "Saint-Aven", "Île de Ré", "İzmir", "ß", "\U0001f600"]
URLS: list[Any] = [
    *(f"https://fr.wikipedia.org/wiki/{t.replace(' ', '_')}" for t in TITLES),
    "https://fr.wikipedia.org/wiki/Paris#Histoire",
    "https://fr.wikipedia.org/wiki/%C3%8Ele_de_R%C3%A9",
    "https://fr.wikipedia.org/wiki/mali",
    "./Rome",
    "/wiki/Le_Chat_noir",
    "https://fr.wikipedia.org/w/index.php?title=Zorglub&action=edit&redlink=1",
    "https://en.wikipedia.org/wiki/Paris",
    "https://www.example.org/",
    "mailto:x@example.org",
    "https://fr.wikipedia.org/wiki/Fichier:Paris.jpg",
    "/wiki/Catégorie:Ville",
    "https://fr.wikipedia.org/wiki/",
    "",
    " ",
    None,
    5,
    ["https://fr.wikipedia.org/wiki/Paris"],
]
ANCHORS: list[Any] = [
    "Paris", "Rome", "Le Chat noir", "Le  Chat\nnoir", " Paris ", "\u00a0Mali\u202f", "Mali", "ville",
    "absent", "Atlantide", "", " ", "\n\t", "İzmir", "ß", "\U0001f600", "e", "Il", None, 3, ["Paris"],
]  # fmt: skip
SENTENCE_WORDS = [
    "Paris",
    "Rome",
    "Le Chat noir",
    "Mali",
    "ville",
    "est",
    "une",
    "İzmir",
    "ß",
    "\U0001f600",
    "Il",
]


def random_case(rng: random.Random) -> tuple[Any, ...]:
    sentences = [
        " ".join(rng.choices(SENTENCE_WORDS, k=rng.randint(1, 6))) + "." for _ in range(rng.randint(0, 6))
    ]
    text = " ".join(sentences)
    raw: list[Any] = []
    for _ in range(rng.randint(0, 12)):
        link: dict[str, Any] = {}
        if rng.random() < 0.9:
            link["url"] = rng.choice(URLS)
        if rng.random() < 0.9:
            link["text"] = rng.choice(ANCHORS)
        raw.append(link)
    if raw and rng.random() < 0.3:
        raw.append(raw[rng.randrange(len(raw))])  # the same link twice
    odd = rng.random()
    if odd < 0.02:
        raw.append(rng.choice(["Paris", None, ["url"], Link(url=URLS[0])]))  # not a plain dict
    title = rng.choice(TITLES)
    host: Any = "fr.wikipedia.org"
    counts: Any = Counter({A.LINK_KEPT: 2, A.LINK_SELF: 1}) if rng.random() < 0.3 else Counter()
    if 0.02 <= odd < 0.03:
        sentences = tuple(sentences)  # Sequence, not a list
    elif 0.03 <= odd < 0.04:
        sentences = [*sentences, 5]
    elif 0.04 <= odd < 0.05:
        title = None
    elif 0.05 <= odd < 0.06:
        host = rng.choice(["", "en.wikipedia.org", None])
    elif 0.06 <= odd < 0.07:
        counts = {}  # not a Counter: a missing reason raises KeyError in the Python loop
    elif 0.07 <= odd < 0.08:
        text = rng.choice(["", "Paris", text + " Rome Rome"])
    return raw, sentences, text, title, host, counts


def test_locate_links_on_fuzzed_links() -> None:
    rng = random.Random(20_251_205)
    kept = raised = 0
    for i in range(6000):
        kind, value = locate_both(*random_case(rng), cold=i % 3 == 0)
        kept += len(value) if kind == "value" else 0
        raised += kind == "raised"
    assert kept > 3000 and raised > 50  # links kept, and error paths (non-dict links...) taken


def test_locate_links_when_the_url_resolution_raises() -> None:
    """urlsplit rejects a bad IPv6 host: both raise at that link, having counted the ones before."""
    raw = [
        {"url": "https://fr.wikipedia.org/wiki/Paris", "text": "Paris"},
        {"url": "https://en.wikipedia.org/wiki/Rome", "text": "Rome"},
        {"url": "http://[::1/wiki/Rome", "text": "Rome"},
        {"url": "https://fr.wikipedia.org/wiki/Rome", "text": "Rome"},
    ]
    sentences = ["Paris est une ville.", "Rome aussi."]
    for cold in (True, False):
        locate_both(raw, sentences, " ".join(sentences), "Mali", "fr.wikipedia.org", Counter(), cold=cold)
    counts: Counter[str] = Counter()
    with pytest.raises(ValueError):
        A._locate_links(raw, sentences, " ".join(sentences), "Mali", "fr.wikipedia.org", counts)
    assert counts == Counter({A.LINK_KEPT: 1, A.LINK_EXTERNAL: 1})


def test_locate_links_returns_none_for_what_it_leaves_to_python() -> None:
    args = (A._LINK_CACHE, A._host_cache, A._resolve_miss, A._NOT_A_URL, A._NATIVE_LINK_REASONS)
    args += (A._CACHE_MAX, A.NON_ARTICLE_NAMESPACES)
    link = {"url": "https://fr.wikipedia.org/wiki/Paris", "text": "Paris"}
    good = ([link], ["Paris."], "Paris.", "Mali", "fr.wikipedia.org")
    assert C.locate_links(*good, Counter(), *args) == [("Paris", A.doc_id("Paris"), "Paris", 0)]
    counts: Counter[str] = Counter()
    for raw, sentences in [([Link(link)], ["Paris."]), ([link, "x"], ["Paris."]), ([link], ("Paris.",))]:
        assert C.locate_links(raw, sentences, *good[2:], counts, *args) is None
    assert C.locate_links(*good, {}, *args) is None
    assert not counts  # nothing counted by a call that falls back


def random_tree(rng: random.Random, depth: int = 0) -> Any:
    """A random section tree: parts, lists, links, with the odd non-dict, non-list or subclass."""
    roll = rng.random()
    if roll < 0.05:
        return rng.choice([None, "x", 3, {"k": 1}, (), ["x"], Link(url="u")])
    parts = []
    for _ in range(rng.randint(0, 3)):
        part: Any = {"type": "paragraph"}
        if rng.random() < 0.7:
            part["links"] = [
                rng.choice([{"url": rng.choice(URLS[:3]), "text": "a"}, {"url": "u"}, "link", None, Link()])
                for _ in range(rng.randint(0, 3))
            ]
        elif rng.random() < 0.3:
            part["links"] = rng.choice([None, "x", {"url": "u"}, ()])
        if depth < 3 and rng.random() < 0.4:
            part["has_parts"] = random_tree(rng, depth + 1)
        parts.append(part if rng.random() < 0.9 else rng.choice(["p", None, 4, Link(links=[{"url": "u"}])]))
    return parts


def test_abstract_links_on_fuzzed_records() -> None:
    rng = random.Random(5)
    names: list[Any] = ["Abstract", "Abstract", "Histoire", None, 1, 1.5, ["Abstract"], ("Abstract",)]
    for _ in range(4000):
        sections: Any = []
        for _ in range(rng.randint(0, 3)):
            section: Any = {"type": "section", "has_parts": random_tree(rng)}
            if rng.random() < 0.8:
                section["name"] = rng.choice(names)
            if rng.random() < 0.05:
                section = rng.choice([None, "s", [section], Link(section)])
            sections.append(section)
        if rng.random() < 0.05:
            sections = rng.choice([None, "x", {}, (), 3])
        record: Any = {"name": "X", "sections": sections}
        if rng.random() < 0.02:
            record = rng.choice([{}, Link(record)])
        got, want = outcome(A.abstract_links, record), outcome(A._abstract_links_py, record)
        assert got == want, record
        if got[0] == "value":
            assert all(a is b for a, b in zip(got[1], want[1], strict=True))


def test_abstract_links_of_deep_trees() -> None:
    """Deeper than the C follows: Python decides (its recursion limit included)."""
    for depth in (10, 70, 2000):
        tree: list[Any] = [{"links": [{"url": "u", "text": "deep"}]}]
        for _ in range(depth):
            tree = [{"has_parts": tree, "links": [{"url": "v"}]}]
        record = {"sections": [{"name": "Abstract", "has_parts": tree}]}
        got, want = outcome(A.abstract_links, record), outcome(A._abstract_links_py, record)
        assert got[0] == want[0]
        if got[0] == "value":
            assert got == want and len(got[1]) == depth + 1
        else:
            assert got[1][0] is want[1][0] is RecursionError


# ---- memory ---------------------------------------------------------------------------------------


def test_no_memory_grows_over_repeated_calls() -> None:
    """Every path (results, fallbacks, errors) frees what it allocates: no growth over many calls."""
    rng = random.Random(3)
    cases = [random_case(rng) for _ in range(300)]
    texts = fuzz_texts(9, 300) + list(real_texts()[:100])
    records = list(structured_records()[:50])

    def run() -> None:
        for text in texts:
            outcome(S.split_sentences, text, "fr")
            outcome(S.split_sentences, text, "xx")
        for raw, sentences, text, title, host, counts in cases:
            c = counts.copy() if isinstance(counts, dict) else counts
            outcome(A._locate_links, raw, sentences, text, title, host, c)
        for record in records:
            A.abstract_links(record)

    run()  # caches (interned names, link resolutions) fill on the first pass
    # References the C borrows or takes: every one given back (a leaked reference to a shared object
    # such as a cached resolution allocates nothing that tracemalloc would see).
    rules = S.RULES["fr"]
    watched = [A._NOT_A_URL, rules.all, rules.sentence_openers, *texts, *records]
    watched += [link for case in cases for link in case[0]] + [case[1] for case in cases]
    watched += [hit for cache in A._LINK_CACHE.values() for hit in cache.values()]
    assert_no_leaks(run, watched)


@pytest.mark.skipif(
    os.environ.get("RAGSFT_REQUIRE_NATIVE") != "1" or os.environ.get("RAGSFT_NATIVE") == "0",
    reason="only where the build is required (CI)",
)
def test_ci_loads_the_compiled_abstracts_rules() -> None:
    module = native.load("abstracts")
    assert module is not None and native.source_sha256("abstracts") == module.SOURCE_SHA256
