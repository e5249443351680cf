"""The Luciole RAG card (000: hotpotqa_cite, trust_align, hotpotqa_fr_abstracts_v2) against the code.

Each test quotes the card's words it checks. The card itself is kept word for word in
``data/cards/`` so that a sentence the code quotes as the card's can be looked up in it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets.prompts import load_prompt
from ragsft_assets.rag_sft import examples as ex
from ragsft_assets.rag_sft import formatting as fm
from ragsft_assets.rag_sft import multi_answer as ma
from ragsft_assets.rag_sft import recipes as rs
from ragsft_assets.rag_sft import statistics as st
from ragsft_assets.rag_sft import verdicts as vd
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.test_rag_sft_prompts import make_record

CARDS = Path(__file__).parent / "data" / "cards"
CARD_000 = CARDS / "000_f882858e4056aab6.txt"


# The columns of a rag_sft table that a release reads (the tests' minimal rows; the asset has more).
RAG_SFT_ROWS = pa.schema(
    [
        ("id", pa.string()),
        ("pair_id", pa.string()),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("supporting_facts_titles", pa.list_(pa.string())),
        ("chunks_total", pa.int32()),
        ("split", pa.string()),
    ]
)


def card_text() -> str:
    return CARD_000.read_text(encoding="utf-8")


def _ws(text: str) -> str:
    return " ".join(text.split())


def in_card(sentence: str) -> bool:
    """Whether ``sentence`` is in the card, word for word (whitespace runs compared as one space)."""
    return _ws(sentence) in _ws(card_text())


# -- 1. the citation rule, word for word -------------------------------------------------------

CITATION_RULE = (
    'When quoting from the context, wrap each excerpt inline with <ref id="N">excerpt</ref>, where N is '
    "the number of the cited document (the N of its [Source N] marker) and excerpt is copied verbatim "
    "from that document. From a table, quote the row you use as it is written, e.g. "
    '<ref id="N">| Revenue | 1,234 | 1,100 |</ref>, and give any value you compute from it after the tag.'
)


def test_the_citation_rule_is_the_cards_word_for_word() -> None:
    """The card: "The citation rule of the system prompt reads:" and then the rule, tags bare."""
    assert in_card("The citation rule of the system prompt reads: " + CITATION_RULE)
    template = load_prompt("rag_rule_cite_inline", "en").text
    assert template.strip() == CITATION_RULE  # the rule alone: nothing appended, no backticks
    assert "`" not in template and "`" not in load_prompt("rag_rule_cite_inline", "fr").text
    assert " ".join(ex.CARD_CITATION_SENTENCES) == CITATION_RULE
    for name in sorted(rs.RECIPES):
        recipe = rs.RECIPES[name]
        out = ex.build_prompts([make_record(i) for i in range(30)], seed=4, lang="en", recipe=recipe)
        inline = [p for p in out.prompts if p.citation_style == "inline"]
        assert inline and all(CITATION_RULE in p.system for p in inline)
        assert not any("Cite only the documents you rely on" in p.system for p in out.prompts)
        assert not any("`<ref" in p.system for p in out.prompts)
    parts = ex.prompt_parts("en")
    assert "rag_rule_cite_inline.en" not in " ".join(parts["ours"])  # all of it is the card's


# -- 4. the card's refusal-opening table --------------------------------------------------------


def test_the_commitment_table_prints_the_cards_own_figures() -> None:
    """The card's "How refusals start": "Most frequent first sentence	89.5%	4.6%	3.5%",
    "Opening with the strict refusal phrase	95.8%	0.1%	0%", "Commitment after the first word
    0.89	0.39	0.12", "Commitment after the first two words	0.93	0.54	0.35"."""
    for row in (
        "Most frequent first sentence\t89.5%\t4.6%\t3.5%",
        "Opening with the strict refusal phrase\t95.8%\t0.1%\t0%",
        "Commitment after the first word\t0.89\t0.39\t0.12",
        "Commitment after the first two words\t0.93\t0.54\t0.35",
    ):
        assert row in card_text()
    assert in_card("hotpotqa_fr_abstracts this config hotpotqa_cite (English)")
    assert st.CARD_COMMITMENT["most_frequent_first_sentence_share"] == {
        "hotpotqa_fr_abstracts": "89.5%",
        "hotpotqa_fr_abstracts_v2": "4.6%",
        "hotpotqa_cite": "3.5%",
    }
    com = {
        "mix_rows": 20,
        "mix_refusals": 2,
        "most_frequent_first_sentence": "Les documents ne disent rien.",
        "most_frequent_first_sentence_share": 0.5,
        "strict_phrase_opening_share": 0.0,
        "commitment_1": 0.4,
        "commitment_2": 0.55,
        "tokenization": "lower-cased whitespace words",
    }
    lines = "\n".join(st.card_section({"commitment": com}, "hotpotqa_fr_abstracts_v2"))
    assert (
        "| measure | this build | the card: hotpotqa_fr_abstracts | the card: hotpotqa_fr_abstracts_v2 "
        "| the card: hotpotqa_cite (English) |"
    ) in lines
    assert "|   its share of refusals | 50.0% | 89.5% | 4.6% | 3.5% |" in lines
    assert "| refusals opening with the strict phrase | 0.0% | 95.8% | 0.1% | 0% |" in lines
    assert "| commitment after one word | 0.4 | 0.89 | 0.39 | 0.12 |" in lines
    assert "| commitment after two words | 0.55 | 0.93 | 0.54 | 0.35 |" in lines
    assert "not recorded" not in lines


