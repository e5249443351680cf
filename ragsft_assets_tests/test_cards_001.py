"""The HotpotQA-fr card (001: default, filtered, filtered_qwen, filtered_qwen_v2, corpus configs)
against the code.

Each test quotes the card's words it checks. The card is kept word for word in ``data/cards/``.
The schema of the released configs built with the oracle double is checked in
``test_pipeline_e2e.py::test_hotpotqa_fr_configs_have_the_cards_schema`` (it shares that module's
full run).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from ragsft_assets.multihop import filter_configs as fc
from ragsft_assets.multihop import recipes as mh
from ragsft_assets.multihop import train_checks as tc
from ragsft_assets.multihop.funnel import CARD_FUNNEL, card_rows
from ragsft_assets.prompts import load_prompt
from ragsft_assets.release import layout
from ragsft_assets_tests.llm_double import ScriptedChatModel

CARD_001 = Path(__file__).parent / "data" / "cards" / "001_be61933c31c90ff5.txt"


def _ws(text: str) -> str:
    return " ".join(text.split())


def in_card(sentence: str) -> bool:
    """Whether ``sentence`` is in the card, word for word (whitespace runs compared as one space)."""
    return _ws(sentence) in _ws(CARD_001.read_text(encoding="utf-8"))


def card_number(text: str) -> int:
    """A number as the card writes it ("65 565") as an int."""
    return int(text.replace(" ", ""))


# -- 2. the key is `_id`, the fields in the card's order ------------------------------------------


def test_hotpotqa_fr_configs_ship_the_cards_schema_names() -> None:
    """The card's Schéma: "_id string identifiant hexadécimal de 24 caractères", then question,
    answer, supporting_facts, context, type, level. The assets keep `id`; the release renames it."""
    assert in_card("Champ Type Description _id string identifiant hexadécimal de 24 caractères")
    schema = re.findall(r"^(\w+)\t", CARD_001.read_text(encoding="utf-8").split("Schéma", 1)[1].split(
        "Les documents sont répartis", 1)[0], re.M)  # fmt: skip
    assert schema == ["Champ", "_id", "question", "answer", "supporting_facts", "context", "type", "level"]
    for name in ("default", "filtered", "filtered_qwen", "filtered_qwen_v2"):
        cfg = layout.CONFIGS_BY_NAME[name]
        assert [cfg.published_name(c) for c in cfg.columns] == schema[1:], name
    # the corpus keeps "id string 24 premiers caractères hexadécimaux du SHA-256 du titre"
    assert in_card("id string 24 premiers caractères hexadécimaux du SHA-256 du titre")
    assert layout.CONFIGS_BY_NAME["corpus"].renames == ()


# -- 13. filtered_qwen_v2's train-only steps ------------------------------------------------------

CARD_V2_TABLE = (
    "Questions de filtered_qwen 91 861",
    "Écartées par pont 33 736",
    "Écartées par langue 8 377",
    "Sans verdict (échec du juge) 28",
    "Écartées par le score de publiabilité (train) 17 197",
    "Écartées par le contrôle des descripteurs (train) 1 512",
    "Sans verdict du contrôle des descripteurs (train) 46",
    "Retenues 30 965",
)


def test_the_cards_v2_table_adds_up_and_the_recipe_runs_both_train_steps() -> None:
    """The card's v2 table, row by row, adds up; its train split ("train 29 080") is what the two
    judges leave in train less the two train-only steps."""
    assert all(in_card(row) for row in CARD_V2_TABLE)
    n = [card_number(re.search(r"(\d[\d ]*)$", row).group(1)) for row in CARD_V2_TABLE]
    assert n[0] - sum(n[1:7]) == n[7]  # 91,861 - ... = 30,965
    assert in_card("train 29 080") and in_card("validation 929") and in_card("test 956")
    assert n[7] == 29_080 + 929 + 956
    r = mh.RECIPES["filtered_qwen_v2"]
    assert r.filters == ("bridge_judge", "language_judge", "publishability_score", "descriptor_check")
    assert r.train_only_splits == ("train",) and r.publishability_min_score == 4


def _item(i: str, descriptor: str = "le fondateur") -> tc.TrainItem:
    return tc.TrainItem(i, f"Question {i} ?", "1901", "A", "[0] a.", "B", "[0] b.", descriptor)


def test_publishability_score_keeps_from_the_threshold_and_counts_no_verdict() -> None:
    """ "Écartées par le score de publiabilité (train) 17 197": scored at temperature 0 without
    thinking, as the card's judges ("raisonnement désactivé (enable_thinking = false), à
    température 0"), an analysis first ("Le prompt fait écrire au juge une analyse courte avant son
    verdict"); a reply that is no score is no verdict, dropped apart."""
    assert in_card("raisonnement désactivé (enable_thinking = false), à température 0")
    assert in_card("Le prompt fait écrire au juge une analyse courte avant son verdict.")
    replies = {"q1": {"analysis": "ok", "publishability": 5}, "q2": {"analysis": "bof", "publishability": 3}}
    replies["q3"] = {"analysis": "limite", "publishability": 4}

    def responder(messages):
        qid = re.search(r"Question (\w+) \?", messages[-1]["content"]).group(1)
        return orjson.dumps(replies[qid]).decode() if qid in replies else "pas de note"

    model = ScriptedChatModel(responder)
    template = load_prompt(tc.PUBLISHABILITY_TASK, "fr")
    table = tc.run_publishability([_item("q4"), _item("q2"), _item("q1"), _item("q3")], model, template, 4)
    got = {r["id"]: (r["verdict"], r["score"]) for r in table.to_pylist()}
    assert got == {
        "q1": ("kept", 5),
        "q2": (tc.BELOW_THRESHOLD, 3),
        "q3": ("kept", 4),
        "q4": (tc.UNREADABLE, None),
    }
    assert table["id"].to_pylist() == ["q1", "q2", "q3", "q4"]  # sorted: bytes do not follow input order
    assert all(kw == {"enable_thinking": False} for kw in model.template_kwargs)
    assert '"analysis"' in template.text and template.text.index("analyse") < template.text.index("note")
    # a stricter recipe drops more: the threshold is the recipe's
    strict = tc.run_publishability([_item("q3")], ScriptedChatModel(responder), template, 5)
    assert strict["verdict"].to_pylist() == [tc.BELOW_THRESHOLD]
    assert tc.score_verdict('{"analysis": "x", "publishability": true}', 4)[0] == tc.UNREADABLE
    assert tc.score_verdict('{"analysis": "x", "publishability": 9}', 4)[0] == tc.UNREADABLE


