"""The Luciole RAG card's statistics (recipe_statistics), the card section, and the tokenizer choice."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragsft_assets.rag_sft import statistics as st
from ragsft_assets.rag_sft.examples import ANSWERABLE, UNANSWERABLE, RagPrompt
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE

DOCS = {
    "Gold A": "Alice was born in Lyon in 1950.",
    "Gold B": "Lyon is a city on the Rhône river.",
    "Other": "Paris is the capital of France.",
}


def _prompt(
    pid: str, kind: str, titles: list[str], *, twin: str = "", rule: str = "generic", style: str = "inline"
) -> RagPrompt:
    return RagPrompt(
        id=f"{pid}-{kind}",
        pair_id=pid,
        question_id=pid,
        kind=kind,
        twin_kind=twin,
        split="train",
        language="en",
        question="Where?",
        answer="Lyon",
        titles=titles,
        paragraphs=[DOCS[t] for t in titles],
        gold_titles=["Gold A", "Gold B"] if kind == ANSWERABLE else [],
        removed_titles=[],
        citation_style=style,
        refusal_rule=rule,
        refusal_phrase="",
        system="S",
        user="Where?",
        chunks_total=len(titles),
        distractors_total=1,
        distractors_dropped=0,
    )


def _row(p: RagPrompt, text: str) -> dict:
    return {
        "id": p.id,
        "pair_id": p.pair_id,
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": p.user},
            {"role": "assistant", "content": text},
        ],
        "supporting_facts_titles": list(p.gold_titles),
        "chunks_total": p.chunks_total,
    }


@pytest.fixture
def built() -> tuple[list[RagPrompt], list[dict]]:
    both = ["Gold A", "Gold B", "Other"]
    p1a = _prompt("p1", ANSWERABLE, both)
    p1u = _prompt("p1", UNANSWERABLE, ["Other", "Gold B", "Other"][:2], twin="one")  # Gold B left
    p2a = _prompt("p2", ANSWERABLE, both, rule="strict")
    p2u = _prompt("p2", UNANSWERABLE, ["Other"], twin="both", rule="strict")  # no gold left
    p3a = _prompt("p3", ANSWERABLE, both, style="reference")
    p4a = _prompt("p4", ANSWERABLE, both)  # generated, not kept
    prompts = [p1a, p1u, p2a, p2u, p3a, p4a]
    rows = [
        _row(p1a, 'Lyon. <ref id="1">Alice was born in Lyon</ref> and <ref id="2">Lyon is a city</ref>.'),
        _row(p1u, "[Source 2] describes Lyon only. The documents do not say where Alice was born."),
        _row(p2a, 'Lyon, as Source 1 says. <ref id="1">born in Lyon in 1950</ref> <ref id="1">Lyon</ref>'),
        _row(p2u, "The documents do not say."),
        _row(p3a, 'Lyon.\n\nReferences:\n<ref id="1"/>\n<ref id="2"/>'),
    ]
    return prompts, rows


def test_recipe_statistics(built) -> None:
    prompts, rows = built
    s = st.recipe_statistics(rows, prompts, HOTPOTQA_CITE_RECIPE)
    assert s["refusals_gold_left"] == {"none": 1, "one": 1, "none_share": 0.5, "one_share": 0.5}
    assert s["references_share"] == round(1 / 5, 4)
    assert s["strict_rule"]["strict"] == {"rows": 2, "answerable": 1, "unanswerable": 1, "refusal_share": 0.5}
    assert s["strict_rule"]["generic"] == {
        "rows": 3,
        "answerable": 2,
        "unanswerable": 1,
        "refusal_share": round(1 / 3, 4),
    }
    # p1a and p3a cite documents 1 and 2; p2a cites document 1 twice
    assert s["answers_citing_two_documents"] == round(2 / 3, 4)
    assert s["answers_naming_source"] == round(1 / 3, 4) and s["refusals_naming_source"] == 0.5
    # p2a's one-word quote "Lyon" is too_short under the stricter rule: flagged, the row is kept
    assert s["quote_flags"] == {"mode": "flag", "kept_rows_flagged": 1, "partial_word": 0, "too_short": 1}
    drop = st.recipe_statistics(
        rows, prompts, replace(HOTPOTQA_CITE_RECIPE, min_quote_words=1, citation_check="drop")
    )
    assert drop["quote_flags"]["kept_rows_flagged"] == 0 and drop["quote_flags"]["mode"] == "drop"


def test_card_section_shows_the_recipe_the_quoted_prompt_and_the_card_statistics(built) -> None:
    prompts, rows = built
    stats = st.chain_statistics(
        rows,
        {},
        {p.id: p.question_id for p in prompts},
        st.whitespace_counter,
        "whitespace",
        prompts=prompts,
        recipe=replace(HOTPOTQA_CITE_RECIPE, twin_share=0.3),
    )
    card = "\n".join(st.card_section(stats, "hotpotqa_cite"))
    assert "Recipe `hotpotqa_cite`, differing from the card in: `twin_share` 0.3 (card: 0.22)." in card
    assert (
        "Quoted word for word from the card (OpenRAG's inference prompt), in `rag_rule_cite_inline.en`"
        in card
    )
    assert "> When quoting from the context, wrap each excerpt inline with" in card
    assert "Ours (not quoted by the card): `rag_system.en`, `rag_rule_cite_references.en`," in card
    assert "`rag_rule_cite_inline.en` (its other sentences)" not in card
    assert "> From a table, quote the row you use as it is written" in card
    assert (
        "| refusals with no gold left / one gold left (share of twin refusals) | 1 / 1 (0.5 / 0.5) |" in card
    )
    assert "| answers citing exactly 2 distinct documents | 0.6667 |" in card
    assert "flagged in the ledger, kept) | 1 (0 / 1) |" in card
    assert "tokenizer: whitespace" in card


def test_token_counter_from_a_local_tokenizer_folder(tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"[UNK]": 0, "lyon": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    folder = tmp_path / "luciole-tokenizer"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    count, name = st.token_counter(str(folder))
    assert count(["lyon is big.", "a"]) == [4, 1]  # "." is a token of its own: not whitespace words
    assert name.startswith("luciole-tokenizer (tokenizers")
    assert st.token_counter("whitespace")[1] == "whitespace"
    with pytest.raises(ValueError, match="not 'embedded', 'whitespace' nor a folder"):
        st.token_counter(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no tokenizer.json and transformers cannot load it"):
        st.token_counter(str(empty))
