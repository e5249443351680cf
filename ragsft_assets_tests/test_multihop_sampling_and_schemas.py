"""Bridge-first sampling survives question_drafts, and the JSON schemas carry the card's bounds."""

from __future__ import annotations

from collections import Counter

import jsonschema
import orjson
import pyarrow as pa
import pytest

from ragsft_assets.corpus.bridge_pairs import BridgePairsConfig, draw_bridge_pairs, first_drawn
from ragsft_assets.ids import doc_id
from ragsft_assets.llm.types import SamplingParams
from ragsft_assets.multihop import criteria as cr
from ragsft_assets.multihop import first_hop as fh
from ragsft_assets.multihop import targeted_judges as tj
from ragsft_assets.multihop.generation import (
    QUESTION_MAX_CHARS,
    Doc,
    Pair,
    draft_json_schema,
    first_pairs,
    generate_drafts,
)
from ragsft_assets.prompts import load_prompt
from ragsft_assets_tests.llm_double import ScriptedChatModel


def _hub_graph() -> pa.Table:
    """One bridge (Hub) linked from 50 sources, and 50 bridges linked once each."""
    edges = [(f"HubSource{i:02d}", "Hub") for i in range(50)]
    edges += [(f"Source{i:02d}", f"Bridge{i:02d}") for i in range(50)]
    return pa.Table.from_pylist(
        [
            {
                "source_id": doc_id(a),
                "source_title": a,
                "target_id": doc_id(b),
                "target_title": b,
                "alias": b,
                "sentence": 0,
                "split": "train",
                "is_bridge": True,
            }
            for a, b in edges
        ]
    )


def _docs(pairs: pa.Table) -> dict[str, Doc]:
    titles = {*pairs["a_title"].to_pylist(), *pairs["b_title"].to_pylist()}
    return {doc_id(t): Doc(doc_id(t), t, (f"{t} is a thing.",), "train") for t in titles}


@pytest.mark.parametrize("seed", [1, 2, 3, 20260731])
def test_question_drafts_take_the_first_drawn_pairs_algorithm_1(seed: int) -> None:
    """With every pair drawn, the first 20 pairs question_drafts takes hold the hub at most once
    (round 1 gives one source per bridge), never the ~10 of 20 a uniform draw over pairs gives."""
    pairs, funnel, _ = draw_bridge_pairs(_hub_graph(), BridgePairsConfig(seed=seed))
    assert funnel["pairs"] == 100 and funnel["bridges"] == 51
    chosen, missing = first_pairs(pairs, _docs(pairs), 20)
    assert missing == 0 and len(chosen) == 20
    assert sum(p.b_title == "Hub" for p in chosen) <= 1
    assert len({p.b_id for p in chosen}) == 20  # 20 different bridges
    # the first N of one seeded order: a larger limit only adds pairs, and the table's row order
    # (sorted by id) does not matter
    more, _ = first_pairs(pairs, _docs(pairs), 60)
    assert {p.id for p in chosen} < {p.id for p in more}
    assert sum(p.b_title == "Hub" for p in more) == 10  # round 1: 51 bridges; round 2: the hub's 2nd...
    shuffled = pairs.take(list(range(pairs.num_rows))[::-1])
    assert [p.id for p in first_pairs(shuffled, _docs(pairs), 20)[0]] == [p.id for p in chosen]


def test_first_drawn_skips_unusable_pairs_and_needs_the_draw_column() -> None:
    pairs, _, _ = draw_bridge_pairs(_hub_graph(), BridgePairsConfig(seed=5))
    docs = _docs(pairs)
    first = first_drawn(pairs, 1)
    gone = first["b_id"][0].as_py()
    del docs[gone]  # that pair's bridge is missing from the abstracts: the next drawn takes its place
    chosen, missing = first_pairs(pairs, docs, 1)
    assert missing == sum(b == gone for b in pairs["b_id"].to_pylist()) and chosen[0].b_id != gone
    with pytest.raises(ValueError, match="re-materialize bridge_pairs"):
        first_drawn(pairs.drop_columns(["draw"]), 3)


def _valid(schema: dict, value: object) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def _reply(answer: str, n: int = 1) -> dict:
    return {"questions": [{"question": "q", "answer": answer, "support_a": [0], "support_b": [1]}] * n}


def test_generation_schema_carries_the_answer_bounds_and_the_count() -> None:
    schema = draft_json_schema(3, 10, 70)
    assert _valid(schema, _reply("one two three four five six seven eight nine ten"))
    assert not _valid(schema, _reply("one two three four five six seven eight nine ten eleven"))  # 11 words
    assert _valid(schema, _reply("x" * 70))
    assert not _valid(schema, _reply("x" * 71))  # 71 characters
    assert _valid(schema, _reply("Paris", 3)) and not _valid(schema, _reply("Paris", 4))  # 3 per pair
    assert not _valid(schema, {"questions": []})
    assert not _valid(schema, _reply("Paris   "))  # no whitespace padding a small model could loop in
    long_question = _reply("Paris")
    long_question["questions"][0]["question"] = "q" * (QUESTION_MAX_CHARS + 1)
    assert not _valid(schema, long_question)
    assert not _valid(schema, _reply("Paris") | {"note": "extra"})
    bad = _reply("Paris")
    bad["questions"][0]["support_a"] = [-1]
    assert not _valid(schema, bad)
    assert draft_json_schema(5, 4, 30)["properties"]["questions"]["maxItems"] == 5  # from the recipe


def test_generation_reply_over_the_bounds_is_unreadable_not_a_row() -> None:
    """The schema goes to the model with the call: a reply that runs past it is unreadable."""
    pair = Pair("p", "a", "A", "b", "B", "B", "train")
    docs = {"a": Doc("a", "A", ("A is.",), "train"), "b": Doc("b", "B", ("B is.", "It is here."), "train")}
    long_answer = orjson.dumps(_reply("a b c d e f g h i j k")).decode()
    model = ScriptedChatModel(lambda m: long_answer)
    table, _ = generate_drafts(
        [pair], docs, model, load_prompt("multihop_question", "en"), 3, SamplingParams()
    )
    assert Counter(table["status"].to_pylist()) == {"unreadable": 3}
    assert "schema mismatch" in table["error"][0].as_py()


def test_judge_schemas_carry_the_verdict_enums() -> None:
    status = fh.JSON_SCHEMA["properties"]["status"]
    assert status["enum"] == ["one", "several", "none"]
    assert not _valid(fh.JSON_SCHEMA, {"entity": "X", "status": "maybe"})
    assert not _valid(fh.JSON_SCHEMA, {"entity": "X", "status": "one", "why": "extra"})
    for judge in (tj.BRIDGE, tj.LANGUAGE):
        schema = judge.json_schema
        assert schema["additionalProperties"] is False
        reply = {f: True for f in schema["required"] if schema["properties"][f]["type"] == "boolean"}
        reply |= {"analysis": "short"} | (
            {"descriptor": "d", "candidates": ["B"]} if judge is tj.BRIDGE else {}
        )
        assert _valid(schema, reply)
        assert not _valid(schema, reply | {"analysis": "x" * (tj.ANALYSIS_MAX_CHARS + 1)})
        assert not _valid(schema, reply | {"verdict": "kept"})
    assert cr.JSON_SCHEMA["additionalProperties"] is False
    assert not _valid(cr.JSON_SCHEMA, {c: True for c in cr.CRITERIA} | {"comment": "x"})