def test_descriptor_check_reads_the_bridge_judges_descriptor() -> None:
    """ "Écartées par le contrôle des descripteurs (train) 1 512", "Sans verdict du contrôle des
    descripteurs (train) 46"; the descriptor is the one the bridge judge copied ("Le juge recopie le
    descripteur de la question qui doit désigner l'entité-pont")."""
    assert in_card("Le juge recopie le descripteur de la question qui doit désigner l'entité-pont")
    raw = '{"analysis": "a", "descriptor": " le fondateur ", "candidates": [], "b_only_candidate": true}'
    assert tc.descriptor_of(raw) == "le fondateur" and tc.descriptor_of("rien") == ""
    seen: list[str] = []

    def responder(messages):
        text = messages[-1]["content"]
        seen.append(text)
        qid = re.search(r"Question (\w+) \?", text).group(1)
        checks = dict.fromkeys(
            ("descriptor_in_question", "descriptor_hides_bridge", "descriptor_stated_by_a"), True
        )
        if qid == "q2":
            checks["descriptor_hides_bridge"] = False
        return "???" if qid == "q3" else orjson.dumps({"analysis": "a", **checks}).decode()

    table = tc.run_descriptor_check(
        [_item("q1"), _item("q2"), _item("q3")],
        ScriptedChatModel(responder),
        load_prompt(tc.DESCRIPTOR_TASK, "fr"),
    )
    got = dict(zip(table["id"].to_pylist(), table["verdict"].to_pylist(), strict=True))
    assert got == {"q1": "kept", "q2": "descriptor_reveals_bridge", "q3": tc.UNREADABLE}
    assert all("Descripteur relevé : le fondateur" in t for t in seen)


def test_train_only_steps_leave_validation_and_test_to_the_judges() -> None:
    """ "(train)": a question of validation or test is kept on the two judges' verdict alone; a train
    question must also pass the score and the descriptor check."""
    kept = tc.train_only_kept({"t1", "t2", "t3", "v1"}, scored={"t1", "t2", "t3"}, descriptor_kept={"t1"})
    assert kept == {"t1", "v1"}


# -- 13. filtered_qwen is not a subset of default ---------------------------------------------------


