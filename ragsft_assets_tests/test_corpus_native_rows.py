"""The compiled ``rows_to_buffers`` and link-cache miss (``_abstracts_native.c``) give the references' answers.

``rows_to_table`` (Arrow buffers written in C, arrays made with ``from_buffers``) is compared with
``_rows_to_table_py`` on the rows of every shipped structured-Wikipedia record and on seeded random rows
(None where a column may be null, empty lists, non-ASCII and astral text, integers at their type's
bounds), and on rows the C leaves to Python (same table, or same exception). The miss path of
``_locate_links`` (the usual ``https://{host}/wiki/<raw>`` URL resolved in C) is compared with
``_resolve_miss``: the same hits in the same cache (entries and order, the bounded clear included), on
the links of the real records, on seeded random URLs (percent-encodings valid and not, underscores and
odd whitespace, namespaces in every case, first letters whose uppercase has several characters), on
every percent-encoded byte sequence of up to three bytes from the ones UTF-8 decoding treats apart, and
on each code point as a title's first letter. A chunk task, with the extension, imports no pandas.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ragsft_assets.corpus import abstracts as A
from ragsft_assets.corpus import native
from ragsft_assets_tests.native_checks import assert_no_leaks, structured_records
from ragsft_assets_tests.test_corpus_native_abstracts import outcome

C = native.load("abstracts")
pytestmark = pytest.mark.skipif(
    C is None, reason="the compiled abstracts rules are not built (no C compiler?)"
)

HOST = "fr.wikipedia.org"
PREFIX = f"https://{HOST}/wiki/"
CFG = A.AbstractsConfig(min_chars=1, min_sentences=1)  # keep (almost) every record: more rows


@pytest.fixture(autouse=True)
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(A, "_NATIVE", C)


# ---- rows_to_table ------------------------------------------------------------------------------


def assert_same_table(rows: Any) -> pa.Table | None:
    """Both builders give equal, valid tables (or the same exception); the value, if any."""
    got, want = outcome(A.rows_to_table, rows), outcome(A._rows_to_table_py, rows)
    if want[0] == "raised":
        assert got == want, rows
        return None
    assert got[0] == "value", (got, rows)
    got[1].validate(full=True)
    assert got[1].schema == A.ABSTRACTS_SCHEMA
    assert got[1].equals(want[1]), rows
    # Same nulls where they are (equals compares values; this says the C wrote the bitmaps).
    for name in A.ABSTRACTS_SCHEMA.names:
        assert got[1].column(name).null_count == want[1].column(name).null_count
    return got[1]


def real_rows() -> list[tuple]:
    rows = []
    for record in structured_records():
        out = A._process_record(record, CFG, Counter())
        if not isinstance(out, str):
            rows.append(out)
    return rows


def test_rows_of_real_records() -> None:
    rows = real_rows()
    assert len(rows) > 200 and sum(len(r[8]) for r in rows) > 1000
    assert C.rows_to_buffers(rows) is not None  # the C takes them: the comparison is not Python's with itself
    table = assert_same_table(rows)
    assert table is not None and table.num_rows == len(rows)
    for start in range(0, len(rows), 37):  # chunk-sized pieces, single rows
        assert_same_table(rows[start : start + 37])
        assert_same_table(rows[start : start + 1])
    assert_same_table(tuple(rows))


STRINGS = ["", "a", "Paris", "Île de Ré", "İzmir", "ß", "中文", "\U0001f600 astral \U00010400", "x" * 300]
INT64 = [0, 1, -1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 123_456_789]
INT32 = [0, 1, 7, 2**31 - 1, -(2**31)]


def random_value(rng: random.Random, kind: str, null: float) -> Any:
    if rng.random() < null:
        return None
    return rng.choice(INT64 if kind == "i64" else INT32 if kind == "i32" else STRINGS)


def random_rows(rng: random.Random, n: int, null: float) -> list[tuple]:
    kinds = ("str", "str", "i64", "str", "i64", "str", "str")
    rows = []
    for _ in range(n):
        head = [random_value(rng, kind, null) for kind in kinds]
        sentences = [random_value(rng, "str", null / 4) for _ in range(rng.choice([0, 0, 1, 3, 8]))]
        links = [
            (*(random_value(rng, "str", null / 4) for _ in range(3)), random_value(rng, "i32", null / 4))
            for _ in range(rng.choice([0, 0, 1, 2, 6]))
        ]
        rows.append((*head, sentences, links, random_value(rng, "str", null / 8)))
    return rows


def test_rows_fuzzed() -> None:
    rng = random.Random(20_260_731)
    for i in range(400):
        rows = random_rows(rng, rng.randint(1, 40), null=[0.0, 0.2, 0.9, 1.0][i % 4])
        assert C.rows_to_buffers(rows) is not None
        assert_same_table(rows)
    # Every row with empty lists, every value None.
    assert_same_table([(None,) * 7 + ([], [], None)] * 9)
    assert_same_table([("i", "t", None, None, None, None, "", [""], [("", "", "", 0)], "train")])


class Str(str):
    pass


def test_rows_left_to_python() -> None:
    """Anything unexpected: the C returns None and the reference decides (a table, or its exception)."""
    (good,) = random_rows(random.Random(1), 1, null=0.0)
    good = (*good[:7], ["Une.", "Deux."], [("Paris", "id", "Paris", 1)], "train")
    assert C.rows_to_buffers([good]) is not None
    link = good[8][0]
    odd_values = {
        0: [Str("x"), b"x", 5, "\ud800"],
        2: [True, 1.5, "5", 2**63, -(2**63) - 1, Str("5")],
        4: [False, 2**64],
        6: ["text \udfff"],
        7: [("Une.",), "Une.", ["Une.", Str("Deux.")], ["Une.", 5], ["\ud800"]],
        8: [
            (link,),
            [list(link)],
            [link[:3]],
            [(*link, 0)],
            [(*link[:3], 2**31)],
            [(*link[:3], -(2**31) - 1)],
        ],
        9: [Str("train")],
    }
    cases: list[Any] = [[good[:9]], [(*good, "extra")], [list(good)], [good, good[:9]], [good, None]]
    for column, values in odd_values.items():
        for value in values:
            cases.append([good, (*good[:column], value, *good[column + 1 :])])
    cases += [[(*good[:8], [(*link[:3], n)], good[9])] for n in (True, 1.0, "1")]
    for rows in cases:
        assert C.rows_to_buffers(rows) is None, rows
        assert_same_table(rows)
    # No rows: zip(*[]) gives no columns, the reference raises (and rows_to_table with it).
    assert C.rows_to_buffers([]) is None
    with pytest.raises(IndexError):
        A.rows_to_table([])


def test_empty_table() -> None:
    table = A.empty_table()
    table.validate(full=True)
    assert table.equals(A.ABSTRACTS_SCHEMA.empty_table()) and table.schema == A.ABSTRACTS_SCHEMA
    assert [c.num_chunks for c in table.columns] == [1] * len(A.ABSTRACTS_SCHEMA)


def test_a_chunk_task_imports_no_pandas(tmp_path: Path) -> None:
    """pa.array (and Schema.empty_table, which calls it) import pandas; a chunk task needs neither."""
    sample = Path(A.__file__).parent.parent / "sample_snapshot" / "sample.fr" / "frwiki_namespace_0_0.jsonl"
    script = textwrap.dedent(
        f"""
        import sys
        from ragsft_assets.corpus import abstracts as A
        from ragsft_assets.corpus.build import run_task
        assert A._NATIVE is not None
        size = {sample.stat().st_size}
        res = run_task(("range", {str(sample)!r}, 0, size), A.AbstractsConfig(), None)
        assert res.table.num_rows > 50, res.table.num_rows
        print("pandas" in sys.modules)
        res = run_task(("range", {str(sample)!r}, 0, size), A.AbstractsConfig(), {str(tmp_path / "c.arrow")!r})
        assert res.path is not None
        print("pandas" in sys.modules)
        """
    )
    env = {**os.environ, "RAGSFT_NATIVE": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    in_memory, with_file = out.stdout.split()
    assert in_memory == with_file == "False"  # so the corpus fork server does not preload pandas


def test_no_memory_grows_over_repeated_tables() -> None:
    rows = real_rows()[:60] + random_rows(random.Random(4), 60, null=0.3)
    odd = [[rows[0], (*rows[0][:7], ["x", 5], [], "train")], [rows[1], (*rows[1][:2], 2**63, *rows[1][3:])]]

    def run() -> None:
        for start in range(0, len(rows), 20):
            A.rows_to_table(rows[start : start + 20])
        for case in odd:
            assert C.rows_to_buffers(case) is None

    run()
    watched = [v for row in rows for v in row] + [v for row in rows for v in row[7] + row[8]]
    assert_no_leaks(run, watched)


# ---- the link cache's miss ----------------------------------------------------------------------


def locate(urls: list[Any], host: Any = HOST) -> list[tuple]:
    """_locate_links over links to urls (anchor "a", found), from a cold cache."""
    A._LINK_CACHE.clear()
    raw = [{"url": u, "text": "a"} for u in urls]
    return A._locate_links(raw, ["a."], "a.", "Titre", host, Counter())


def assert_same_resolution(urls: list[Any], host: Any = HOST) -> tuple[str, dict]:
    """The C miss path leaves the cache _resolve_miss leaves (same entries, same order), or raises alike.

    Returns "value" or "raised", and the cache (as lists of entries)."""
    got = outcome(locate, urls, host)
    got_cache = {h: list(c.items()) for h, c in A._LINK_CACHE.items()}
    A._LINK_CACHE.clear()
    want = outcome(
        A._locate_links_py, [{"url": u, "text": "a"} for u in urls], ["a."], "a.", "Titre", host, Counter()
    )
    want_cache = {h: list(c.items()) for h, c in A._LINK_CACHE.items()}
    assert got == want, urls
    assert got_cache == want_cache, urls
    for entries in got_cache.values():
        for _url, hit in entries:
            assert type(hit) is tuple and len(hit) == 3
            assert all(type(v) is str or v is None for v in hit)
    A._LINK_CACHE.clear()
    return got[0], got_cache


def count_python_misses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs the compiled locate_links hands to the Python _resolve_miss."""
    calls: list[str] = []
    python = A._resolve_miss

    def resolve_miss(url: str, host: str) -> Any:
        calls.append(url)
        return python(url, host)

    monkeypatch.setattr(A, "_resolve_miss", resolve_miss)
    return calls


