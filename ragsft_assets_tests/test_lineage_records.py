"""Named records and nulls (issue 38): the ablation cascade's outcomes are named records, and a
value multihop_audit could not compute is a null, not -1.0."""

from __future__ import annotations

import inspect

from ragsft_assets.defs.multihop import assets as multihop_assets
from ragsft_assets.multihop import ablations
from ragsft_assets.prompts import load_prompt
from ragsft_assets.release import card
from ragsft_assets_tests.llm_double import ScriptedChatModel


def test_cascade_outcomes_are_named_records() -> None:
    def respond(messages) -> str:  # noqa: ANN001
        return "Paris" if "Document 2" in messages[-1]["content"] else "IMPOSSIBLE"

    items = [ablations.JudgeItem("1", "Q?", "Paris", "A", "a text", "B", "b text")]
    res = ablations.run_cascade(
        items, ScriptedChatModel(respond), load_prompt("multihop_ablation", "en"), lang="en"
    )
    [(qid, outcome)] = res.outcome.items()
    assert isinstance(outcome, ablations.Outcome)
    assert (outcome.verdict, outcome.reason, len(outcome.cache_keys)) == ("kept", "passed_ablations", 4)
    verdict = ablations.outcomes_from_verdicts(res.verdicts)[qid]
    assert isinstance(verdict, ablations.Verdict) and verdict == ("kept", "passed_ablations")


def test_audit_values_not_computed_are_null() -> None:
    """``surface_auc_mean``, ``gold_longest_rate`` and ``gold_longest_chance`` are the measured
    number or None (a null in the metadata; the card then omits the line), no -1.0 sentinel."""
    source = inspect.getsource(multihop_assets.multihop_audit.op.compute_fn.decorated_fn)
    assert "-1.0" not in source
    for key in (card.AUDIT_AUC_KEY, card.LONGEST_RATE_KEY, card.LONGEST_CHANCE_KEY):
        assert f'"{key}": ' in source, key