def test_filtered_qwen_check_allows_its_own_rows_not_changed_shared_ones() -> None:
    """ "La configuration filtered_qwen n'est pas un sous-ensemble de la configuration par défaut" [...]
    "Pour ces identifiants communs le contenu est identique à l'octet près.\""""
    assert in_card("La configuration filtered_qwen n'est pas un sous-ensemble de la configuration par défaut")
    assert in_card("Pour ces identifiants communs le contenu est identique à l'octet près.")
    parent = pa.table({"id": ["a", "b"], "question": ["qa", "qb"]})
    own = pa.table({"id": ["a", "z"], "question": ["qa", "qz"]})  # z: a question of its own production
    assert fc.shared_id_violations(own, parent) == []
    assert fc.subset_violations(own, parent) == [("not_in_parent", "z")]  # the strict check would refuse
    changed = pa.table({"id": ["b"], "question": ["qb changed"]})
    assert fc.shared_id_violations(changed, parent) == [("row_differs", "b")]
    from ragsft_assets.defs.multihop import filters

    names = {spec.name for spec in filters.CONFIG_ASSETS["filtered_qwen"].check_specs}
    assert "matches_default_on_shared_ids" in names
    assert "is_subset_of_default" not in names


# -- 14. the card's funnel rows -------------------------------------------------------------------

CARD_FUNNEL_TABLE = (
    "Paires tirées 200 000",
    "Questions générées 324 944",
    "Écartées avant le juge 43 722",
    "Jugées 281 119",
    "Retenues 65 565",
    "Appels de juge 590 596",
)


def test_the_funnel_column_shows_every_figure_of_the_cards_table() -> None:
    """The card's table: "Paires tirées 200 000" ... "Retenues 65 565": each figure is in the card
    column of the generated card's funnel (no "-" where the card gives a number)."""
    assert all(in_card(row) for row in CARD_FUNNEL_TABLE)
    figures = {card_number(re.search(r"(\d[\d ]*)$", row).group(1)) for row in CARD_FUNNEL_TABLE}
    shown = {v for _, _, v in CARD_FUNNEL if isinstance(v, int)}
    assert figures <= shown, figures - shown
    funnel = {"pairs drawn": 7, "kept": 3, "questions generated": 12}
    rows = {label: (run, card) for label, run, card in card_rows(funnel)}
    assert rows["pairs drawn"] == ("7", "200,000") and rows["kept"] == ("3", "65,565")
    assert list(rows)[0] == "pairs drawn"  # the card's first row
    # the rejections the card lists: "l'ablation A+B qui échoue (136 975), B seul qui suffit à
    # répondre (48 674)", "A seul qui suffit à répondre (25 607)"
    assert in_card("l'ablation A+B qui échoue (136 975), B seul qui suffit à répondre (48 674)")
    assert {136_975, 48_674, 25_607} <= shown


# -- 15. every recipe field says the card, ours or derived ----------------------------------------

_ORIGIN = ("the card:", "ours:", "derived:")
_FIELD = re.compile(r"^    (\w+): [^=]+= (.+?)(?:  # (.*))?$")


def _field_comments() -> dict[str, str]:
    """``{field of MultihopRecipe: its comment}``: the comment lines above it (section headers
    ``# --`` left out) and the comment at its line's end."""
    source = Path(mh.__file__).read_text(encoding="utf-8")
    body = source.split("class MultihopRecipe:", 1)[1].split("    def __post_init__", 1)[0]
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            continue
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        m = _FIELD.match(line)
        if m:
            out[m.group(1)] = " ".join([*pending, m.group(3) or ""]).strip()
        pending = []
    return out


def _check_comment(where: str, comment: str) -> None:
    assert any(o in comment for o in _ORIGIN), f"{where}: {comment!r} says neither the card, ours nor derived"
    for quoted in re.findall(r'"([^"]+)"', comment):
        assert in_card(quoted), f"{where} quotes {quoted!r}, which the card does not hold"
    if "derived:" in comment:
        arithmetic = re.search(r"\d", comment) and re.search(r" [-+/=] ", comment)
        assert arithmetic, f"{where}: a derived value shows its arithmetic"


def test_every_multihop_recipe_field_says_the_card_ours_or_derived() -> None:
    """Every field of the recipe has a comment: "the card:" with its words, "ours:" with the reason,
    or "derived:" with the arithmetic; every quoted sentence is the card's."""
    comments = _field_comments()
    fields = {f.name for f in dataclasses.fields(mh.MultihopRecipe)} - {"name"}
    assert set(comments) == fields, sorted(fields - set(comments))
    for name, comment in comments.items():
        _check_comment(f"MultihopRecipe.{name}", comment)


def test_every_config_entry_quotes_the_card() -> None:
    """Each multihop config but the production's own (its values are the fields' own comments) says
    in its entry why it is built so, in the card's words."""
    from ragsft_assets import published_configs

    entries = [c for c in published_configs.configs() if c.is_multihop_recipe and c.name != mh.DEFAULT]
    names = {c.name for c in entries}
    assert names == {"filtered", "filtered_qwen", "filtered_qwen_v2", "corpus", "corpus_filtered_qwen_v2"}
    for c in entries:
        _check_comment(c.name, c.card)


