"""Recall Rewrite: release schemas field for field, the refusal rule, the base-model registry."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.recall import registry
from ragsft_assets.recall.rewrite import (
    NO_FACT_LEFT,
    NOTHING_REMOVED,
    REWRITER_SAYS_NOTHING_LEFT,
    REWRITTEN,
    ClaimState,
    decide_target,
    needs_rewriter,
)
from ragsft_assets.recall.schema import CLAIM, FULL_SCHEMA, REFUSAL, SFT_SCHEMA, sft_row

# The (the card's) field lists, copied verbatim.
CARD_SFT = "id, base_model, prompt, response, is_refusal, messages"
CARD_FULL = (
    "id, base_model, prompt, is_refusal, original_response, rewritten_response, filter, "
    "num_claims, num_knowledge_dependent_claims, num_known_claims, num_unknown_claims, claims"
)
CARD_CLAIM = (
    "claim_id, text, is_knowledge_dependent, knowledge_dependence_reason, audit_checklist, is_known, "
    "is_removed, num_entailed_answers, num_contradicted_answers, num_unrelated_answers, probes"
)


def _names(s: str) -> list[str]:
    return [x.strip() for x in s.split(",")]


def test_schemas_field_for_field() -> None:
    assert SFT_SCHEMA.names == _names(CARD_SFT)
    assert FULL_SCHEMA.names == _names(CARD_FULL)
    assert [f.name for f in CLAIM] == _names(CARD_CLAIM)
    checklist = CLAIM.field("audit_checklist").type
    assert [f.name for f in checklist] == [
        "is_independent_of_context",
        "contains_specific_fact",
        "is_not_obvious",
        "can_be_asked_for",
    ] and all(f.type == pa.string() for f in checklist)
    probe = CLAIM.field("probes").type.value_type
    assert [f.name for f in probe] == ["question", "answers"]
    assert [f.name for f in probe.field("answers").type.value_type] == ["text", "label"]


# The card's types: ints for ids and counts, booleans for verdicts, strings for text.
CARD_TYPES = {
    "num_claims": pa.int64(),
    "num_knowledge_dependent_claims": pa.int64(),
    "num_known_claims": pa.int64(),
    "num_unknown_claims": pa.int64(),
    "is_refusal": pa.bool_(),
    "filter": pa.string(),
}
CARD_CLAIM_TYPES = {
    "claim_id": pa.int64(),
    "text": pa.string(),
    "is_knowledge_dependent": pa.bool_(),
    "knowledge_dependence_reason": pa.string(),
    "is_known": pa.bool_(),
    "is_removed": pa.bool_(),
    "num_entailed_answers": pa.int64(),
    "num_contradicted_answers": pa.int64(),
    "num_unrelated_answers": pa.int64(),
}


def test_schema_types_are_the_cards() -> None:
    assert {n: FULL_SCHEMA.field(n).type for n in CARD_TYPES} == CARD_TYPES
    assert {n: CLAIM.field(n).type for n in CARD_CLAIM_TYPES} == CARD_CLAIM_TYPES


def test_sft_row_fits_schema() -> None:
    full = {"id": "oasst1-0000", "base_model": "Qwen/Qwen3-4B-Base", "prompt": "p", "rewritten_response": "r"}
    full["is_refusal"] = False
    table = pa.Table.from_pylist([sft_row(full)], schema=SFT_SCHEMA)
    assert table.to_pylist()[0]["messages"][1] == {"role": "assistant", "content": "r"}


KD_KNOWN = ClaimState(True, True, True)
KD_UNKNOWN = ClaimState(True, False, True)
OPINION = ClaimState(False, None, False)
NON_KD_FACT = ClaimState(False, None, True)


@pytest.mark.parametrize(
    "claims,rewritten,flag,expected",
    [
        ([KD_KNOWN, OPINION], None, None, ("orig", False, NOTHING_REMOVED)),
        ([KD_UNKNOWN, KD_KNOWN], "kept", True, ("kept", False, REWRITTEN)),
        ([KD_UNKNOWN, KD_KNOWN], "kept", False, (REFUSAL, True, REWRITER_SAYS_NOTHING_LEFT)),
        ([KD_UNKNOWN, KD_KNOWN], "  ", True, (REFUSAL, True, REWRITER_SAYS_NOTHING_LEFT)),
        ([KD_UNKNOWN, OPINION], "opinion only", True, (REFUSAL, True, NO_FACT_LEFT)),
        ([KD_UNKNOWN, NON_KD_FACT], "fact", True, ("fact", False, REWRITTEN)),
    ],
)
def test_refusal_rule(claims, rewritten, flag, expected) -> None:
    t = decide_target("orig", claims, rewritten, flag)
    assert (t.response, t.is_refusal, t.reason) == expected
    assert needs_rewriter(claims) is (expected[2] != NOTHING_REMOVED)


def test_base_models_registry_and_cli(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    assert registry.resolve("qwen3-4b-base") is None  # no entry: RAGSFT_BASE_MODEL_* defaults
    runner = CliRunner()
    res = runner.invoke(main, ["base-models", "add", "qwen3-4b-base", "--model", "Qwen/Qwen3-4B-Base"])
    assert res.exit_code == 0, res.output
    assert "partition qwen3-4b-base added" in res.output
    res = runner.invoke(
        main,
        [
            "base-models",
            "add",
            "llama",
            "--model",
            "m",
            "--backend",
            "openai",
            "--base-urls",
            "http://a/v1,http://b/v1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert registry.resolve("llama") == registry.BaseModelEntry("m", "openai", ["http://a/v1", "http://b/v1"])
    assert registry.resolve("qwen3-4b-base").model == "Qwen/Qwen3-4B-Base"
    assert orjson.loads(registry.registry_path().read_bytes())["llama"]["backend"] == "openai"
    res = runner.invoke(main, ["base-models", "add", "Bad Key", "--model", "m"])
    assert res.exit_code != 0 and "lowercase" in res.output
    res = runner.invoke(main, ["base-models", "add", "x", "--model", "m", "--backend", "openai"])
    assert res.exit_code != 0 and "--base-urls" in res.output
    res = runner.invoke(main, ["base-models", "list"])
    assert res.output.splitlines()[0].startswith("llama\tm\topenai")


def test_base_model_resource_from_partition_key(tmp_path) -> None:
    from ragsft_assets.resources.llm import LLMResource

    default = LLMResource(role="base_model", max_model_len=2048, budget_calls=10)
    assert registry.resource_for_key(default, "qwen3-4b-base", tmp_path) is default  # no entry
    registry.add(
        "qwen3-4b-base", registry.BaseModelEntry("Qwen/Qwen3-4B-Base", "openai", ["http://a/v1"]), tmp_path
    )
    got = registry.resource_for_key(default, "qwen3-4b-base", tmp_path)
    assert (got.model, got.backend, got.base_urls) == ("Qwen/Qwen3-4B-Base", "openai", ["http://a/v1"])
    assert (got.max_model_len, got.budget_calls, got.role) == (2048, 10, "base_model")
