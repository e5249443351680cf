"""The deterministic citation module against hand-built cases."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ragsft_assets.cli.citations import citations
from ragsft_assets.rag_sft import citations as c
from ragsft_assets.rag_sft.layout import render_documents

# HotpotQA-style sentences carry their own leading spaces.
DOC1 = 'Paris is the capital of France. It has 2.1 million inhabitants. The "City of Light" is old.'
DOC2 = "Lyon is a city in France.  It lies at the confluence of the Rhône and the Saône."
DOCS = [DOC1, DOC2]
TITLES = ["Paris", "Lyon"]


def verdicts(response: str, docs=DOCS, *, strict: bool = False) -> list[tuple[int | None, str]]:
    # The base rules are checked with strict quoting off (their short fragments would be too_short).
    return [(t.id, t.verdict) for t in c.check_response(response, docs, strict=strict).tags]


def kinds(response: str) -> list[str]:
    return [d.kind for d in c.check_response(response, DOCS).defects]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ('A <ref id="1">capital of France</ref>.', [(1, c.OK)]),
        ('<ref id="2">capital of France</ref>', [(2, c.NOT_FOUND)]),
        ('<ref id="3">capital of France</ref>', [(3, c.UNKNOWN_ID)]),
        ('<ref id="0">capital of France</ref>', [(0, c.UNKNOWN_ID)]),
        # case and punctuation are not folded
        ('<ref id="1">Capital of France</ref>', [(1, c.NOT_FOUND)]),
        ('<ref id="1">capital of France,</ref>', [(1, c.NOT_FOUND)]),
        # ellipsis: fragments verbatim and in order, both spellings
        ('<ref id="1">Paris is ... 2.1 million</ref>', [(1, c.OK)]),
        ('<ref id="1">Paris is…2.1 million</ref>', [(1, c.OK)]),
        ('<ref id="1">2.1 million ... Paris is</ref>', [(1, c.OUT_OF_ORDER)]),
        ('<ref id="1">Paris is ... Berlin</ref>', [(1, c.NOT_FOUND)]),
        ('<ref id="1">... the capital ...</ref>', [(1, c.OK)]),
        # an excerpt spanning two sentences (HotpotQA's own spaces, a double space in doc 2)
        ('<ref id="1">of France. It has</ref>', [(1, c.OK)]),
        ('<ref id="2">in France. It lies</ref>', [(2, c.OK)]),
        # Unicode spaces are whitespace; Unicode quotes are not folded
        ('<ref id="1">capital\u00a0of\u202fFrance</ref>', [(1, c.OK)]),
        ('<ref id="1">The \u201cCity of Light\u201d</ref>', [(1, c.NOT_FOUND)]),
        ('<ref id="1">The "City of Light"</ref>', [(1, c.OK)]),
        # excerpt with leading/trailing/newline whitespace
        ('<ref id="1">\n  capital   of\nFrance </ref>', [(1, c.OK)]),
        # several tags
        ('<ref id="1">Paris</ref> and <ref id="2">Lyon</ref>', [(1, c.OK), (2, c.OK)]),
    ],
)
def test_inline_verdicts(response: str, expected: list) -> None:
    assert verdicts(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ('<ref id="1">the capital of France</ref>', c.OK),
        # starts or ends inside a word of the document
        ('<ref id="1">aris is the capit</ref>', c.PARTIAL_WORD),
        ('<ref id="1">aris is the capital</ref>', c.PARTIAL_WORD),
        ('<ref id="1">Paris is the capit</ref>', c.PARTIAL_WORD),
        ('<ref id="1">Paris is the ... capital of Fran</ref>', c.PARTIAL_WORD),
        # punctuation at an edge is not inside a word
        ('<ref id="1">capital of France.</ref>', c.OK),
        ('<ref id="1">"City of Light"</ref>', c.OK),
        # fewer than 3 words, whole or in any fragment
        ('<ref id="1">Paris</ref>', c.TOO_SHORT),
        ('<ref id="1">capital of</ref>', c.TOO_SHORT),
        ('<ref id="1">Paris is the capital ... inhabitants</ref>', c.TOO_SHORT),
        ('<ref id="1">Paris is the ... 2.1 million inhabitants</ref>', c.OK),
        # not_found / out_of_order still come first
        ('<ref id="1">aris is Berlin</ref>', c.NOT_FOUND),
        ('<ref id="1">2.1 million inhabitants ... Paris is the</ref>', c.OUT_OF_ORDER),
        # every ellipsis spelling splits the excerpt
        ('<ref id="1">Paris is the [...] 2.1 million inhabitants</ref>', c.OK),
        ('<ref id="1">Paris is the […] 2.1 million inhabitants</ref>', c.OK),
        ('<ref id="1">Paris is the . . . 2.1 million inhabitants</ref>', c.OK),
        ('<ref id="1">Paris is the [ ... ] 2.1 million inhabitants</ref>', c.OK),
    ],
)
def test_strict_quote_verdicts(response: str, expected: str) -> None:
    assert verdicts(response, strict=True) == [(1, expected)]
    # The switch turns the two strict verdicts off; the base verdicts stay.
    off = verdicts(response, strict=False)[0][1]
    assert off == (c.OK if expected in (c.PARTIAL_WORD, c.TOO_SHORT) else expected)


def test_strict_is_the_default_and_fails_the_tag() -> None:
    rep = c.check_response('<ref id="1">aris is the capit</ref>', DOCS)
    assert [t.verdict for t in rep.tags] == [c.PARTIAL_WORD]
    assert not rep.tags_valid and not rep.passes
    assert c.check_response('<ref id="1">Paris</ref>', DOCS, min_words=1).tags_valid
    # A later occurrence on word bounds is accepted when the first one is inside a word.
    assert verdicts('<ref id="1">a b c</ref>', ["xa b c a b c"], strict=True) == [(1, c.OK)]


def test_one_definition_of_the_patterns() -> None:
    from ragsft_assets.rag_sft import formatting

    assert formatting._TAG_MARKUP_RE is c.TAG_MARKUP_RE
    assert c.ELLIPSIS_PATTERN in formatting._SEP_RE.pattern
    # The idle-ellipsis cleanup knows the bracketed form too: "[...]" skipping no word is removed.
    doc = "Paris is the capital, of France and more."
    assert formatting.remove_idle_ellipses("Paris is the capital [...] of France", doc) == (
        "Paris is the capital, of France"
    )


def test_nested_tags_are_malformed_not_an_exception() -> None:
    r = '<ref id="1">Paris <ref id="2">Lyon</ref> is</ref>'
    assert verdicts(r) == [(1, c.MALFORMED), (2, c.MALFORMED)]
    assert kinds(r) == ["nested"]
    assert not c.check_response(r, DOCS).tags_valid


def test_unclosed_tag() -> None:
    r = 'It is <ref id="1">the capital of France. Done.'
    assert verdicts(r) == [(1, c.MALFORMED)]
    assert kinds(r) == ["unclosed"]


def test_unterminated_and_bad_attributes_and_stray_closing() -> None:
    assert kinds('See <ref id="1" and more') == ["unterminated_tag"]
    assert verdicts('<ref name="x">Paris</ref>') == [(None, c.MALFORMED)]
    assert kinds('<ref name="x">Paris</ref>') == ["bad_attributes"]
    assert verdicts("<ref id=1>Paris</ref>") == [(None, c.MALFORMED)]
    assert kinds("Paris</ref>") == ["stray_closing"]
    assert verdicts('<ref id="1"></ref>') == [(1, c.MALFORMED)]
    assert kinds('<ref id="1">  </ref>') == ["empty_excerpt"]


def test_references_section() -> None:
    r = 'Paris is the capital.\n\nReferences:\n<ref id="1"/>\n<ref id="2"/>'
    rep = c.check_response(r, DOCS, TITLES, ["Paris", "Lyon"], style=c.REFERENCE)
    assert [(t.id, t.verdict) for t in rep.tags] == [(1, c.OK), (2, c.OK)]
    assert rep.passes and rep.f1 == 1.0
    # unknown id in the section; duplicates and inline tags under the References style
    bad = 'X <ref id="1">Paris</ref>\nReferences:\n<ref id="1"/>\n<ref id="1"/>\n<ref id="9"/>'
    rep = c.check_response(bad, DOCS, TITLES, ["Paris"], style=c.REFERENCE, strict=False)
    assert [t.verdict for t in rep.tags] == [c.OK, c.OK, c.OK, c.UNKNOWN_ID]
    assert sorted(d.kind for d in rep.defects) == ["duplicate_reference", "wrong_style"]
    missing_heading = c.check_response('Paris.\n<ref id="1"/>', DOCS, style=c.REFERENCE)
    assert [d.kind for d in missing_heading.defects] == ["no_references_heading"]


def test_scores_over_distinct_cited_documents() -> None:
    r = '<ref id="1">Paris</ref> <ref id="1">capital</ref> <ref id="2">Lyon</ref>'
    rep = c.check_response(r, DOCS, TITLES, ["Paris"], strict=False)
    assert rep.cited_ids == [1, 2]
    assert (rep.precision, rep.recall) == (0.5, 1.0)
    assert rep.f1 == pytest.approx(2 / 3)
    assert rep.tags_valid and not rep.passes
    none = c.check_response("No idea.", DOCS, TITLES, ["Paris", "Lyon"])
    assert (none.precision, none.recall, none.f1) == (0.0, 0.0, 0.0)
    nogold = c.check_response("No idea.", DOCS, TITLES, None)
    assert nogold.f1 is None and nogold.passes


def test_locate_fragments_spans_in_normalized_document() -> None:
    spans = c.locate_fragments("Paris is ... France.", DOC1)
    assert spans == [(0, 8), (24, 31)]
    assert c.locate_fragments("France. ... Paris", DOC1) is None


def test_cli_check(tmp_path) -> None:
    system = "Answer from the documents.\n\n" + render_documents(list(zip(TITLES, DOCS, strict=True)))
    chat = {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Capital?"},
            {"role": "assistant", "content": 'It is Paris <ref id="1">capital of France</ref>.'},
        ],
        "supporting_facts_titles": ["Paris"],
    }
    docs_row = {
        "documents": [{"title": t, "text": d} for t, d in zip(TITLES, DOCS, strict=True)],
        "response": '<ref id="2">capital of France</ref> <ref id="5">x</ref>',
        "gold_titles": [],
    }
    f = tmp_path / "in.jsonl"
    f.write_text(json.dumps(chat) + "\n" + "{not json\n" + json.dumps(docs_row) + "\n")
    res = CliRunner().invoke(citations, ["check", str(f), "--out", str(tmp_path / "out.jsonl")])
    assert res.exit_code == 1
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert rows[0]["tags"] == [{"id": 1, "verdict": "ok"}]
    assert rows[0]["passes"] is True and rows[0]["f1"] == 1.0
    assert "error" in rows[1] and rows[1]["line"] == 2
    assert rows[2]["tags"] == [{"id": 2, "verdict": "not_found"}, {"id": 5, "verdict": "unknown_id"}]
    assert rows[2]["f1"] is None and rows[2]["tags_valid"] is False and rows[2]["passes"] is False
    ok = CliRunner().invoke(citations, ["check", str(tmp_path / "one.jsonl")])
    assert ok.exit_code != 0  # missing file
    (tmp_path / "one.jsonl").write_text(json.dumps(chat) + "\n")
    ok = CliRunner().invoke(citations, ["check", str(tmp_path / "one.jsonl")])
    assert ok.exit_code == 0 and json.loads(ok.output)["passes"] is True


def test_cli_check_strict_switch(tmp_path) -> None:
    row = {
        "documents": [{"title": t, "text": d} for t, d in zip(TITLES, DOCS, strict=True)],
        "response": 'Paris <ref id="1">aris is the capit</ref>, in France <ref id="2">Lyon</ref>.',
        "gold_titles": ["Paris"],
    }
    f = tmp_path / "in.jsonl"
    f.write_text(json.dumps(row) + "\n")

    def check(*flags: str) -> dict:
        res = CliRunner().invoke(citations, ["check", str(f), *flags])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    strict = check()  # strict by default, as the data build
    assert strict["tags"] == [{"id": 1, "verdict": "partial_word"}, {"id": 2, "verdict": "too_short"}]
    assert strict["passes"] is False
    loose = check("--no-strict")  # the card's check (a recipe's citation_check: flag)
    assert loose["tags"] == [{"id": 1, "verdict": "ok"}, {"id": 2, "verdict": "ok"}]
    assert sorted(loose) == sorted(strict)  # the output keeps its fields
    # both checks on every row, whichever switch: the card's verdict and the stricter flags
    for report in (strict, loose):
        assert report["passes_card"] == loose["passes"] and report["quote_flags"] == [
            "partial_word",
            "too_short",
        ]
    assert loose["passes"] is False and loose["f1"] < 1  # Lyon is no gold: the card's check fails on F1
    short_ok = check("--min-words", "1")
    assert short_ok["tags"] == [{"id": 1, "verdict": "partial_word"}, {"id": 2, "verdict": "ok"}]
    bad = CliRunner().invoke(citations, ["check", str(f), "--min-words", "0"])
    assert bad.exit_code != 0 and "--min-words" in bad.output
