"""The Synth-Long-SFT32K card as data: one frozen recipe per published configuration.

The card's five configs (``synthetic_convqa_raft``, ``synthetic_convqa_raft_syntactic``,
``narrativeqa_clustered``, ``rag_tge_raft``, ``rag_tge_raft_zh``) each get a recipe named after
the config; any other source builds the three untranslated variants under the family recipes
``long_context_raft``, ``long_context_raft_syntactic`` and ``long_context_clustered`` (the same
numbers, its texts keeping their source's license), and ``long_context_raft_translated`` is there
to ask for a translation of another source. Each value says where it comes from: the card's
sentence ("the card:"), the reasoning ("derived:") or why it is ours ("ours:").
A run names a recipe on a variant's asset (``recipe``, default: the partition's product) and
overrides fields (``overrides``); :func:`product_recipe` says which recipe a variant of a
partition builds by default, or that it is not built. Dagster-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ragsft_assets import recipes

FAMILY = "long_context"
RAFT, SYNTACTIC, CLUSTERED, TRANSLATED = "raft", "raft_syntactic", "clustered", "raft_translated"
VARIANTS = (RAFT, SYNTACTIC, CLUSTERED, TRANSLATED)
# Ours (the card names no model): token counts use the tokenizer of the model being trained, here
# SmolLM2 (all sizes share one tokenizer and chat template); offline, the embedded
# SmolLM2-135M-Instruct folder is it.
SMOLLM2_TOKENIZER = "HuggingFaceTB/SmolLM2-135M-Instruct"
SOURCE_LICENSE_NOTICE = (
    "The texts keep their source's license (see the source's card); the layout is ragsft's."
)


@dataclass(frozen=True)
class LongContextRecipe:
    """Every value the Synth-Long-SFT32K card fixes for one config."""

    name: str
    source: str  # the qa_source preset the config is built from ("" = any source)
    variant: str  # raft, raft_syntactic, clustered or raft_translated
    budget_tokens: int  # the whole conversation's most tokens
    tokenizer_dir: str  # the trained model's tokenizer: a local folder or a hub name in the cache
    k: int | None  # most distractors; None = as many as fit the budget
    p_oracle: float  # RAFT's P: the share of examples that keep the oracle
    syntactic_reserve_tokens: int  # raft_syntactic: tokens kept free for the question and answer
    n_clusters: int | None  # clustered: k of both k-means; None = one cluster per cluster_size
    cluster_size: int  # clustered: examples per cluster when n_clusters is None
    translate_language: str  # raft_translated: the target language code
    translate_max_tokens: int  # raft_translated: most tokens of one translated piece
    license: str  # the config's license, a Hugging Face identifier (YAML header, manifest)
    license_notice: str  # the card's license sentence for the config

    @property
    def suffix(self) -> str:
        """The config name's suffix after ``<source>_`` (``raft_zh`` for a translation)."""
        return f"raft_{self.translate_language}" if self.variant == TRANSLATED else self.variant


# The values every config shares. Each comment says where its value comes from: "the card:" quotes
# the Synth-Long-SFT32K card (002) word for word, between double quotes; "derived:" gives the
# reasoning from the card's words; "ours:" is a value the card does not state, with the reason
# (test_cards_002 checks all three).
_CARD = LongContextRecipe(
    name="long_context_raft",
    source="",  # ours: the family recipe takes any source; a card config names its own
    variant=RAFT,  # the card: "Retrieval Augmented Fine-Tuning (RAFT)"
    budget_tokens=32_768,  # the card: "The maximal sequence length of the examples is 32,768."
    # ours: the card names no tokenizer; a length is the trained model's tokens, here SmolLM2's
    # (the embedded SmolLM2-135M-Instruct folder offline)
    tokenizer_dir=SMOLLM2_TOKENIZER,
    # ours: the card gives no k ("distractor_passage_0, …, distractor_passage_k"); as many as fit in
    # the budget
    k=None,
    # derived: every example keeps its true passage ("We shuffle the true passage into a random
    # position in the context"), so RAFT's share P of examples with the oracle is 1.0
    p_oracle=1.0,
    syntactic_reserve_tokens=96,  # ours: room for one syntactic question and its answer
    # ours: the card gives no cluster count ("we create two clustering assignments, one based on the
    # questions, and one based on the passages"); None = one cluster per cluster_size examples
    n_clusters=None,
    cluster_size=8,  # ours: about one cluster per 8 examples, a few examples added to each
    # the card: "We also translated the RAFT-augmented RAG-TGE dataset to Chinese."
    translate_language="zh",
    translate_max_tokens=2048,  # ours: a passage is a few hundred to a few thousand tokens
    # the card: "Please refer to the original licenses accompanying each dataset."
    license="other",
    # the card: "The rest of the datasets are built on and derived from existing datasets."
    license_notice=SOURCE_LICENSE_NOTICE,
)

