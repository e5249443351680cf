"""bridge_judge and language_judge logic: verdicts both ways, unreadable, one call at T=0."""

from __future__ import annotations

import orjson
import pytest

from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.prompts import load_prompt
from ragsft_assets_tests.llm_double import ScriptedChatModel

BRIDGE_OK = {
    "analysis": "descriptor 'this river' -> A names one river",
    "descriptor": "this river",
    "candidates": ["Loire"],
    "b_only_candidate": True,
    "a_states_relation": True,
    "question_names_b": False,
}
LANG_OK = {
    "analysis": "fluent",
    "fluent": True,
    "unique_referents": True,
    "no_meta_wording": True,
    "answer_type_and_scope": True,
}


@pytest.mark.parametrize(
    ("judge", "reply", "verdict"),
    [
        (tj.BRIDGE, BRIDGE_OK, "kept"),
        (tj.BRIDGE, {**BRIDGE_OK, "b_only_candidate": False}, "several_candidates"),
        (tj.BRIDGE, {**BRIDGE_OK, "a_states_relation": False}, "relation_not_stated"),
        (tj.BRIDGE, {**BRIDGE_OK, "question_names_b": True}, "question_names_b"),
        (tj.BRIDGE, {**BRIDGE_OK, "b_only_candidate": "yes"}, "unreadable"),
        (tj.LANGUAGE, LANG_OK, "kept"),
        (tj.LANGUAGE, {**LANG_OK, "fluent": False}, "not_fluent"),
        (tj.LANGUAGE, {**LANG_OK, "unique_referents": False}, "ambiguous_referent"),
        (tj.LANGUAGE, {**LANG_OK, "no_meta_wording": False}, "meta_wording"),
        (tj.LANGUAGE, {**LANG_OK, "answer_type_and_scope": False}, "answer_type_or_scope"),
        (tj.LANGUAGE, {k: v for k, v in LANG_OK.items() if k != "fluent"}, "unreadable"),
    ],
)
def test_verdicts(judge, reply, verdict):
    assert tj.verdict_of(judge, "Analysis first.\n" + orjson.dumps(reply).decode())[0] == verdict
    assert verdict in judge.verdicts


def test_unreadable_never_crashes_and_analysis_comes_first():
    assert tj.verdict_of(tj.BRIDGE, "no json at all") == ("unreadable", None)
    assert tj.verdict_of(tj.LANGUAGE, "{not json}") == ("unreadable", None)
    assert tj.verdict_of(tj.LANGUAGE, None) == ("unreadable", None)
    for judge in tj.JUDGES.values():
        assert next(iter(judge.json_schema["properties"])) == "analysis"  # written before the verdict


@pytest.mark.parametrize("lang", ["fr", "en"])
def test_run_judge_one_call_each_at_temperature_zero(lang):
    replies = iter([orjson.dumps(BRIDGE_OK).decode(), "garbage"])
    model = ScriptedChatModel(lambda m: next(replies))
    items = [tj.JudgeItem(f"{i:024x}", f"Q{i}?", "1900", "A", "Texte A.", "B", "Texte B.") for i in range(2)]
    table = tj.run_judge(tj.BRIDGE, items, model, load_prompt(tj.BRIDGE.task, lang))
    assert table.column("verdict").to_pylist() == ["kept", "unreadable"]
    assert len(model.calls) == 2 and model.template_kwargs == [{"enable_thinking": False}] * 2
    assert "Q0?" in model.calls[0][0]["content"] and "Texte A." in model.calls[0][0]["content"]
    lt = load_prompt(tj.LANGUAGE.task, lang)
    assert lt.lang == lang and "Texte B." in lt.render(
        a_title="A", a_text="Texte A.", b_title="B", b_text="Texte B.", question="Q", answer="R"
    )