# -- 5. fr_v2's rewrite: only the verdict sentence ---------------------------------------------


def test_the_fr_v2_rewrite_keeps_the_body_of_the_refusal() -> None:
    """The card: "The body of the refusal and its <ref> tags are the generator's." and "the verdict
    sentence is moved to the end, varied, or the response opens with a phrase"."""
    assert in_card("The body of the refusal and its <ref> tags are the generator's.")
    assert in_card("the verdict sentence is moved to the end, varied, or the response opens with a phrase")
    body = "Le document sur Lyon parle de la ville mais ne mentionne pas son maire."
    verdict = "Les documents ne permettent pas de répondre à cette question."
    assert not fm.is_verdict_sentence(body) and fm.is_verdict_sentence(verdict)
    modes = set()
    for text in (f"{body} {verdict}", f"{verdict} {body}", f"{body} Ajoutez des documents."):
        for i in range(40):
            out, mode = fm.rewrite_refusal(text, "fr", 3, f"pair{i}")
            modes.add(mode)
            assert body in out or fm._after_opener(body) in out  # the body sentence is never replaced
            if mode == "move":
                assert out.endswith(verdict) and body in out
    assert {"move", "vary", "neutral"} <= modes
    # a refusal whose only negated sentence is the body: nothing to move or vary
    only_body = f"{body} Ajoutez des documents."
    assert all(
        fm.rewrite_refusal(only_body, "fr", 3, f"pair{i}")[1] in {"neutral", "none"} for i in range(40)
    )


# -- 6. each judge's thinking mode, per config --------------------------------------------------


class _Recorder(ScriptedChatModel):
    def __init__(self, responder) -> None:  # noqa: ANN001
        super().__init__(responder)
        self.seen: list[tuple[str, object]] = []

    def chat(self, conversations, params, **kwargs):  # noqa: ANN001, ANN003, ANN201
        self.seen += [(c[0]["content"], params) for c in conversations]
        return super().chat(conversations, params, **kwargs)


def _answer(p: ex.RagPrompt) -> str:
    if p.kind == ex.UNANSWERABLE:
        return "The documents provided do not allow me to answer."
    n, m = (p.titles.index(t) + 1 for t in p.gold_titles[:2])
    a, b = (" ".join(p.paragraphs[k - 1].split()[:4]) for k in (n, m))
    return f'The answer is {p.answer}. <ref id="{n}">{a}</ref> <ref id="{m}">{b}</ref>'


