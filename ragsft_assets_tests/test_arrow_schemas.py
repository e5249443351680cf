"""arrow_schemas: the compact spellings make exactly the fields a ``(name, type)`` pair makes."""

from __future__ import annotations

import pyarrow as pa

from ragsft_assets.arrow_schemas import MESSAGES, STRING_LIST, columns, strings


def test_strings_are_the_pairs_fields_in_order() -> None:
    spelled = pa.schema([*strings("id", "split", "verdict"), ("scores", pa.list_(pa.float64()))])
    pairs = pa.schema(
        [
            ("id", pa.string()),
            ("split", pa.string()),
            ("verdict", pa.string()),
            ("scores", pa.list_(pa.float64())),
        ]
    )
    assert spelled.equals(pairs, check_metadata=True)
    assert spelled.names == ["id", "split", "verdict", "scores"]
    assert all(f.nullable and f.metadata is None for f in spelled)


def test_columns_take_any_type_and_nothing_gives_nothing() -> None:
    assert columns(pa.int32(), "n", "m") == [pa.field("n", pa.int32()), pa.field("m", pa.int32())]
    assert columns(STRING_LIST, "titles")[0].type == pa.list_(pa.string())
    assert strings() == []


def test_messages_are_role_and_content_turns() -> None:
    turn = {"role": "user", "content": "Bonjour"}
    assert pa.array([[turn]], type=MESSAGES).to_pylist() == [[turn]]
    assert MESSAGES.value_type.names == ["role", "content"]


def test_every_judged_stage_frames_its_fields_with_the_verdict_and_the_reply() -> None:
    from ragsft_assets.multihop import criteria, first_hop, targeted_judges, train_checks

    for schema, own in (
        (targeted_judges.VERDICT_SCHEMA, ["analysis"]),
        (first_hop.FIRST_HOP_SCHEMA, ["entity"]),
        (train_checks.VERDICT_SCHEMA, ["score", "analysis"]),
        (criteria.CRITERIA_SCHEMA, ["failed", *criteria.CRITERIA]),
    ):
        assert schema.names == ["id", "verdict", *own, "raw", "cache_key"]
        assert all(schema.field(n).type == pa.string() for n in ("id", "verdict", "raw", "cache_key"))