def test_resolution_of_real_links(monkeypatch: pytest.MonkeyPatch) -> None:
    by_host: dict[str, list[Any]] = {}
    for record in structured_records():
        host = A.wiki_host(record.get("url") if isinstance(record.get("url"), str) else None)
        by_host.setdefault(host, []).extend(link.get("url") for link in A._abstract_links_py(record))
    assert {"fr.wikipedia.org", "en.wikipedia.org"} <= set(by_host) and sum(map(len, by_host.values())) > 2000
    calls = count_python_misses(monkeypatch)
    for host, urls in by_host.items():
        for start in range(0, len(urls), 500):
            assert_same_resolution(urls[start : start + 500], host)
        # The C resolves the usual URLs itself: Python gets the others (queries, other hosts...).
        calls.clear()
        locate(urls, host)
        prefix = f"https://{host}/wiki/"
        assert all(not u.startswith(prefix) or "?" in u for u in calls)
        assert not host or len(set(calls)) < len({u for u in urls if isinstance(u, str)}) / 2


URL_HEADS = [PREFIX] * 12 + [
    "https://en.wikipedia.org/wiki/", "http://fr.wikipedia.org/wiki/", "https://fr.wikipedia.org/w/",
    "https://fr.wikipedia.org/wiki", "https://FR.wikipedia.org/wiki/", "/wiki/", "./", "", "https://",
    "https://fr.wikipedia.org/wiki//wiki/",
]  # fmt: skip
RAW_PIECES = [
    "%", "%2", "%C3%A9", "%c3%a9", "%C3", "%A9", "%E2%82%AC", "%F0%9F%98%80", "%F0%9F%98", "%ED%A0%80",
    "%C0%AF", "%FF", "%80", "%25", "%5F", "%5f", "%20", "%3A", "%3a", "%23", "%3F", "%0A", "%C2%A0",
    "%E2%80%A8", "%GG", "%%", "%C3é%A9", "%E2é%82%AC", "_", "__", " ", "\u00a0", "\t", "\n", "\u3000",
    "\x1c", "\u2028", ":", " : ", "Fichier", "fichier", "FICHIER", "Catégorie", "CATÉGORIE", "Wikipédia",
    "WİKİPEDİA", "Talk", "WP", "wp", "d", "D", "Spécial", "SPÉCIAL", "ß", "ŉ", "ǰ", "ﬁ", "ᾳ", "é", "É",
    "ÿ", "µ", "İ", "ı", "\U0001f600", "\U00010428", "Paris", "a", "z", "#", "#frag", "?", "?redlink=1",
    "&action=edit", "\ud800", "中", "1", "'", "(", ")", "/",
]  # fmt: skip


