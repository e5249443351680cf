"""The MediaWiki XML dump reader and the Wikispeedia reader (structured-wikipedia record shape)."""

from __future__ import annotations

import bz2
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from ragsft_assets.corpus.wikitext_dump import (
    DumpStats,
    article_url,
    dump_language,
    extract_lead,
    iter_dump_pages,
    iter_dump_records,
    iter_wikispeedia_records,
    lead_wikitext,
    normalize_title,
    read_redirects,
    resolve_redirect,
    wikilink_targets,
)

DATA = Path(__file__).resolve().parent / "data"
ENWIKI_DIR = DATA / "enwiki_dump_sample"
WIKISPEEDIA = DATA / "wikispeedia"


def _enwiki_dump() -> Path:
    files = sorted(ENWIKI_DIR.glob("*.bz2"))
    assert files, f"no dump sample under {ENWIKI_DIR} (committed test data is missing)"
    return files[0]


def _title_of(url: str) -> str:
    return unquote(url.rsplit("/wiki/", 1)[1]).replace("_", " ")


def _links(record: dict) -> list[dict]:
    return [link for part in record["sections"][0]["has_parts"] for link in part["links"]]


# --- a small dump written here, with every awkward case we handle -------------------------------

_PAGE = """  <page>
    <title>{title}</title>
    <ns>{ns}</ns>
    <id>{id}</id>{redirect}
    <revision>
      <id>{rev}</id>
      <contributor><username>x</username><id>99</id></contributor>
      <text xml:space="preserve">{text}</text>
    </revision>
  </page>
"""


