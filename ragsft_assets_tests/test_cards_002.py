"""The Synth-Long-SFT32K card (002) against the code: the recipes' comments and the syntactic questions.

Each test quotes the card's words it checks; the card is kept word for word in ``data/cards/``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ragsft_assets.long_context import recipes as lc
from ragsft_assets.long_context.syntactic import QUESTIONS, TYPES, generate

CARD_002 = Path(__file__).parent / "data" / "cards" / "002_f811024c0714668e.txt"
_ORIGIN = re.compile(r"^(the card|ours|derived):")


def _ws(text: str) -> str:
    return " ".join(text.split())


def in_card(sentence: str) -> bool:
    """Whether ``sentence`` is in the card, word for word (whitespace runs compared as one space)."""
    text = CARD_002.read_text(encoding="utf-8").replace("**", "")  # markdown bold
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a markdown link reads as its text
    return _ws(sentence) in _ws(text)


def _comments() -> tuple[dict[str, str], dict[str, str]]:
    """``({field of _CARD: its comment}, {card config: its comment})`` from recipes.py: the comment
    lines above an entry and the comment at its line's end, joined."""
    lines = Path(lc.__file__).read_text(encoding="utf-8").splitlines()
    fields: dict[str, str] = {}
    configs: dict[str, str] = {}
    block = None
    pending: list[str] = []
    for line in lines:
        if line.startswith("_CARD = "):
            block, pending = "card", []
            continue
        if line.startswith("CARD_RECIPES = {"):
            block, pending = "configs", []
            continue
        if block and line in (")", "}"):
            block = None
            continue
        if block is None:
            continue
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        tail = line.split("  # ", 1)[1] if "  # " in line else ""
        if block == "card" and (m := re.match(r"^    (\w+)=", line)):
            if m.group(1) != "name":
                fields[m.group(1)] = " ".join([*pending, tail]).strip()
            pending = []
        elif block == "configs" and (m := re.match(r'^    "(\w+)": ', line)):
            configs[m.group(1)] = " ".join([*pending, tail]).strip()
            pending = []
    return fields, configs


def test_every_recipe_value_says_the_card_ours_or_derived() -> None:
    """Every field of the shared recipe, and every card config, says "the card:" with its words,
    "ours:" with the reason or "derived:" with the reasoning; every quoted sentence is the card's
    (e.g. "The maximal sequence length of the examples is 32,768.")."""
    assert in_card("The maximal sequence length of the examples is 32,768.")
    fields, configs = _comments()
    want = {f.name for f in dataclasses.fields(lc.LongContextRecipe)} - {"name"}
    assert set(fields) == want, sorted(want - set(fields))
    assert set(configs) == set(lc.CARD_RECIPES)
    for where, comment in [*fields.items(), *configs.items()]:
        assert _ORIGIN.match(comment), f"{where}: {comment!r}"
        for quoted in re.findall(r'"([^"]+)"', comment):
            assert in_card(quoted), f"{where} quotes {quoted!r}, which the card does not hold"
    assert lc.CARD_RECIPES["synthetic_convqa_raft"].budget_tokens == 32_768


def test_the_syntactic_questions_are_the_cards_per_type() -> None:
    """The card: "(1) Does the word `X` occur in the passage? (2) How often does the word `X` occur in
    the passage? (3) Does the phrase `X` occur in the passage? (4) How often does the phrase `X` occur
    in the passage? and (5) Where does the word `X` occur in the passage?" """
    for k, qtype in enumerate(TYPES, start=1):
        assert in_card(f"({k}) {QUESTIONS[qtype].format(x='X')}"), qtype
    qas, _ = generate([("p", "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu.")], seed=3)
    for q in qas:
        assert q.question == QUESTIONS[q.type].format(x=q.target)
    # "Phrases in this context are 4-grams"
    assert in_card("Phrases in this context are 4-grams")
    assert all(len(q.target.split()) == 4 for q in qas if q.type.startswith("phrase"))