def random_urls(rng: random.Random, n: int) -> list[Any]:
    urls: list[Any] = []
    for _ in range(n):
        raw = "".join(rng.choices(RAW_PIECES, k=rng.choice([0, 1, 1, 2, 3, 5, 8])))
        urls.append(rng.choice(URL_HEADS) + raw)
    return urls


def test_resolution_of_fuzzed_urls() -> None:
    rng = random.Random(20_251_205)
    kinds: Counter[str] = Counter()
    raised = 0
    for _ in range(400):
        urls = random_urls(rng, 30)
        if rng.random() < 0.2:
            urls += [urls[0], None, 5, Str(PREFIX + "Paris")]  # cached already, not a str, a subclass
        kind, cache = assert_same_resolution(urls)
        for entries in cache.values():
            kinds.update(hit[1] for _url, hit in entries)
        raised += kind == "raised"  # a surrogate in a title: doc_id raises (UnicodeEncodeError)
    assert kinds[A.LINK_KEPT] > 2000 and kinds[A.LINK_NON_ARTICLE] > 20 and kinds[A.LINK_EXTERNAL] > 500
    assert raised > 10
    for host in ["", None, "FR.wikipedia.org", "fr.wikipedia.org/wiki", "en.wikipedia.org", "中.org", 5]:
        assert_same_resolution(random_urls(rng, 50) + [f"https://{host}/wiki/Paris"], host)