def _write_dump(path: Path, pages: list[dict]) -> Path:
    head = (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
        "  <siteinfo><namespaces>"
        '<namespace key="0" case="first-letter" /><namespace key="6">File</namespace>'
        '<namespace key="14">Category</namespace><namespace key="10">Template</namespace>'
        "</namespaces></siteinfo>\n"
    )
    body = ""
    for i, page in enumerate(pages):
        redirect = f'\n    <redirect title="{page["redirect"]}" />' if page.get("redirect") else ""
        body += _PAGE.format(
            title=page["title"],
            ns=page.get("ns", 0),
            id=100 + i,
            rev=5000 + i,
            redirect=redirect,
            text=page["text"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"),
        )
    path.write_bytes(bz2.compress((head + body + "</mediawiki>\n").encode("utf-8")))
    return path


_ALPHA = """{{Infobox thing
| name = Alpha
| image = [[File:Alpha.png|thumb|An image]]
}}
'''Alpha''' (<!-- hidden note -->{{IPA|/a/}}) is a [[beta thing|thing]] linked to [[Gamma]]<ref>{{cite web|url=x}}</ref> and to [[delta_wave#History|Delta]], see [[wikt:alpha|the word]].
[[File:Other.jpg|thumb|A caption with [[Gamma]]]]
{| class="wikitable"
| [[Gamma]] in a table
|}
It is also a {{lang|fr|mot français}} and an [http://example.org external site].

A second paragraph mentions [[:Gamma]] again and [[Missing page]].

== History ==
Never part of the lead: [[Gamma]].
[[Category:Letters]]
"""


@pytest.fixture()
def small_dump(tmp_path: Path) -> Path:
    pages = [
        {"title": "Alpha", "text": _ALPHA},
        # The redirects come after the page that links through them: the reader must still resolve.
        {"title": "Beta thing", "redirect": "Beta", "text": "#REDIRECT [[Beta]]"},
        {"title": "Delta wave", "redirect": "Delta_double", "text": "#REDIRECT [[Delta double]]"},
        {"title": "Delta double", "redirect": "Delta", "text": "#REDIRECT [[Delta]]"},
        {"title": "Beta", "text": "'''Beta''' follows [[alpha]].\n\n==See also==\n"},
        {"title": "Gamma", "text": "'''Gamma''' is the third letter, after [[Beta thing]]."},
        {"title": "Delta", "text": "'''Delta''' is a letter."},
        {"title": "Template:Box", "ns": 10, "text": "[[Alpha]] box"},
        {"title": "Empty lead", "text": "{{Infobox only}}\n== Section ==\nText."},
        {"title": "Loop one", "redirect": "Loop two", "text": "#REDIRECT [[Loop two]]"},
        {"title": "Loop two", "redirect": "Loop one", "text": "#REDIRECT [[Loop one]]"},
    ]
    return _write_dump(tmp_path / "enwiki-20260101-pages-articles.xml.bz2", pages)


def test_small_dump_records_shape_and_counts(small_dump: Path) -> None:
    stats = DumpStats()
    records = list(iter_dump_records(small_dump, stats=stats))
    assert [r["name"] for r in records] == ["Alpha", "Beta", "Gamma", "Delta"]
    assert (stats.pages, stats.articles, stats.redirects, stats.other_namespace, stats.empty_lead) == (
        11,
        4,
        5,
        1,
        1,
    )
    alpha = records[0]
    assert alpha["identifier"] == 100 and alpha["version"] == {"identifier": 5000}
    assert alpha["url"] == "https://en.wikipedia.org/wiki/Alpha"
    assert alpha["in_language"] == {"identifier": "en"}
    assert alpha["sections"][0]["name"] == "Abstract"
    assert alpha["abstract"] == "\n".join(p["value"] for p in alpha["sections"][0]["has_parts"])


def test_small_dump_lead_is_clean_text(small_dump: Path) -> None:
    alpha = next(iter_dump_records(small_dump))
    # The removed table stood between two lines: MediaWiki renders them as two paragraphs too.
    first, middle, second = (p["value"] for p in alpha["sections"][0]["has_parts"])
    assert first == "Alpha is a thing linked to Gamma and to Delta, see."
    assert middle == "It is also a mot français and an external site."
    assert second == "A second paragraph mentions Gamma again and Missing page."
    for dropped in ("Infobox", "hidden note", "caption", "table", "cite", "History", "Category", "the word"):
        assert dropped not in alpha["abstract"]


def test_small_dump_links_resolve_through_redirects(small_dump: Path) -> None:
    alpha = next(iter_dump_records(small_dump))
    links = [(link["text"], _title_of(link["url"])) for link in _links(alpha)]
    # "beta thing" -> redirect Beta; "delta_wave#History" -> Delta wave -> Delta double -> Delta.
    assert links == [
        ("thing", "Beta"),
        ("Gamma", "Gamma"),
        ("Delta", "Delta"),
        ("Gamma", "Gamma"),
        ("Missing page", "Missing page"),
    ]
    for part in alpha["sections"][0]["has_parts"]:
        for link in part["links"]:
            assert link["text"] in part["value"]
    beta = [r for r in iter_dump_records(small_dump) if r["name"] == "Beta"][0]
    assert [_title_of(link["url"]) for link in _links(beta)] == ["Alpha"]  # first letter upper-cased


def test_redirect_map_and_cycles(small_dump: Path) -> None:
    redirects = read_redirects(small_dump)
    assert redirects["Beta thing"] == "Beta"
    assert resolve_redirect("Delta wave", redirects) == "Delta"
    assert resolve_redirect("Loop one", redirects) in {"Loop one", "Loop two"}  # stops, no hang
    assert resolve_redirect("Not a redirect", redirects) == "Not a redirect"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("delta_wave#History", "Delta wave"),
        ("  grec   moderne ", "Grec moderne"),
        ("Esoch%C3%AD", "Esochí"),
        ("AT&amp;T", "AT&T"),
        ("", ""),
    ],
)
def test_normalize_title(raw: str, expected: str) -> None:
    assert normalize_title(raw) == expected


def test_article_url_round_trips() -> None:
    for title in ("Grec moderne", "Esochí", "Phase (matter)", "AC/DC", "Star Wars: Episode I", "Ça va?"):
        url = article_url(title, "fr")
        assert url.startswith("https://fr.wikipedia.org/wiki/")
        assert _title_of(url) == title
    assert article_url("Esochí", "fr") == "https://fr.wikipedia.org/wiki/Esoch%C3%AD"


def test_lead_wikitext_and_language() -> None:
    assert lead_wikitext("Lead [[A]].\n== H ==\nBody") == "Lead [[A]].\n"
    assert lead_wikitext("No heading") == "No heading"
    assert dump_language("frwiki-20240901-pages-articles1.xml.bz2") == "fr"
    assert dump_language("whatever.xml.bz2", default="de") == "de"