@pytest.mark.parametrize(
    ("name", "thinking"),
    [("hotpotqa_cite", False), ("hotpotqa_fr_abstracts_v2", False), ("trust_align", True)],
)
def test_each_judge_runs_in_the_cards_thinking_mode(name: str, thinking: bool) -> None:
    """trust_align: "Qwen3.8-27B as judge (thinking mode)", the factual and the refusal judge alike;
    hotpotqa_cite and fr_v2: "Mistral-Small-3.2-24B-Instruct-2506 as judge", no thinking mode named."""
    assert in_card("4. Verification. Qwen3.8-27B as judge (thinking mode), plus deterministic checks.")
    assert in_card(
        "4. Verification. Mistral-Small-3.2-24B-Instruct-2506 as judge, plus deterministic checks."
    )
    recipe = rs.RECIPES[name]
    assert recipe.judges_thinking is thinking and recipe.factual_judge_thinking is thinking
    build = replace(rs.HOTPOTQA_CITE_RECIPE, twin_share=0.5, references_share=0.0)
    prompts = ex.build_prompts([make_record(i) for i in range(12)], seed=5, lang="en", recipe=build).prompts
    responses = [{"id": p.id, "response": _answer(p), "status": "ok", "cache_key": "k"} for p in prompts]
    model = _Recorder(lambda m: json.dumps({"score": 5, "refuses": True}))
    vd.judge_examples(prompts, responses, model, recipe=replace(recipe, min_quote_words=2))
    refusal = [params for text, params in model.seen if "Decide whether its reply declines" in text]
    factual = [params for text, params in model.seen if "Decide whether its reply declines" not in text]
    assert refusal and factual
    assert {p.enable_thinking for p in refusal} == {thinking}
    assert {p.enable_thinking for p in factual} == {thinking}
    if thinking:
        assert {p.thinking_max_tokens for p in refusal} == {recipe.judges_thinking_max_tokens}


# -- 11. hotpotqa_cite has a single split ---------------------------------------------------------


def test_hotpotqa_cite_reads_the_training_questions_only() -> None:
    """The card: "There is a single split" and "All 90,447 questions of the HotpotQA training set"."""
    assert in_card("There is a single split: held-out evaluation is meant to be done on separate benchmarks")
    assert in_card("1. Source. All 90,447 questions of the HotpotQA training set")
    from ragsft_assets.defs.rag_sft.assets import SNAPSHOT_INPUTS, question_input

    recipe = rs.resolve(None, {}, "en", "20240916.en")
    assert recipe.name == "hotpotqa_cite"
    assert question_input(recipe, {}, "multihop_questions", SNAPSHOT_INPUTS)[2] == ("train",)
    fr = rs.resolve(None, {}, "fr", "20240916.fr")
    assert question_input(fr, {}, "multihop_questions", SNAPSHOT_INPUTS)[1:] == (
        "multihop_filtered_qwen_v2",
        ("train",),
    )


# -- 12. trust_align's ellipses ---------------------------------------------------------------------


def test_trust_align_splits_only_the_ellipses_the_source_does_not_hold() -> None:
    """The card: "An excerpt shortened with an ellipsis (A ... B) was split into consecutive tags
    <ref id="N">A</ref><ref id="N">B</ref>, each verbatim; the only ellipses left (9 examples) are
    part of the source text."""
    assert in_card(
        'was split into consecutive tags <ref id="N">A</ref><ref id="N">B</ref>, each verbatim; the only '
        "ellipses left (9 examples) are part of the source text."
    )
    doc = "The song goes: wait for it ... and then the chorus. Later the band split up in 1999."
    own = '<ref id="1">wait for it ... and then the chorus</ref>'
    assert ma.split_elided_tags(f"It goes {own}.", [doc]) == (f"It goes {own}.", 0)  # the source's own
    elided = '<ref id="1">The song goes ... the band split up in 1999</ref>'
    assert ma.split_elided_tags(elided, [doc]) == (
        '<ref id="1">The song goes</ref><ref id="1">the band split up in 1999</ref>',
        1,
    )
    # both in one excerpt: the source's ellipsis stays, the elision splits
    mixed = '<ref id="1">wait for it ... and then the chorus. ... split up in 1999</ref>'
    assert ma.split_elided_tags(mixed, [doc]) == (
        '<ref id="1">wait for it ... and then the chorus.</ref><ref id="1">split up in 1999</ref>',
        1,
    )