BYTES = [
    0x00, 0x20, 0x25, 0x41, 0x5F, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
    0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF,
]  # fmt: skip


def test_percent_decoding_of_every_short_byte_sequence() -> None:
    """unquote: UTF-8, invalid sequences replaced per maximal subpart; a non-ASCII character between
    escapes splits the runs that are decoded on their own."""
    urls = [f"{PREFIX}x%{b:02X}y" for b in range(256)] + [f"{PREFIX}X%{b:02x}" for b in range(256)]
    for a in BYTES:
        for b in BYTES:
            urls.append(f"{PREFIX}x%{a:02X}%{b:02x}")
            urls.append(f"{PREFIX}x%{a:02X}é%{b:02X}")
            urls += [f"{PREFIX}%{a:02X}%{b:02X}%{c:02X}" for c in BYTES]
    urls += [f"{PREFIX}%{a:02X}%{b:02X}%{c:02X}%{d:02X}z" for a in (0xF0, 0xF4) for b in BYTES for c in (0x80, 0xBF) for d in (0x80, 0x41)]  # fmt: skip
    for start in range(0, len(urls), 2000):
        assert_same_resolution(urls[start : start + 2000])


def test_first_letters_and_namespace_prefixes() -> None:
    """Each code point as a title's first letter (str.upper: full case mapping) and in a namespace."""
    multi = [c for c in range(0x110000) if len(chr(c).upper()) > 1 or len(chr(c).lower()) > 1]
    assert 0xDF in multi and 0x149 in multi and 0x130 in multi
    points = [*range(0x3000), *range(0x3000, 0x110000, 61), *multi]
    urls = [f"{PREFIX}{chr(c)}x" for c in points] + [f"{PREFIX}{chr(c)}" for c in points[:0x300]]
    urls += [f"{PREFIX}Cat{chr(c)}gorie:x" for c in points[:0x300]]
    namespaces = sorted(A.NON_ARTICLE_NAMESPACES)
    for ns in namespaces:
        for form in (ns, ns.upper(), ns.title(), ns.capitalize(), ns.swapcase()):
            urls += [f"{PREFIX}{form}:X", f"{PREFIX}_{form}_:_X", f"{PREFIX}{form}%3AX", f"{PREFIX}{form}:"]
    urls += [
        f"{PREFIX}:",
        f"{PREFIX}::",
        f"{PREFIX}_:_",
        f"{PREFIX}",
        f"{PREFIX}#x",
        f"{PREFIX}__",
        f"{PREFIX}%20",
    ]
    urls += [f"{PREFIX}W\u0130KI:x", f"{PREFIX}\u0130:x", f"{PREFIX}K\u0130:x", f"{PREFIX}\u212aATEGORY:x"]
    for start in range(0, len(urls), 3000):
        assert_same_resolution(urls[start : start + 3000])