def test_extract_lead_drops_nested_namespaces_and_keeps_order() -> None:
    lead = extract_lead(
        "[[Fichier:X.jpg|vignette|légende [[Paris]]]] '''Lyon''' est une ville de [[France|la France]], "
        "près de [[Catégorie:Villes]][[fr:Lyon]][[Rhône (fleuve)|Rhône]].",
        "fr",
    )
    assert [p["value"] for p in lead.paragraphs] == ["Lyon est une ville de la France, près de Rhône."]
    assert lead.paragraphs[0]["links"] == [
        {"url": "https://fr.wikipedia.org/wiki/France", "text": "la France"},
        {"url": "https://fr.wikipedia.org/wiki/Rh%C3%B4ne_(fleuve)", "text": "Rhône"},
    ]


# --- the real, shortened English dump -----------------------------------------------------------


@pytest.fixture(scope="module")
def enwiki() -> tuple[list[dict], DumpStats, dict[str, str], list]:
    path = _enwiki_dump()
    stats = DumpStats()
    records = list(iter_dump_records(path, stats=stats))
    namespaces: set[str] = set()
    redirects = read_redirects(path, namespaces)
    pages = list(iter_dump_pages(path))
    return records, stats, redirects, pages


def test_real_dump_counts(enwiki) -> None:
    records, stats, redirects, pages = enwiki
    ns0 = [p for p in pages if p.ns == 0]
    # SOURCES.md: 206 pages; 106 articles and 99 redirects in namespace 0 (and one Wikipedia: page).
    assert len(pages) == 206
    assert sum(p.redirect is None for p in ns0) == 106
    assert len(redirects) == 99 == stats.redirects
    assert stats.other_namespace == 1
    # "List of anthropologists" starts with a heading: no lead, no record.
    assert (stats.articles, stats.empty_lead) == (105, 1)
    assert len(records) == 105
    assert "List of anthropologists" not in {r["name"] for r in records}


def test_real_dump_whole_text_links_match_sources_md(enwiki) -> None:
    """SOURCES.md: 115 links (87 distinct pairs, 58 sources, 47 targets) resolve to an article."""
    _, _, redirects, pages = enwiki
    articles = {normalize_title(p.title): p for p in pages if p.ns == 0 and p.redirect is None}
    links, section_links, pairs = 0, 0, set()
    for title, page in articles.items():
        for target in wikilink_targets(page.text, redirects):
            if target in articles and target != title:
                links += 1
                pairs.add((title, target))
        # SOURCES.md did not count links to a section ("astronaut#Russian"): count them apart.
        section_links += sum(
            1
            for raw in re.findall(r"\[\[([^\[\]|]+#[^\[\]|]*)(?:\|[^\[\]]*)?\]\]", page.text)
            if normalize_title(raw) in articles and normalize_title(raw) != title
        )
    assert section_links == 1
    assert links - section_links == 115
    assert len(pairs) == 87
    assert len({a for a, _ in pairs}) == 58 and len({b for _, b in pairs}) == 47


def test_real_dump_records_are_well_formed(enwiki) -> None:
    records, stats, redirects, _ = enwiki
    names = [r["name"] for r in records]
    assert len(names) == len(set(names))
    anarchism = next(r for r in records if r["name"] == "Anarchism")
    assert anarchism["identifier"] == 12 and anarchism["version"]["identifier"] == 716551092
    assert anarchism["abstract"].startswith("Anarchism is a political philosophy that advocates")
    assert {"url": "https://en.wikipedia.org/wiki/Political_philosophy", "text": "political philosophy"} in (
        _links(anarchism)
    )
    for record in records:
        assert record["url"] == article_url(record["name"], "en")
        for part in record["sections"][0]["has_parts"]:
            assert part["value"] and "[[" not in part["value"] and "{{" not in part["value"]
            assert "<ref" not in part["value"] and "thumb|" not in part["value"]
            for link in part["links"]:
                assert link["text"] in part["value"]
                # A link never points to a redirect of the dump: it was followed.
                assert _title_of(link["url"]) not in redirects
    assert stats.links == sum(len(_links(r)) for r in records) > 1500
    assert stats.links_dropped == {}


def test_real_dump_link_through_redirect_points_to_target(enwiki) -> None:
    records, stats, redirects, _ = enwiki
    assert redirects["Argument form"] == "Logical form"
    record = next(r for r in records if r["name"] == "Affirming the consequent")
    assert {"url": "https://en.wikipedia.org/wiki/Logical_form", "text": "form"} in _links(record)
    assert stats.links_through_redirect == 1


