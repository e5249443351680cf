"""The first_hop filter: A alone and the question, the judge names the entity; compared with B."""

from __future__ import annotations

import json

from ragsft_assets.multihop import first_hop as F
from ragsft_assets.prompts import load_prompt
from ragsft_assets_tests.llm_double import ScriptedChatModel


def _item(qid: str) -> F.FirstHopItem:
    return F.FirstHopItem(
        qid,
        f"Quel fleuve traverse la ville natale de ce peintre ? [{qid}]",
        "Jean Morel",
        "Jean Morel est un peintre né à Valrenne.",
        "Valrenne (Orbelle)",
        "Valrenne",
    )


REPLIES = {
    "q1": json.dumps({"entity": "valrenne", "status": "one"}),  # normalized, qualifier optional
    "q2": json.dumps({"entity": "Lyon", "status": "one"}),
    "q3": json.dumps({"entity": None, "status": "several"}),
    "q4": json.dumps({"entity": None, "status": "none"}),
    "q5": "Je pense que c'est Valrenne.",
    "q6": json.dumps({"entity": "", "status": "one"}),
    "q7": json.dumps({"entity": "Valrenne (Orbelle)", "status": "one"}),
}


def _judge() -> ScriptedChatModel:
    def respond(messages):
        text = messages[-1]["content"]
        qid = text.split("[")[1].split("]")[0]
        return REPLIES[qid]

    return ScriptedChatModel(respond)


def test_verdicts_one_call_each_without_b_and_without_thinking() -> None:
    judge = _judge()
    items = [_item(q) for q in sorted(REPLIES, reverse=True)]
    table = F.run_first_hop(items, judge, load_prompt(F.TASK, "fr"))
    got = dict(zip(table.column("id").to_pylist(), table.column("verdict").to_pylist(), strict=True))
    assert got == {
        "q1": F.LEADS_TO_B,
        "q2": F.OTHER_ENTITY,
        "q3": F.SEVERAL_ENTITIES,
        "q4": F.A_LACKS_PROPERTY,
        "q5": F.UNREADABLE,
        "q6": F.UNREADABLE,
        "q7": F.LEADS_TO_B,
    }
    assert table.column("id").to_pylist() == sorted(REPLIES)
    assert len(judge.calls) == len(REPLIES)
    assert all(k == {"enable_thinking": False} for k in judge.template_kwargs)
    # B is never shown: its qualified title is absent from every prompt (A's text names the town only)
    assert not any("Orbelle" in c[-1]["content"] for c in judge.calls)
    assert all(r for r in table.column("raw").to_pylist())


def test_prompts_exist_in_both_languages_and_render() -> None:
    for lang in ("fr", "en"):
        tpl = load_prompt(F.TASK, lang)
        assert tpl.lang == lang
        out = F.build_messages(tpl, _item("q1"))[0]["content"]
        assert "Jean Morel est un peintre" in out and '"status"' in out
