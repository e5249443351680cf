"""Formatting of kept examples, and the statistics."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ragsft_assets.rag_sft import formatting as fm
from ragsft_assets.rag_sft import statistics as st
from ragsft_assets.rag_sft.citations import check_response
from ragsft_assets.rag_sft.examples import ANSWERABLE, UNANSWERABLE, RagPrompt
from ragsft_assets.rag_sft.recipes import FR_V2_RECIPE, HOTPOTQA_CITE_RECIPE, TRUST_ALIGN_RECIPE

DOC = "Paris is the capital of France. It has, famously, 2.1 million inhabitants."


@pytest.mark.parametrize(
    ("excerpt", "expected"),
    [
        ("Paris is ... the capital", "Paris is the capital"),  # skips nothing
        ("France. ... It has", "France. It has"),  # skips only the sentence gap
        ("It has ... famously", "It has, famously"),  # skips a comma only
        ("Paris is ... France", "Paris is ... France"),  # skips words: kept
        ("Paris…capital", "Paris…capital"),  # skips "is the": kept
        ("... Paris is", "Paris is"),  # leading: nothing before in the document
        ("million ... ", "million"),  # trailing: skips no word of the quote, whatever follows
        ("It has, famously ...", "It has, famously"),  # trailing, mid-document
        ("2.1 million inhabitants. ...", "2.1 million inhabitants."),  # trailing at the end
        ("France ... Paris", "France ... Paris"),  # out of order: untouched
    ],
)
def test_remove_idle_ellipses(excerpt: str, expected: str) -> None:
    assert fm.remove_idle_ellipses(excerpt, DOC) == expected


def test_clean_excerpts_only_touches_excerpts() -> None:
    resp = 'Yes <ref id="1">Paris is ... the capital</ref>, and <ref id="1">Paris is ... France</ref>.'
    out, n = fm.clean_excerpts(resp, [DOC])
    assert n == 1
    assert out == 'Yes <ref id="1">Paris is the capital</ref>, and <ref id="1">Paris is ... France</ref>.'
    assert check_response(out, [DOC], strict=False).tags_valid
    # Strict quoting: "Paris is" (two words) is too short a fragment, whatever the cleanup did.
    assert [t.verdict for t in check_response(out, [DOC]).tags] == ["ok", "too_short"]


def test_named_untagged_sources() -> None:
    assert fm.named_untagged_sources('As [Source 2] says, <ref id="1">Paris</ref>.') == [2]
    assert fm.named_untagged_sources('As Source 1 says, <ref id="1">Paris</ref>.') == []
    assert fm.named_untagged_sources("No sources named here.") == []


def _prompt(pid: str, kind: str, rule: str = "generic", phrase: str = "") -> RagPrompt:
    return RagPrompt(
        id=f"{pid}-{kind}",
        pair_id=pid,
        question_id=pid,
        kind=kind,
        twin_kind="" if kind == ANSWERABLE else "both",
        split="train",
        language="en",
        question="Capital?",
        answer="Paris",
        titles=["Paris"],
        paragraphs=[DOC],
        gold_titles=["Paris"] if kind == ANSWERABLE else [],
        removed_titles=[],
        citation_style="inline",
        refusal_rule=rule,
        refusal_phrase=phrase,
        system="S",
        user="Capital?",
        chunks_total=1,
        distractors_total=0,
        distractors_dropped=0,
    )


def test_format_examples_strict_and_untagged_source_drop_twin() -> None:
    prompts = [
        _prompt("p1", ANSWERABLE, "strict", "PHRASE."),
        _prompt("p1", UNANSWERABLE, "strict", "PHRASE."),
        _prompt("p2", ANSWERABLE),
        _prompt("p2", UNANSWERABLE),
    ]
    responses = {
        "p1-answerable": 'Paris <ref id="1">Paris is ... the capital</ref>.',
        "p1-unanswerable": "The documents do not say. Please add documents.",
        "p2-answerable": 'Paris, see [Source 3]. <ref id="1">Paris</ref>',
        "p2-unanswerable": "The documents do not say.",
    }
    out = fm.format_examples(prompts, responses, {p.id for p in prompts})
    rows = {r["id"]: r for r in out.rows}
    assert set(rows) == {"p1-answerable", "p1-unanswerable"}
    assert rows["p1-unanswerable"]["messages"][2]["content"] == "PHRASE."
    assert rows["p1-answerable"]["messages"][2]["content"] == 'Paris <ref id="1">Paris is the capital</ref>.'
    assert rows["p1-answerable"]["supporting_facts_titles"] == ["Paris"]
    reasons = {d.candidate_id: d.reason for d in out.decisions}
    assert (
        reasons["p2-answerable"] == "names_untagged_source" and reasons["p2-unanswerable"] == "twin_dropped"
    )


def test_untagged_source_step_follows_the_recipe() -> None:
    prompts = [_prompt("p1", ANSWERABLE), _prompt("p1", UNANSWERABLE), _prompt("p2", ANSWERABLE)]
    prompts += [_prompt("p2", UNANSWERABLE)]
    responses = {
        "p1-answerable": 'Paris. <ref id="1">Paris is the capital</ref>',
        "p1-unanswerable": "[Source 1] describes Paris, not the question. The documents do not say.",
        "p2-answerable": 'Paris, see [Source 3]. <ref id="1">Paris is the capital</ref>',
        "p2-unanswerable": "The documents do not say.",
    }
    kept = {p.id for p in prompts}

    def rows(recipe) -> set[str]:
        return {r["id"] for r in fm.format_examples(prompts, responses, kept, recipe=recipe).rows}

    # hotpotqa_cite: answers only; a refusal that names a document is kept (with its answer)
    assert rows(HOTPOTQA_CITE_RECIPE) == {"p1-answerable", "p1-unanswerable"}
    assert rows(FR_V2_RECIPE) == kept  # fr_v2 has no such step
    assert rows(replace(TRUST_ALIGN_RECIPE, multi_answer=False)) == set()  # "all": refusals too


def test_fr_v2_rewrites_refusal_openings_by_default() -> None:
    assert FR_V2_RECIPE.rewrite_refusals and not HOTPOTQA_CITE_RECIPE.rewrite_refusals
    assert fm.NEUTRAL_OPENERS["fr"] == (
        "D'après les documents fournis",
        "Pour répondre à cette question",
        "Selon les documents fournis",
    )
    describes = "[Source 2] décrit Lyon et ses fleuves."
    verdict = "Les documents ne permettent pas de répondre à cette question."
    text = f'{describes} {verdict} <ref id="2">Lyon est une ville</ref> le confirme.'
    modes = {}
    for i in range(40):
        out, mode = fm.rewrite_refusal(text, "fr", 3, f"pair{i}")
        modes.setdefault(mode, out)
        assert describes in out and '<ref id="2">Lyon est une ville</ref>' in out  # never deleted
    assert set(modes) == {"move", "vary", "neutral"}
    assert modes["move"].endswith(verdict) and modes["move"].startswith(describes)
    assert verdict not in modes["vary"] and modes["vary"].startswith(describes)
    opener = next(o for o in fm.NEUTRAL_OPENERS["fr"] if modes["neutral"].startswith(o))
    # the opener starts the first sentence: "Selon les documents fournis, [Source 2] décrit ..."
    assert modes["neutral"] == f"{opener}, {text}"
    rewrites = [fm.rewrite_refusal(verdict, "fr", 3, f"pair{i}") for i in range(40)]
    lowered = next(out for out, mode in rewrites if mode == "neutral")  # "Les" starts no sentence now
    assert ", les documents ne permettent pas" in lowered
    # a verdict that names a document describes it too: moved or prefixed, never replaced
    naming = "Le document 2 ne dit rien du maire. Ajoutez des documents."
    for i in range(20):
        out, mode = fm.rewrite_refusal(naming, "fr", 3, f"pair{i}")
        assert "Le document 2 ne dit rien du maire." in out or "le document 2 ne dit rien du maire." in out
    # on by default in fr_v2's formatting: the refusals' openings vary
    prompts = [replace(_prompt(f"p{i}", UNANSWERABLE), language="fr") for i in range(12)]
    responses = {p.id: verdict + " Ajoutez des documents." for p in prompts}
    out = fm.format_examples(prompts, responses, set(responses), recipe=FR_V2_RECIPE)
    firsts = {r["messages"][2]["content"].split(".")[0] for r in out.rows}
    assert len(firsts) > 1 and sum(v for k, v in out.funnel.items() if k.startswith("rewrite:")) == 12


def test_answer_only_inside_a_ref_drops_the_pair() -> None:
    assert fm.answer_only_in_ref('It is there. <ref id="1">Paris is the capital</ref>', "Paris")
    assert not fm.answer_only_in_ref('It is  PARIS. <ref id="1">Paris is the capital</ref>', "paris")
    assert not fm.answer_only_in_ref("The capital of France.", "Paris")  # nowhere: not this case
    assert not fm.answer_only_in_ref('<ref id="1">Paris is the capital</ref>', "")
    prompts = [_prompt("p1", ANSWERABLE), _prompt("p1", UNANSWERABLE), _prompt("p2", ANSWERABLE)]
    responses = {
        "p1-answerable": 'The capital: <ref id="1">Paris is the capital</ref>.',
        "p1-unanswerable": "The documents do not say.",
        "p2-answerable": 'Paris. <ref id="1">Paris is the capital</ref>',
    }
    kept = {p.id for p in prompts}
    assert {r["id"] for r in fm.format_examples(prompts, responses, kept).rows} == set(kept)  # off by default
    out = fm.format_examples(
        prompts, responses, kept, recipe=replace(HOTPOTQA_CITE_RECIPE, drop_answer_only_in_ref=True)
    )
    assert [r["id"] for r in out.rows] == ["p2-answerable"]
    reasons = {d.candidate_id: d.reason for d in out.decisions}
    assert reasons["p1-answerable"] == "answer_only_in_ref" and reasons["p1-unanswerable"] == "twin_dropped"
    assert out.funnel["dropped:answer_only_in_ref"] == 1


def test_wrong_language_drops_the_pair() -> None:
    from dataclasses import replace

    assert (
        fm.response_language(
            "La réponse est Paris, la capitale. <ref id='1'>Paris is the capital</ref>", "fr"
        )
        == "fr"
    )
    assert fm.response_language('The answer is Paris. <ref id="1">Paris est la capitale</ref>', "fr") == "en"
    assert fm.response_language("Paris.", "fr") is None  # too short to tell
    assert fm.response_language("The answer is Paris.", "en") is None  # English data: nothing to tell apart
    prompts = [replace(p, language="fr") for p in (_prompt("p1", ANSWERABLE), _prompt("p1", UNANSWERABLE))]
    prompts += [replace(_prompt("p2", ANSWERABLE), language="fr")]
    responses = {
        "p1-answerable": 'The answer is Paris, the capital. <ref id="1">Paris is the capital</ref>',
        "p1-unanswerable": "Les documents ne permettent pas de répondre à cette question.",
        "p2-answerable": 'La réponse est Paris, la capitale. <ref id="1">Paris is the capital</ref>',
    }
    kept = {p.id for p in prompts}
    assert len(fm.format_examples(prompts, responses, kept).rows) == 3  # off by default
    out = fm.format_examples(
        prompts, responses, kept, recipe=replace(HOTPOTQA_CITE_RECIPE, drop_wrong_language=True)
    )
    assert [r["id"] for r in out.rows] == ["p2-answerable"]
    reasons = {d.candidate_id: (d.reason, d.detail) for d in out.decisions}
    assert reasons["p1-answerable"] == ("wrong_language", {"language": "en"})
    assert reasons["p1-unanswerable"][0] == "twin_dropped" and out.funnel["dropped:wrong_language"] == 1


def test_rewrite_refusal_is_deterministic_and_keeps_tags() -> None:
    text = 'The documents do not allow an answer. They cover <ref id="2">Lyon</ref>. Please add documents.'
    modes = set()
    for i in range(30):
        a = fm.rewrite_refusal(text, "en", 1, f"pair{i}")
        assert a == fm.rewrite_refusal(text, "en", 1, f"pair{i}")
        assert '<ref id="2">Lyon</ref>' in a[0]
        modes.add(a[1])
    assert modes == {"move", "vary", "neutral"}
    tagged_first = '<ref id="1">Paris</ref> is not it. No answer.'
    for i in range(10):
        out, mode = fm.rewrite_refusal(tagged_first, "en", 1, f"pair{i}")
        assert '<ref id="1">Paris</ref> is not it.' in out  # a sentence with a tag never moves nor goes


def test_rewrite_refusal_keeps_paragraphs_references_and_tags() -> None:
    from ragsft_assets.rag_sft.citations import parse_refs

    refusals = [
        # References style: the section stays last, byte for byte
        "The documents do not allow me to answer this question.\n\n"
        "They describe Lyon and its rivers. None of them names the mayor.\n\n"
        "Document 2 only covers the old town.\n\n"
        'References:\n<ref id="2"/>\n<ref id="4"/>',
        # inline tags in later paragraphs, a tag whose excerpt holds a sentence end
        "I cannot answer from these documents.\n"
        'The first one says <ref id="1">Lyon is big. It lies on the Rhône</ref>.\n\n'
        'Another one, <ref id="3">the Saône flows through the city</ref>, says nothing of it.',
    ]
    modes = set()
    for text in refusals:
        tags = [t.raw for t in parse_refs(text).tags]
        tail = text[text.find("References:") :] if "References:" in text else ""
        for i in range(30):
            out, mode = fm.rewrite_refusal(text, "en", 7, f"pair{i}")
            modes.add(mode)
            assert [t.raw for t in parse_refs(out).tags] == tags  # every tag byte-identical, in order
            assert [text[t.start : t.end] for t in parse_refs(text).tags] == [
                out[t.start : t.end] for t in parse_refs(out).tags
            ]
            assert out.count("\n\n") == text.count("\n\n") and out.count("\n") == text.count("\n")
            if tail:
                assert out.endswith(tail) and out.count("References:") == 1  # nothing moves after it
            if mode == "move":
                first = text.split(".", 1)[0] + "."
                body = out[: out.find("References:")] if tail else out
                assert body.rstrip().endswith(first) and not out.startswith(first)
    assert modes == {"move", "vary", "neutral"}


def test_commitment_table_on_a_ten_percent_refusal_mix() -> None:
    strict = "I cannot answer this question from the documents provided."

    def row(i: int, text: str, answerable: bool) -> dict:
        return {
            "id": f"r{i:02d}",
            "messages": [{"role": "assistant", "content": text}],
            "supporting_facts_titles": ["A"] if answerable else [],
        }

    answers = [row(i, f"Paris is the answer {i}. <ref id='1'>x y z</ref>", True) for i in range(16)]
    answers += [row(16, "The documents say Paris.", True), row(17, "The documents say Lyon.", True)]
    refusals = [row(20 + i, "The documents do not say. Sorry.", False) for i in range(6)]
    refusals += [row(30 + i, strict, False) for i in range(6)]
    table = st.commitment_table(answers + refusals, [strict], seed=3)
    assert table == st.commitment_table(list(reversed(answers + refusals)), [strict], seed=3)  # order-free
    assert (table["mix_rows"], table["mix_refusals"]) == (20, 2)  # 18 answers + 10% refusals
    assert table["refusal_share"] == 0.1 and table["tokenization"] == "lower-cased whitespace words"
    assert table["most_frequent_first_sentence"] in {"The documents do not say.", strict}
    drawn_strict = table["strict_phrase_opening_share"]
    assert drawn_strict in {0.0, 0.5, 1.0}
    # "the documents" opens 2 answers too: after two words a non-strict refusal is not yet given away
    everyone = st.commitment_table(refusals + answers, [strict], refusal_share=12 / 30)
    assert everyone["mix_refusals"] == 12 and everyone["strict_phrase_opening_share"] == 0.5
    assert everyone["commitment_1"] == round((6 * 6 / 8 + 6 * 1.0) / 12, 4)  # "the": 6 of 8; "i": 6 of 6
    lines = "\n".join(st.card_section({"commitment": table}, "c"))
    assert "refusal commitment (on a mix resampled to 10% refusals)" in lines
    # beside the card's own figures ("Commitment after the first two words	0.93	0.54	0.35")
    assert f"| commitment after two words | {table['commitment_2']} | 0.93 | 0.54 | 0.35 |" in lines


def test_statistics() -> None:
    def row(assistant: str, gold: list[str], n: int = 3) -> dict:
        msgs = [{"role": "system", "content": "s s"}, {"role": "user", "content": "q"}]
        return {
            "messages": [*msgs, {"role": "assistant", "content": assistant}],
            "supporting_facts_titles": gold,
            "chunks_total": n,
        }

    rows = [
        row('The answer is X <ref id="1">a ... b</ref> <ref id="2">c</ref>.', ["A"]),
        row('The documents do not say <ref id="1">a</ref>.', []),
        row("The documents do not allow an answer.", [], 5),
        row("I cannot answer.", []),
    ]
    s = st.sft_statistics(rows, st.whitespace_counter, "whitespace")
    assert (s["rows"], s["answerable"], s["unanswerable"]) == (4, 1, 3)
    assert s["documents_per_prompt"]["max"] == 5
    assert s["ref_tags_per_answerable"]["mean"] == 2
    assert s["elided_excerpt_share"] == 0.25
    assert s["refusals_that_quote_share"] == pytest.approx(1 / 3, abs=1e-4)
    # first word "the": 2 refusals of 3 openings; "i": 1 of 1 -> mean(2/3, 2/3, 1)
    assert s["refusal_commitment_1"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3, abs=1e-4)
    assert s["refusal_commitment_2"] == 1.0  # "the documents" / "i cannot" never open an answer
    assert s["tokenizer"] == "whitespace"