def test_real_dump_lead_links_between_articles(enwiki) -> None:
    records, *_ = enwiki
    names = {r["name"] for r in records}
    edges = [
        (r["name"], _title_of(link["url"]))
        for r in records
        for link in _links(r)
        if _title_of(link["url"]) in names and _title_of(link["url"]) != r["name"]
    ]
    assert len(edges) == len(set(edges)) == 21


def test_real_dump_is_deterministic(enwiki) -> None:
    records, *_ = enwiki
    again = list(iter_dump_records(_enwiki_dump()))
    assert again == records


# --- Wikispeedia --------------------------------------------------------------------------------


def _need_wikispeedia() -> None:
    assert (WIKISPEEDIA / "links.tsv").exists(), (
        f"no Wikispeedia data under {WIKISPEEDIA} (committed test data)"
    )


def test_wikispeedia_plaintext_records() -> None:
    _need_wikispeedia()
    stats = DumpStats()
    records = list(iter_wikispeedia_records(WIKISPEEDIA, stats=stats))
    assert stats.pages == 191
    assert len(records) == stats.articles >= 180
    alcohol = next(r for r in records if r["name"] == "Alcohol")
    assert alcohol["abstract"].startswith("In chemistry, an alcohol is any organic compound")
    assert "Enlarge" not in alcohol["abstract"] and "#copyright" not in alcohol["abstract"]
    assert {"url": "https://en.wikipedia.org/wiki/Ethanol", "text": "ethanol"} in _links(alcohol)
    total = 0
    for record in records:
        for part in record["sections"][0]["has_parts"]:
            for link in part["links"]:
                assert link["text"] in part["value"]
                total += 1
    # 5,954 outgoing links in the file; only those whose title appears in the lead are kept.
    assert total == stats.links and 0 < total < 5954
    assert stats.links + stats.links_dropped["anchor_not_in_text"] + stats.links_dropped["no_lead"] == 5954


def test_wikispeedia_graph_only_is_the_closed_graph() -> None:
    _need_wikispeedia()
    records = list(iter_wikispeedia_records(WIKISPEEDIA, graph_only=True))
    names = {r["name"] for r in records}
    assert len(records) == len(names) == 4598
    links = [(r["name"], _title_of(link["url"])) for r in records for link in _links(r)]
    assert len(links) == 119879
    assert all(target in names for _, target in links)  # closed graph
    assert sum(1 for r in records if _links(r)) == 4585
    for record in records[:50]:
        for link in _links(record):
            assert link["text"] in record["abstract"]


def _corpus_graph(records: list[dict], min_chars: int, min_sentences: int) -> tuple:
    """The corpus engineer's abstracts + link graph logic, unchanged, on our records."""
    from ragsft_assets.corpus.abstracts import AbstractsConfig, deduplicate_titles, process_items
    from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph

    chunk = process_items(
        records, AbstractsConfig(lang="en", min_chars=min_chars, min_sentences=min_sentences)
    )
    table, _ = deduplicate_titles(chunk.table)
    graph = build_link_graph(table, LinkGraphConfig(in_degree_cap=10**9))
    return chunk, table, graph


def _expected_edges(records: list[dict], table) -> int:
    """Links between two kept documents of the same split (self-links aside), counted here directly."""
    split_of = dict(zip(table.column("title").to_pylist(), table.column("split").to_pylist(), strict=True))
    return sum(
        1
        for r in records
        for link in _links(r)
        if r["name"] in split_of
        and _title_of(link["url"]) in split_of
        and _title_of(link["url"]) != r["name"]
        and split_of[r["name"]] == split_of[_title_of(link["url"])]
    )


def _chemistry_titles() -> list[str]:
    import json

    with open(WIKISPEEDIA / "plaintext_chemistry_191.jsonl", encoding="utf-8") as handle:
        return [json.loads(line)["article"] for line in handle if line.strip()]


