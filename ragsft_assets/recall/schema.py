"""The release configs of Recall Rewrite, field for field as in the published card.

``<model>-sft`` is the training view; ``<model>-full`` carries every claim, probe, answer and
label, so ``ragsft recall rule`` can re-derive the set under other thresholds with no model call.
"""

from __future__ import annotations

import pyarrow as pa

from ragsft_assets.arrow_schemas import MESSAGES, columns, strings

AUDIT_CHECKLIST = (
    "is_independent_of_context",
    "contains_specific_fact",
    "is_not_obvious",
    "can_be_asked_for",
)
REFUSAL = "I cannot answer as I have insufficient information."

ANSWER = pa.struct(strings("text", "label"))
PROBE = pa.struct([("question", pa.string()), ("answers", pa.list_(ANSWER))])
CLAIM = pa.struct(
    [
        ("claim_id", pa.int64()),  # the claim's number within its response, an int as in the card
        ("text", pa.string()),
        ("is_knowledge_dependent", pa.bool_()),
        ("knowledge_dependence_reason", pa.string()),
        ("audit_checklist", pa.struct(strings(*AUDIT_CHECKLIST))),
        ("is_known", pa.bool_()),  # null for claims that are not knowledge-dependent
        ("is_removed", pa.bool_()),
        *columns(pa.int64(), "num_entailed_answers", "num_contradicted_answers", "num_unrelated_answers"),
        ("probes", pa.list_(PROBE)),
    ]
)

SFT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("base_model", pa.string()),  # the model's HF id, as in the card
        *strings("prompt", "response"),
        ("is_refusal", pa.bool_()),
        ("messages", MESSAGES),
    ]
)

FULL_SCHEMA = pa.schema(
    [
        *strings("id", "base_model", "prompt"),
        ("is_refusal", pa.bool_()),
        *strings("original_response", "rewritten_response"),
        ("filter", pa.string()),  # the thresholds j_e/k_e/j_c/k_c the verdicts were made under
        ("num_claims", pa.int64()),
        ("num_knowledge_dependent_claims", pa.int64()),
        ("num_known_claims", pa.int64()),
        ("num_unknown_claims", pa.int64()),
        ("claims", pa.list_(CLAIM)),
    ]
)


def sft_row(full: dict) -> dict:
    """The ``-sft`` row of a ``-full`` row: the rewritten response as a two-turn conversation."""
    response = full["rewritten_response"]
    return {
        "id": full["id"],
        "base_model": full["base_model"],
        "prompt": full["prompt"],
        "response": response,
        "is_refusal": full["is_refusal"],
        "messages": [{"role": "user", "content": full["prompt"]}, {"role": "assistant", "content": response}],
    }
