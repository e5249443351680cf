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
