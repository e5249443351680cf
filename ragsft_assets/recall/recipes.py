"""The Recall Rewrite card as data: one frozen recipe per published configuration.

The card publishes, per base model, a ``<model>-sft`` and a ``<model>-full`` config. Both are views
of one build (``-sft`` is derived row for row from ``-full``), so they share one recipe:
``recall_oasst1``. Each value carries the card's sentence it comes from. A run names the recipe
(``recipe``, default this one) and overrides fields (``overrides``, e.g. ``{"j_e": 3}``); the
resolved recipe goes down to the stages, and the release records it (``recipes.record``).
Every value's comment says "the card:" with its words (003, quoted), or "ours:" with the reason.
Dagster-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragsft_assets import recipes
from ragsft_assets.recall.rule import Thresholds

FAMILY = "recall"
PRODUCT_RECIPE = "recall_oasst1"


@dataclass(frozen=True)
class RecallRecipe:
    """Every value the Recall Rewrite OASST1 card fixes."""

    name: str
    dataset: str  # the input dataset (hub id)
    language: str  # the first turns kept
    license: str  # the released data's license (Hugging Face identifier): card, header, manifests
    license_notice: str  # the card's license sentence
    num_probes: int  # probing questions per knowledge-dependent claim
    answers_per_probe: int  # base-model answers per probing question
    answer_temperature: float  # the base model's sampling temperature
    answer_max_tokens: int  # most tokens of one base-model answer (ours: a short QA answer)
    claims_max_tokens: int  # most tokens of one decomposition (ours: room for a long response whole)
    j_e: int  # known iff at least j_e questions ...
    k_e: int  # ... have at least k_e entailing answers ...
    j_c: int  # ... and at most j_c questions ...
    k_c: int  # ... have at least k_c contradicting answers
    refusal: str  # the fixed refusal target

    @property
    def thresholds(self) -> Thresholds:
        """The decision rule's ``j_e/k_e/j_c/k_c``."""
        return Thresholds(self.j_e, self.k_e, self.j_c, self.k_c)


RECALL_OASST1 = RecallRecipe(
    name=PRODUCT_RECIPE,
    # the card: "OASST1 (Köpf et al., 2023), English, first turn of each conversation tree,
    # highest-ranked response: 3,468 prompt–response pairs."
    dataset="OpenAssistant/oasst1",
    language="en",  # the card: "OASST1 (Köpf et al., 2023), English"
    # the card: "The dataset is released under CC BY-SA 4.0." (Hugging Face's identifier for it)
    license="cc-by-sa-4.0",
    # the card: its License section's first two sentences, word for word
    license_notice=(
        "The dataset is released under CC BY-SA 4.0. The prompts and original responses come from "
        "OASST1 (Köpf et al., 2023, Apache-2.0)."
    ),
    # the card: "each knowledge-dependent claim is turned into five probing questions"
    num_probes=5,
    # the card: "the base model answers each question twice"
    answers_per_probe=2,
    # the card: "Probe answers: 2 samples per question from the base model (temperature 0.5,
    # few-shot QA prompt)"
    answer_temperature=0.5,
    # ours: the card gives no length; one short QA answer, cut at the next few-shot item anyway
    answer_max_tokens=96,
    # ours: the card gives no length; room for a long response's claims whole (no cap on claims)
    claims_max_tokens=2048,
    # the card: "The released rewrites use the paper default 2/1/2/1." (thresholds j_e/k_e/j_c/k_c)
    j_e=2,
    k_e=1,  # the card: "The released rewrites use the paper default 2/1/2/1."
    j_c=2,  # the card: "The released rewrites use the paper default 2/1/2/1."
    k_c=1,  # the card: "The released rewrites use the paper default 2/1/2/1."
    # the card: "If too little information remains, the response becomes the fixed refusal" (this
    # string, quoted there word for word)
    refusal="I cannot answer as I have insufficient information.",
)

RECIPES = {PRODUCT_RECIPE: RECALL_OASST1}
recipes.register(FAMILY, RECIPES)


def resolve(name: str | None, overrides: dict | None = None) -> RecallRecipe:
    """The named recipe (None: the card's ``recall_oasst1``) with ``overrides`` applied.

    Raises:
        KeyError: an unknown recipe name; ValueError: a bad override (see ``recipes.resolve``).
    """
    return recipes.resolve(name or PRODUCT_RECIPE, overrides or {})
