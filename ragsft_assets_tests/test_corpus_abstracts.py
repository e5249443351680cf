"""Abstracts: filters with reasons, link resolution, splits, bad input, the real records."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets.corpus import abstracts as A
from ragsft_assets.corpus.build import BadInputError, build_abstracts, check_bad_share
from ragsft_assets.corpus.structured_wikipedia import dump_files
from ragsft_assets.ids import doc_id
from ragsft_assets_tests.corpus_fixtures import FILLER, REAL_FRWIKI, make_record, write_jsonl

CFG = A.AbstractsConfig()
LONG = "Valrenne est une commune française située sur l'Orbelle, dans l'ouest du pays. " + FILLER


def _reason(record: dict, cfg: A.AbstractsConfig = CFG) -> str:
    out = A.process_record(record, cfg, Counter())
    return out if isinstance(out, str) else A.KEPT


@pytest.mark.parametrize(
    ("title", "abstract", "reason"),
    [
        ("Valrenne", LONG, A.KEPT),
        ("Valrenne", "Valrenne est une commune. Elle est petite.", A.TOO_SHORT),
        (
            "Valrenne",
            "Valrenne est une commune française, " + "très belle, " * 30 + "sur l'Orbelle.",
            A.TOO_SHORT,
        ),
        ("Valrenne", None, A.MISSING_ABSTRACT),
        ("Valrenne", "   ", A.MISSING_ABSTRACT),
        ("Orbelle (homonymie)", LONG, A.DISAMBIGUATION),
        ("Orbelle", "Orbelle peut désigner : " + LONG, A.DISAMBIGUATION),
        ("Marchal", "Marchal est un nom de famille notamment porté par : " + LONG, A.DISAMBIGUATION),
        ("Mercury", "Mercury may refer to: " + LONG, A.DISAMBIGUATION),
        ("Liste des ponts sur l'Orbelle", LONG, A.LIST_PAGE),
        ("List of bridges", LONG, A.LIST_PAGE),
        ("Chronologie de Valrenne", LONG, A.CHRONOLOGY_PAGE),
        ("Index de la peinture en Orbelle", LONG, A.INDEX_PAGE),
        ("Index de Herfindahl-Hirschman", LONG, A.KEPT),
        ("Glossaire de la batellerie", LONG, A.GLOSSARY_PAGE),
        ("1856", LONG, A.YEAR_PAGE),
        ("1856 en France", LONG, A.YEAR_PAGE),
        ("Années 1850", LONG, A.YEAR_PAGE),
        ("XIXe siècle", LONG, A.YEAR_PAGE),
        ("44 av. J.-C.", LONG, A.YEAR_PAGE),
        ("14 juillet", LONG, A.DATE_PAGE),
        ("1er janvier", LONG, A.DATE_PAGE),
        ("Juillet 1856", LONG, A.KEPT),  # a month and a year: the abstract decides (cases/abstract_filters)
        ("1984 (roman)", LONG, A.KEPT),
        ("Listeria", LONG, A.KEPT),
        ("Mars (planète)", LONG, A.KEPT),
        ("", LONG, A.MISSING_TITLE),
    ],
)
def test_filter_reasons(title: str, abstract: str | None, reason: str) -> None:
    assert _reason(make_record(title, abstract)) == reason


def test_min_chars_and_sentences_are_configurable() -> None:
    rec = make_record("Valrenne", "Valrenne est une commune. Elle est petite.")
    assert _reason(rec, A.AbstractsConfig(min_chars=20, min_sentences=2)) == A.KEPT
    assert _reason(rec, A.AbstractsConfig(min_chars=20, min_sentences=3)) == A.TOO_SHORT


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://fr.wikipedia.org/wiki/Gr%C3%A8ce", ("Grèce", A.LINK_KEPT)),
        ("https://fr.wikipedia.org/wiki/Dème_d'Arrianá", ("Dème d'Arrianá", A.LINK_KEPT)),
        ("https://fr.wikipedia.org/wiki/Orbelle_(rivi%C3%A8re)", ("Orbelle (rivière)", A.LINK_KEPT)),
        ("https://fr.wikipedia.org/wiki/fromage_de_Sauvanne", ("Fromage de Sauvanne", A.LINK_KEPT)),
        ("https://fr.wikipedia.org/wiki/Valrenne#Histoire", ("Valrenne", A.LINK_KEPT)),
        ("/wiki/Valrenne", ("Valrenne", A.LINK_KEPT)),
        ("./Valrenne", ("Valrenne", A.LINK_KEPT)),
        (
            "https://fr.wikipedia.org/wiki/Rhodope_(district_r%C3%A9gional)?action=edit&redlink=1",
            (None, A.LINK_REDLINK),
        ),
        ("https://fr.wikipedia.org/w/index.php?title=Moulin&action=edit&redlink=1", (None, A.LINK_REDLINK)),
        ("https://gallica.bnf.fr/ark:/12148/xyz", (None, A.LINK_EXTERNAL)),
        ("https://en.wikipedia.org/wiki/Valrenne", (None, A.LINK_EXTERNAL)),
        ("mailto:a@b.fr", (None, A.LINK_EXTERNAL)),
        ("", (None, A.LINK_EXTERNAL)),
        ("https://fr.wikipedia.org/wiki/Fichier:Fakarava.jpg", (None, A.LINK_NON_ARTICLE)),
        ("https://fr.wikipedia.org/wiki/Cat%C3%A9gorie:Commune", (None, A.LINK_NON_ARTICLE)),
    ],
)
def test_resolve_link(url: str, expected: tuple[str | None, str]) -> None:
    assert A.resolve_link(url, "fr.wikipedia.org") == expected


def test_links_located_in_sentences_in_order() -> None:
    abstract = "Castelmaure est sur l'Orbelle. Elle est proche de Valrenne. L'Orbelle y est large. " + FILLER
    rec = make_record(
        "Castelmaure",
        abstract,
        [("Orbelle", "Orbelle (rivière)"), ("Valrenne", "Valrenne"), ("Orbelle", "Orbelle (rivière)")],
        raw_links=[
            {"url": "https://fr.wikipedia.org/wiki/X?action=edit&redlink=1", "text": "X"},
            {"url": "https://example.org/", "text": "site"},
            {"url": "https://fr.wikipedia.org/wiki/Lanvi%C3%A8re", "text": "des moines absents"},
            {"url": "https://fr.wikipedia.org/wiki/Castelmaure", "text": "Castelmaure"},
            {"url": "https://fr.wikipedia.org/wiki/Lanvi%C3%A8re", "text": ""},
        ],
    )
    counts: Counter[str] = Counter()
    row = A.process_record(rec, CFG, counts)
    assert isinstance(row, dict)
    assert [(link["target_title"], link["sentence"]) for link in row["links"]] == [
        ("Orbelle (rivière)", 0),
        ("Valrenne", 1),
        ("Orbelle (rivière)", 2),  # the second "Orbelle" is found after the first, in sentence 2
    ]
    assert all(link["target_id"] == doc_id(link["target_title"]) for link in row["links"])
    assert counts == Counter(
        {
            A.LINK_KEPT: 3,
            A.LINK_REDLINK: 1,
            A.LINK_EXTERNAL: 1,
            A.LINK_ANCHOR_NOT_FOUND: 1,
            A.LINK_SELF: 1,
            A.LINK_EMPTY_ANCHOR: 1,
        }
    )
    assert row["text"] == " ".join(row["sentences"])


def test_split_depends_only_on_seed_and_id() -> None:
    ids = [doc_id(f"Titre {i}") for i in range(3000)]
    shares = A.normalise_shares((0.6, 0.2, 0.2))
    first = [A.assign_split(i, 7, shares) for i in ids]
    assert [A.assign_split(i, 7, shares) for i in reversed(ids)] == first[::-1]
    counts = Counter(first)
    assert 0.55 < counts["train"] / 3000 < 0.65 and 0.15 < counts["test"] / 3000 < 0.25
    assert [A.assign_split(i, 8, shares) for i in ids] != first  # the seed matters
    assert A.normalise_shares({"train": 3, "validation": 1, "test": 1}) == (0.6, 0.2, 0.2)
    with pytest.raises(ValueError):
        A.normalise_shares((1, -1, 1))


def test_default_shares_match_seed_001() -> None:
    train, validation, test = A.DEFAULT_SPLIT_SHARES
    assert round(train * 822_270) == 690_957 and round(test * 822_270) == 65_972


def test_real_records_fields() -> None:
    build = build_abstracts([REAL_FRWIKI], A.AbstractsConfig(min_chars=100))
    rows = {r["title"]: r for r in build.table.to_pylist()}
    assert build.funnel["lines_read"] == 4 and build.funnel[A.TOO_SHORT] == 1  # Manoir de Kergurion
    esochi = rows["Esochí"]
    assert esochi["id"] == doc_id("Esochí")
    assert esochi["identifier"] == 16411141 and esochi["revision"] == 217351334 and esochi["qid"] is None
    assert esochi["url"] == "https://fr.wikipedia.org/wiki/Esoch%C3%AD"
    assert len(esochi["sentences"]) == 2
    targets = [link["target_title"] for link in esochi["links"]]
    assert "Rhodope (district régional)" not in targets  # red link
    assert "Grec moderne" not in targets  # its anchor is only in the paragraph, not in the abstract
    assert ("Recensement de la Grèce de 2011", 1) in [
        (t["target_title"], t["sentence"]) for t in esochi["links"]
    ]
    fakarava = rows["Fakarava (Polynésie française)"]
    assert fakarava["qid"] == "Q1393658" and fakarava["revision"] == 196554558
    assert ("Fakarava", 1) in [(t["target_title"], t["sentence"]) for t in fakarava["links"]]
    assert build.link_funnel[A.LINK_REDLINK] == 2
    # The default 300-character floor drops every one of these short real abstracts.
    assert build_abstracts([REAL_FRWIKI], CFG).funnel[A.TOO_SHORT] == 4


def test_duplicate_titles_keep_latest_revision_whatever_the_order(tmp_path: Path) -> None:
    old = make_record("Lanvière", LONG + " Ancienne.", revision=1, identifier=5)
    new = make_record("Lanvière", LONG + " Nouvelle.", revision=2, identifier=5)
    for order in ([old, new], [new, old]):
        build = build_abstracts([write_jsonl(tmp_path / "d.jsonl", order)], CFG)
        assert build.table.num_rows == 1 and build.table.column("revision")[0].as_py() == 2
        assert build.funnel[A.DUPLICATE_TITLE] == 1
        assert build.rejected == [(doc_id("Lanvière"), A.DUPLICATE_TITLE, "Lanvière")]


def test_bad_lines_counted_and_located(tmp_path: Path) -> None:
    good = [make_record(f"Ville {i}", LONG, identifier=i) for i in range(6)]
    lines = [*good[:2], b'{"name": "Tronqu', b"\xff\xfe{}", b"", b"[1, 2]", *good[2:]]
    path = write_jsonl(tmp_path / "dump.jsonl", lines)
    build = build_abstracts([path], CFG)
    assert build.table.num_rows == 6
    assert build.funnel[A.MALFORMED_LINE] == 2 and build.funnel["not_utf8"] == 1
    assert build.funnel["lines_read"] == 9  # the blank line is not a record
    assert [(f, n, r) for f, n, r, _ in build.bad_examples] == [
        ("dump.jsonl", 3, "malformed_line"),
        ("dump.jsonl", 4, "not_utf8"),
        ("dump.jsonl", 6, "malformed_line"),
    ]
    check_bad_share(build, 0.5)  # 3 of 9: under the limit, no error
    with pytest.raises(BadInputError, match=r"dump\.jsonl:3 \(malformed_line"):
        check_bad_share(build, 0.1)


def test_chunking_workers_gzip_and_parquet_give_the_same_table(tmp_path: Path) -> None:
    records = [make_record(f"Ville {i}", LONG, [("Orbelle", "Orbelle")], identifier=i) for i in range(40)]
    plain = write_jsonl(tmp_path / "a" / "dump.jsonl", records)
    reference = build_abstracts([plain], CFG)
    small_chunks = build_abstracts([plain], CFG, chunk_bytes=3000)
    assert small_chunks.table.equals(reference.table)
    gz = tmp_path / "b" / "dump.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert build_abstracts(dump_files(gz.parent), CFG).table.equals(reference.table)
    pq_path = tmp_path / "c" / "dump.parquet"
    pq_path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([orjson.loads(orjson.dumps(r)) for r in records]), pq_path)
    assert build_abstracts([pq_path], CFG).table.equals(reference.table)


def test_two_workers_give_the_same_table(tmp_path: Path) -> None:
    records = [make_record(f"Ville {i}", LONG, identifier=i) for i in range(60)]
    plain = write_jsonl(tmp_path / "dump.jsonl", records)
    one = build_abstracts([plain], CFG, chunk_bytes=5000)
    two = build_abstracts([plain], CFG, workers=2, chunk_bytes=5000)
    assert two.table.equals(one.table) and two.funnel == one.funnel


def test_lead_decode_gives_the_same_rows_as_a_full_decode() -> None:
    from ragsft_assets.corpus.structured_wikipedia import decode_lead, decode_line
    from ragsft_assets_tests.corpus_fixtures import SAMPLE_DIR

    lines = REAL_FRWIKI.read_bytes().splitlines()
    sample = SAMPLE_DIR / "frwiki_namespace_0_0.jsonl"
    if sample.is_file():
        lines += sample.read_bytes().splitlines()
    lines += [b"[1]", b'{"name": 3, "sections": [1, 2]}', b'{"name": "X", "sections": null}', b"\xff"]
    # version and main_entity are decoded to their identifier only: every other shape of them too.
    record = orjson.loads(REAL_FRWIKI.read_bytes().splitlines()[0])
    for version, entity in [
        (None, None),
        ("12", [1]),
        ({"identifier": "77"}, {"identifier": 5}),
        ({"comment": "x"}, {}),
        ({"identifier": 1, "identifier2": {"a": [1]}}, {"identifier": "Q1", "url": None}),
        (3.5, "Q2"),
    ]:
        lines.append(orjson.dumps({**record, "version": version, "main_entity": entity}))
    lines.append(orjson.dumps({k: v for k, v in record.items() if k not in ("version", "main_entity")}))
    cfg = A.AbstractsConfig(min_chars=50)
    for line in lines:
        fast, full = decode_lead(line), decode_line(line)
        if isinstance(full, dict):
            c1: Counter[str] = Counter()
            c2: Counter[str] = Counter()
            assert A.process_record(fast, cfg, c1) == A.process_record(full, cfg, c2)
            assert c1 == c2
        else:
            assert fast == full


_FILTER_CASES = [
    orjson.loads(line)
    for line in (Path(__file__).parent / "cases" / "abstract_filters.jsonl").read_bytes().splitlines()
    if line.strip()
]


@pytest.mark.parametrize("case", _FILTER_CASES, ids=[c["case"] for c in _FILTER_CASES])
def test_filter_cases_data_file(case: dict) -> None:
    """Month-year titles decided by the abstract, index pages vs measures (cases/abstract_filters.jsonl)."""
    cfg = A.AbstractsConfig(lang="en" if case["title"].startswith("Index of") else "fr")
    assert _reason(make_record(case["title"], case["abstract"]), cfg) == case["expected"]