def test_cache_bound_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded cache clears when full as _resolve_miss clears it; the fast path only with an exact
    int bound and an exact set of namespaces (Python otherwise)."""
    urls = [f"{PREFIX}Titre_{i}" for i in range(40)] + [f"{PREFIX}Titre_{i}" for i in range(10)]
    urls += [f"{PREFIX}Fichier:{i}" for i in range(7)]
    for bound in (0, 1, 3, 7, 100):
        monkeypatch.setattr(A, "_CACHE_MAX", bound)
        _kind, cache = assert_same_resolution([*urls, "https://en.wikipedia.org/wiki/X"])
        assert len(cache[HOST]) == 48 if bound == 100 else len(cache[HOST]) <= max(bound, 1)
    calls = count_python_misses(monkeypatch)
    for bound, namespaces in [(-1, A.NON_ARTICLE_NAMESPACES), (2**80, A.NON_ARTICLE_NAMESPACES),
                              (10.0, A.NON_ARTICLE_NAMESPACES), (10, list(A.NON_ARTICLE_NAMESPACES)),
                              (10, set(A.NON_ARTICLE_NAMESPACES) | {"titre"})]:  # fmt: skip
        monkeypatch.setattr(A, "_CACHE_MAX", bound)
        monkeypatch.setattr(A, "NON_ARTICLE_NAMESPACES", namespaces)
        assert_same_resolution(urls)
        calls.clear()
        locate(urls)
        assert (len(calls) > 0) == (bound != 10 or not isinstance(namespaces, set)), (bound, type(namespaces))


def test_doc_id() -> None:
    rng = random.Random(8)
    alphabet = ["a", "é", "中", "\U0001f600", " ", "\x00"]
    titles = ["", "Paris"] + ["".join(rng.choices(alphabet, k=n)) for n in range(0, 300) for _ in range(3)]
    for title in titles:
        assert C.doc_id(title) == A.doc_id(title), title
    assert C.doc_id("\ud800") is None and C.doc_id(Str("x")) is None and C.doc_id(5) is None


def test_no_memory_grows_over_repeated_resolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    urls = random_urls(random.Random(11), 600) + [f"{PREFIX}{'x' * 400}%C3%A9{'é' * 300}"]
    urls = [u for u in urls if "\ud800" not in u]  # no raising: every URL resolved each run

    def run() -> None:
        locate(urls)
        monkeypatch.setattr(A, "_CACHE_MAX", 5)
        locate(urls)
        monkeypatch.setattr(A, "_CACHE_MAX", 50_000)
        A._LINK_CACHE.clear()  # every run resolves every URL again

    run()
    watched = [*urls, A.NON_ARTICLE_NAMESPACES, *A._NATIVE_LINK_REASONS, *sorted(A.NON_ARTICLE_NAMESPACES)]
    assert_no_leaks(run, watched)