# -- 15. every recipe field says where its value comes from ----------------------------------------

_ORIGIN = re.compile(r"^(the card|ours|derived):")
_KEYWORD = re.compile(r"^\s+(\w+)=")


def _recipe_comments() -> dict[str, dict[str, str]]:
    """``{recipe variable: {field: its comment}}`` from recipes.py: the comment lines above a field
    and the comment at its line's end, joined."""
    source = Path(rs.__file__).read_text(encoding="utf-8").splitlines()
    out: dict[str, dict[str, str]] = {}
    current = None
    pending: list[str] = []
    for line in source:
        head = re.match(r"^(\w+_RECIPE) = ", line)
        if head:
            current, pending = head.group(1), []
            out[current] = {}
            continue
        if current is None:
            continue
        if line == ")":
            current = None
            continue
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        kw = _KEYWORD.match(line)
        if kw and kw.group(1) != "name":
            tail = line.split("  # ", 1)[1] if "  # " in line else ""
            out[current][kw.group(1)] = " ".join([*pending, tail]).strip()
        pending = []
    return out


def test_every_recipe_field_says_the_card_ours_or_derived() -> None:
    """Every field of the three recipes has a comment: "the card:" with its words, "ours:" with the
    reason, or "derived:" with the arithmetic; and every quoted sentence is the card's."""
    import dataclasses

    comments = _recipe_comments()
    assert set(comments) == {"HOTPOTQA_CITE_RECIPE", "FR_V2_RECIPE", "TRUST_ALIGN_RECIPE"}
    fields = {f.name for f in dataclasses.fields(rs.RagSftRecipe)} - {"name"}
    for recipe, by_field in comments.items():
        assert set(by_field) == fields, (recipe, sorted(fields - set(by_field)))
        for name, comment in by_field.items():
            assert _ORIGIN.match(comment), f"{recipe}.{name}: {comment!r}"
            for quoted in re.findall(r'"([^"]+)"', comment):
                assert in_card(quoted), f"{recipe}.{name} quotes {quoted!r}, which the card does not hold"
            if comment.startswith("derived:"):
                assert re.search(r"\d", comment), f"{recipe}.{name}: a derived value shows its arithmetic"


# -- 3. three fields ------------------------------------------------------------------------------


def test_the_rag_configs_ship_the_cards_three_fields() -> None:
    """The card: "Each row has three fields" (messages, supporting_facts_titles, chunks_total);
    trust_align: "Same three fields as hotpotqa_cite"; fr_v2: "Same three fields and same document
    layout as hotpotqa_cite"."""
    from ragsft_assets.defs.rag_sft.qa import TRUST_ALIGN_CONFIG
    from ragsft_assets.release import layout

    assert in_card("Each row has three fields:")
    assert in_card(
        "Same three fields as hotpotqa_cite: messages (system, user, assistant), supporting_facts_titles"
    )
    fields = ("messages", "supporting_facts_titles", "chunks_total")
    assert fields == layout.RAG_SFT_COLUMNS
    assert layout.CONFIGS_BY_NAME["hotpotqa_cite"].columns == fields
    assert TRUST_ALIGN_CONFIG.columns == fields
    renamed = {c.asset: c for c in layout.release_configs({"hotpotqa_cite": "hotpotqa_fr_abstracts_v2"})}
    assert renamed["rag_sft"].columns == fields