NARRATIVEQA_LICENSE = "apache-2.0"  # deepmind/narrativeqa is Apache-2.0 (not cc-by-sa-4.0)
NARRATIVEQA_NOTICE = "Apache-2.0, the license of NarrativeQA (deepmind/narrativeqa) whose summaries and QA pairs these rows hold."
LLAMA_LICENSE = "llama3.1"
LLAMA_NOTICE = (
    "Llama 3.1 Community License: the card's Chinese texts were translated by a Llama 3.1 model and"
    ' carry its license ("Llama 3.1 is licensed under the Llama 3.1 Community License, Copyright ©'
    ' Meta Platforms, Inc. All Rights Reserved."); the card releases them "for non-commercial use'
    ' only, subject to the Llama 3.1 Community License Agreement". A translation by another model'
    " carries that model's license: override `license` and `license_notice`."
)

CARD_RECIPES = {
    # the card: "Synthetic-ConvQA with RAFT-style augmentation."
    "synthetic_convqa_raft": replace(_CARD, name="synthetic_convqa_raft", source="synthetic_convqa"),
    # the card: "Synthetic-ConvQA with RAFT-style augmentation + syntactic questions."
    "synthetic_convqa_raft_syntactic": replace(
        _CARD, name="synthetic_convqa_raft_syntactic", source="synthetic_convqa", variant=SYNTACTIC
    ),
    # the card: "Augmented NarrativeQA."; ours: NarrativeQA's own license, Apache-2.0 ("Please refer
    # to the original licenses accompanying each dataset.")
    "narrativeqa_clustered": replace(
        _CARD,
        name="narrativeqa_clustered",
        source="narrativeqa",
        variant=CLUSTERED,
        license=NARRATIVEQA_LICENSE,
        license_notice=NARRATIVEQA_NOTICE,
    ),
    # the card: "RAG-TGE with RAFT-style augmentation."
    "rag_tge_raft": replace(_CARD, name="rag_tge_raft", source="rag_tge"),
    # the card: "RAG-TGE with RAFT-style augmentation (Chinese translation)." and "is for
    # non-commercial use only, subject to the Llama 3.1 Community License Agreement"
    "rag_tge_raft_zh": replace(
        _CARD,
        name="rag_tge_raft_zh",
        source="rag_tge",
        variant=TRANSLATED,
        license=LLAMA_LICENSE,
        license_notice=LLAMA_NOTICE,
    ),
}
# Any other source: the same numbers per variant (the card's), its texts keeping their license.
FAMILY_RECIPES = {f"long_context_{v}": replace(_CARD, name=f"long_context_{v}", variant=v) for v in VARIANTS}
RECIPES = {**CARD_RECIPES, **FAMILY_RECIPES}
CARD_SOURCES = frozenset(r.source for r in CARD_RECIPES.values())
recipes.register(FAMILY, RECIPES)


def source_name(partition: str) -> str:
    """``narrativeqa.en`` -> ``narrativeqa``: the release config names start with it."""
    return partition.split(".", 1)[0]


def product_recipe(partition: str, variant: str) -> str | None:
    """The recipe a variant of ``partition`` builds by default, or None when it is not built.

    A card source builds the card's configs only (``narrativeqa``: ``narrativeqa_clustered``); any
    other source builds raft, raft_syntactic and clustered under the family recipes.
    """
    src = source_name(partition)
    if src in CARD_SOURCES:
        return next((n for n, r in CARD_RECIPES.items() if r.source == src and r.variant == variant), None)
    return f"long_context_{variant}" if variant != TRANSLATED else None


def resolve(
    partition: str, variant: str, name: str | None, overrides: dict | None = None
) -> LongContextRecipe | None:
    """The recipe a variant's asset runs: ``name`` (None: the partition's product, possibly none)
    with ``overrides`` applied; None when the variant is not built for this partition (overrides
    then apply to nothing: one run config can set them on every variant).

    Raises:
        ValueError: a recipe of another variant, or a bad override.
    """
    chosen = name or product_recipe(partition, variant)
    if chosen is None:
        return None
    recipe = recipes.resolve(chosen, overrides or {})
    if recipe.variant != variant:
        raise ValueError(f"recipe {chosen!r} builds variant {recipe.variant!r}, not {variant!r}")
    return recipe


def config_name(partition: str, recipe: LongContextRecipe) -> str:
    """The release config a recipe builds from a partition (``narrativeqa_clustered``, ``rag_tge_raft_zh``)."""
    return f"{source_name(partition)}_{recipe.suffix}"