@pytest.mark.parametrize("lang", ["fr", "en"])
def test_train_step_prompts_exist_per_language(lang: str) -> None:
    for task in (tc.PUBLISHABILITY_TASK, tc.DESCRIPTOR_TASK):
        assert load_prompt(task, lang).lang == lang


# -- 16. docs/cards.md -----------------------------------------------------------------------------

DOCS = Path(__file__).parents[1] / "docs"


def _section(title: str) -> str:
    text = (DOCS / "cards.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("title", ["001 HotpotQA-fr", "003 Recall Rewrite"])
def test_cards_md_names_modules_that_exist(title: str) -> None:
    """docs/cards.md lists each card's steps with where they live: every module it names exists."""
    section = _section(title)
    modules = {m.removeprefix("ragsft_assets/") for m in re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)", section)}
    assert len(modules) > 3, modules
    root = Path(__file__).parents[1] / "ragsft_assets"
    missing = sorted(m for m in modules if not (root / m).is_file())
    assert not missing, missing


def test_the_hotpotqa_fr_section_quotes_the_card() -> None:
    """Every French sentence docs/cards.md quotes as the card's (in "...") is the card's."""
    for quoted in re.findall(r'"([^"]+)"', _section("001 HotpotQA-fr")):
        if re.search(r"[éèàç]|\b(?:les|des|une|est)\b", quoted):  # the card's words, not a config name
            parts = [p.strip() for p in quoted.split("[...]") if p.strip()]  # an elision between parts
            assert all(in_card(p) for p in parts), quoted


def test_generated_cards_link_to_cards_md() -> None:
    from ragsft_assets.recall.release_build import card_body
    from ragsft_assets.release.card import CARDS_DOC, CARDS_DOC_LINE

    assert (DOCS.parent / CARDS_DOC).is_file()
    assert CARDS_DOC in card_body({"m": {"examples": 1}})
    assert CARDS_DOC in CARDS_DOC_LINE


def test_filtered_qwen_v2_is_the_judges_keeps_less_the_train_only_drops(tmp_path) -> None:
    """The config from the stage tables: "Écartées par le score de publiabilité (train)" and
    "Écartées par le contrôle des descripteurs (train)" leave the card's "Retenues"; validation and
    test questions are not seen by those steps; every verdict is in the provenance."""
    from ragsft_assets.defs.multihop import filters
    from ragsft_assets.multihop import criteria as cr
    from ragsft_assets.multihop import targeted_judges as tj
    from ragsft_assets.published_configs import by_name
    from ragsft_assets.resources.store import ArtifactStore

    store = ArtifactStore(home=str(tmp_path))
    key = "x.fr"
    ids = ["t1", "t2", "t3", "t4", "v1"]  # t*: train; v1: validation
    crit = [{"id": i, "verdict": "kept", "failed": [], **dict.fromkeys(cr.CRITERIA, True)} for i in ids]
    store.write(pa.Table.from_pylist(crit, schema=cr.CRITERIA_SCHEMA), key, "criteria_annotation")

    def verdicts(rows: dict[str, str]) -> pa.Table:
        return pa.Table.from_pylist(
            [{"id": i, "verdict": v} for i, v in rows.items()], schema=tj.VERDICT_SCHEMA
        )

    store.write(verdicts(dict.fromkeys(ids, "kept")), key, "bridge_judge")
    store.write(verdicts({**dict.fromkeys(ids, "kept"), "t4": "not_fluent"}), key, "language_judge")
    score = [
        {"id": "t1", "verdict": "kept", "score": 5},
        {"id": "t2", "verdict": tc.BELOW_THRESHOLD, "score": 2},
        {"id": "t3", "verdict": "kept", "score": 4},
    ]
    store.write(pa.Table.from_pylist(score, schema=tc.VERDICT_SCHEMA), key, tc.PUBLISHABILITY_STAGE)
    desc = [{"id": "t1", "verdict": "kept"}, {"id": "t3", "verdict": tc.UNREADABLE}]
    store.write(pa.Table.from_pylist(desc, schema=tc.VERDICT_SCHEMA), key, tc.DESCRIPTOR_STAGE)
    kept, provenance, funnel = filters.DECIDERS[by_name("filtered_qwen_v2").filters](
        store, key, "filtered_qwen"
    )
    assert kept == {"t1", "v1"}  # t2 scored low, t3 no descriptor verdict, t4 failed the language judge
    assert [r[0] for r in provenance[tc.PUBLISHABILITY_STAGE]] == ["t1", "t2", "t3"]
    assert funnel["publishability_score dropped (train)"] == 1
    assert funnel["descriptor_check no verdict (train)"] == 1 and funnel["kept"] == 2