def test_a_rag_release_ships_three_fields_and_keeps_its_ids_in_provenance(tmp_path: Path) -> None:
    """The rows' ids and twins go to provenance/<config>/ids.parquet, row by row; the lineage (what
    `ragsft explain` reads) still has every id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragsft_assets.release import build, layout
    from ragsft_assets.resources.store import ArtifactStore

    store = ArtifactStore(home=str(tmp_path))
    rows = [
        {
            "id": f"e{k}",
            "pair_id": f"p{k // 2}",
            "messages": [{"role": "system", "content": "[Source 1]\n* filename: T\n\n"}],
            "supporting_facts_titles": ["T"] if k % 2 == 0 else [],
            "chunks_total": 1,
            "split": "train",
        }
        for k in range(4)
    ]
    store.write(pa.Table.from_pylist(rows, RAG_SFT_ROWS), "x.en", "rag_sft")
    target = tmp_path / "releases" / "x.en"
    build.build_release(store.root, "x.en", target, configs=[layout.CONFIGS_BY_NAME["hotpotqa_cite"]])
    data = pq.read_table(target / layout.data_file("hotpotqa_cite", "train"))
    assert data.column_names == ["messages", "supporting_facts_titles", "chunks_total"]
    ids = pq.read_table(target / build.ids_path("hotpotqa_cite")).to_pylist()
    assert [(r["split"], r["row"], r["id"], r["pair_id"]) for r in ids] == [
        ("train", k, f"e{k}", f"p{k // 2}") for k in range(4)
    ]
    lineage = pq.read_table(target / build.lineage_path("hotpotqa_cite"))
    assert sorted(lineage["id"].to_pylist()) == [f"e{k}" for k in range(4)]
    assert lineage["twin_pair_id"].to_pylist() == ["p0", "p0", "p1", "p1"]


# -- 10. the sources and licenses of a QA release ---------------------------------------------------


def test_qa_releases_name_the_cards_sources_and_licenses() -> None:
    """trust_align's "Source data and licenses": Trust-Align "data distributed under Apache 2.0",
    ASQA "distributed under Apache 2.0", QAMPARI "distributed under CC0 1.0"; hotpotqa_cite's:
    HotpotQA "distributed under CC BY-SA 4.0"; not the Wikipedia abstracts' license."""
    from ragsft_assets.rag_sft import licenses

    for config in ("hotpotqa_cite", "trust_align"):
        for line in [*licenses.SOURCES[config], licenses.CONCLUSIONS[config]]:
            assert in_card(line), line
    ta = "\n".join(licenses.license_lines("trust_align"))
    for needle in (
        "data distributed under Apache 2.0",
        "ASQA: Factoid Questions Meet Long-Form Answers, distributed under Apache 2.0.",
        "QAMPARI: A Benchmark for Open-domain Questions with Many Answers, distributed under CC0 1.0.",
    ):
        assert needle in ta
    assert "distributed under CC BY-SA 4.0." in "\n".join(licenses.license_lines("hotpotqa_cite"))
    with pytest.raises(KeyError, match="names no sources"):
        licenses.license_lines("hotpotqa_fr_abstracts_v2")


def test_ids_in_provenance_follow_the_data_rows_when_the_upstream_is_not_sorted(tmp_path: Path) -> None:
    """The data file is written in release order (by id); ids.parquet's `row` must name that row,
    not the upstream's file position (they differ when the upstream is not sorted by id)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragsft_assets.release import build, layout
    from ragsft_assets.resources.store import ArtifactStore

    store = ArtifactStore(home=str(tmp_path))
    order = [3, 1, 0, 2]  # upstream file order, not by id
    rows = [
        {
            "id": f"e{k}",
            "pair_id": f"p{k}",
            "messages": [{"role": "user", "content": f"q{k}"}],
            "supporting_facts_titles": [f"T{k}"],
            "chunks_total": k,  # tells the data rows apart
            "split": "train",
        }
        for k in order
    ]
    store.write(pa.Table.from_pylist(rows), "x.en", "rag_sft")
    target = tmp_path / "releases" / "x.en"
    build.build_release(store.root, "x.en", target, configs=[layout.CONFIGS_BY_NAME["hotpotqa_cite"]])
    data = pq.read_table(target / layout.data_file("hotpotqa_cite", "train")).to_pylist()
    ids = pq.read_table(target / build.ids_path("hotpotqa_cite")).to_pylist()
    assert [d["chunks_total"] for d in data] == [0, 1, 2, 3]
    for entry in ids:
        assert entry["id"] == f"e{data[entry['row']]['chunks_total']}", entry