def test_wikispeedia_closed_subgraph_through_corpus_logic() -> None:
    """The 191 chemistry articles with the 3,080 links among them, through abstracts and link_graph."""
    _need_wikispeedia()
    records = list(iter_wikispeedia_records(WIKISPEEDIA, graph_only=True, only_titles=_chemistry_titles()))
    assert len(records) == 191 and sum(len(_links(r)) for r in records) == 3080
    chunk, table, graph = _corpus_graph(records, min_chars=0, min_sentences=1)
    kept = set(table.column("title").to_pylist())
    dropped = {r["name"] for r in records} - kept
    # Title filters (list pages...) may drop a few; the rest of the closed graph stays whole.
    assert table.num_rows + sum(n for reason, n in chunk.reasons.items() if reason != "kept") == 191
    assert len(dropped) <= 2
    from_kept = [
        (r["name"], _title_of(link["url"])) for r in records if r["name"] in kept for link in _links(r)
    ]
    self_links = [(a, b) for a, b in from_kept if a == b]
    from_kept = [(a, b) for a, b in from_kept if a != b]
    assert chunk.link_reasons["link_self"] == len(self_links)  # the corpus logic drops self-links
    assert graph.funnel["links_read"] == len(from_kept) == chunk.link_reasons["link_kept"]
    # Closed graph: a target is missing only when a filter dropped it.
    assert graph.funnel["target_not_in_corpus"] == sum(1 for _, t in from_kept if t in dropped)
    expected = _expected_edges(records, table)
    assert graph.table.num_rows == graph.funnel["kept"] == expected > 500
    assert graph.funnel["cross_split"] + graph.funnel["target_not_in_corpus"] == len(from_kept) - expected
    assert graph.funnel["enumeration"] == 0 and graph.funnel["in_degree_cap"] == 0


def test_dump_records_through_corpus_logic(enwiki) -> None:
    """The real XML dump's records build abstracts and a link graph unchanged."""
    records, *_ = enwiki
    chunk, table, graph = _corpus_graph(records, min_chars=300, min_sentences=2)
    assert 0 < table.num_rows < len(records)
    assert chunk.reasons["disambiguation_page"] + chunk.reasons["too_short"] > 0
    assert chunk.link_reasons["link_kept"] > 1000
    # Every link of a kept abstract was placed in a sentence that holds its anchor.
    for row in table.to_pylist()[:40]:
        for link in row["links"]:
            assert link["anchor"] in row["sentences"][link["sentence"]]
    assert graph.table.num_rows == graph.funnel["kept"] > 0


@pytest.mark.integration
def test_wikispeedia_full_graph_through_corpus_logic() -> None:
    """4,598 articles and 119,879 links: the graph at the real scale (about 30 s on 2 cores)."""
    _need_wikispeedia()
    records = list(iter_wikispeedia_records(WIKISPEEDIA, graph_only=True))
    chunk, table, graph = _corpus_graph(records, min_chars=0, min_sentences=1)
    assert graph.funnel["links_read"] + chunk.link_reasons["link_self"] == 119879 - sum(
        len(_links(r)) for r in records if r["name"] not in set(table.column("title").to_pylist())
    )
    assert graph.table.num_rows == _expected_edges(records, table) == graph.funnel["kept"]
    assert graph.funnel["in_degree_cap"] == 0 and graph.funnel["enumeration"] == 0


def test_truncated_bz2_and_malformed_xml_name_the_file_and_line(small_dump: Path, tmp_path: Path) -> None:
    from ragsft_assets.corpus.structured_wikipedia import CorruptDumpError

    data = small_dump.read_bytes()
    cut = tmp_path / "enwiki-cut.xml.bz2"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDumpError, match=r"enwiki-cut\.xml\.bz2: the compressed stream ends") as info:
        list(iter_dump_pages(cut))
    assert re.search(r"near line \d+", str(info.value)) and "download it again" in str(info.value)

    xml = bz2.decompress(data).decode("utf-8").split("\n")
    broken = next(i for i, line in enumerate(xml) if "<title>Gamma</title>" in line)
    xml[broken] = xml[broken].replace("</title>", "</titl>")
    bad = tmp_path / "enwiki-bad.xml"
    bad.write_text("\n".join(xml), encoding="utf-8")
    with pytest.raises(
        CorruptDumpError, match=rf"enwiki-bad\.xml: malformed XML at line {broken + 1}, "
    ) as info:
        list(iter_dump_pages(bad))
    assert "last complete page 'Beta'" in str(info.value)
