"""The multihop family's recipes: the HotpotQA-fr card's values for each published configuration.

One frozen :class:`MultihopRecipe` per config of the card (``default``, ``filtered``,
``filtered_qwen``, ``filtered_qwen_v2``, ``corpus``, ``corpus_filtered_qwen_v2``), registered with
the shared mechanism (``ragsft_assets.recipes``). Every config carries every value, because each is
built from the same production: ``filtered`` is ``default``'s questions seen by two more filters.
A run names a recipe (by default the config the asset builds: :data:`ASSET_RECIPE`) and overrides
some fields; the stages receive the resolved object and read nothing else. Each value's comment
names the card sentence it comes from ("ours" where the card gives no number). Dagster-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ragsft_assets import recipes

FAMILY = "multihop"
DEFAULT, FILTERED, FILTERED_QWEN, FILTERED_QWEN_V2 = (
    "default",
    "filtered",
    "filtered_qwen",
    "filtered_qwen_v2",
)
CORPUS, CORPUS_V2 = "corpus", "corpus_filtered_qwen_v2"
ABLATIONS = ("ab", "a", "b", "none")
RETRIEVALS = ("tfidf", "bm25")
ROLES = ("judge", "annotator")
FILTERS = (
    "first_hop",
    "mechanical_rules",
    "criteria_annotation",
    "bridge_judge",
    "language_judge",
    "publishability_score",
    "descriptor_check",
)


@dataclass(frozen=True, slots=True)
class MultihopRecipe:
    """Every value the HotpotQA-fr card fixes for one configuration (defaults: the card's)."""

    name: str
    # -- generation
    # "from each (source a, bridge b) pair, an LLM writes 3 bridge questions"
    drafts_per_pair: int = 3
    # "answer at most 10 words and 70 characters" (local check and the generation's JSON schema)
    answer_max_words: int = 10
    answer_max_chars: int = 70
    generation_temperature: float = 0.7  # ours: the card names no sampling parameters
    # -- distractors
    # "the 8 best documents by bigram tf-idf over the corpus of the same split"
    retrieval: str = "tfidf"
    distractors_k: int = 8
    # -- before the judge: "near-duplicate questions removed, capped at 2 questions per bridge
    # entity and 3 per source document"; the card's arithmetic puts the 32,900 cap drops inside the
    # 43,722 questions removed before the judge
    max_per_bridge: int = 2
    max_per_source: int = 3
    near_dup_jaccard: float = 0.8  # ours: the card removes near duplicates without giving a threshold
    # -- the ablation judge
    # "A+B, then B alone, then A alone, then none": 281,119 + 144,144 + 95,470 + 69,863 = 590,596
    cascade_order: tuple[str, ...] = ("ab", "b", "a", "none")
    # "A alone -> IMPOSSIBLE; B alone -> IMPOSSIBLE; no document -> IMPOSSIBLE": a wrong guess fails too
    strict_impossible: bool = True
    ablation_role: str = "judge"  # "four ablations judged by the judge model"
    # "590,596 judge calls for 281,119 judged questions: 2.10" (a reference the run is compared with)
    card_judge_calls_per_judged: float = 2.10
    # -- audit: "a surface classifier ... reported against the 0.62 bar"
    surface_auc_bar: float = 0.62
    # -- filters (roles: "the card uses a different model per filter"; ours: judge, except the
    # six-criteria annotation by the annotator)
    first_hop_role: str = "judge"
    criteria_role: str = "annotator"
    bridge_judge_role: str = "judge"
    language_judge_role: str = "judge"
    # -- filtered_qwen_v2's train-only steps: "Écartées par le score de publiabilité (train) 17 197",
    # "Écartées par le contrôle des descripteurs (train) 1 512" (multihop/train_checks.py)
    # ours: the card names no model for them; the judge role, as the two targeted judges
    publishability_role: str = "judge"
    descriptor_check_role: str = "judge"
    # ours: the card gives no scale nor threshold; a score of 1 to 5, kept from 4 (publishable, at
    # most a minor flaw of style, in our prompt). The card's share, for comparison: derived: 29,080
    # + 17,197 + 1,512 + 46 = 47,835 train questions scored, 17,197 / 47,835 = 36.0% dropped there
    publishability_min_score: int = 4
    # "(train)": the splits the two steps judge; validation and test keep the two judges' verdicts
    train_only_splits: tuple[str, ...] = ("train",)
    # the filters whose keeps make this config, in the order they run, and the config it filters
    filters: tuple[str, ...] = ()
    parent: str | None = None  # None: the production itself (``default``)
    # -- corpus configs: "id, title, text, sentences, qid" (the card's five columns)
    corpus_columns: tuple[str, ...] = ("id", "title", "text", "sentences", "qid")

    def __post_init__(self) -> None:
        if sorted(self.cascade_order) != sorted(ABLATIONS):
            raise ValueError(
                f"recipe {self.name!r}: cascade_order must list each of {ABLATIONS} once, "
                f"not {self.cascade_order}"
            )
        if self.retrieval not in RETRIEVALS:
            raise ValueError(
                f"recipe {self.name!r}: retrieval must be one of {RETRIEVALS}, not {self.retrieval!r}"
            )
        for field in (
            "ablation_role",
            "first_hop_role",
            "criteria_role",
            "bridge_judge_role",
            "language_judge_role",
            "publishability_role",
            "descriptor_check_role",
        ):
            if getattr(self, field) not in ROLES:
                raise ValueError(f"recipe {self.name!r}: {field} must be one of {ROLES}")
        unknown = sorted(set(self.filters) - set(FILTERS))
        if unknown:
            raise ValueError(f"recipe {self.name!r}: unknown filters {unknown}; filters: {FILTERS}")
        for field in ("drafts_per_pair", "answer_max_words", "answer_max_chars", "distractors_k"):
            if getattr(self, field) < 1:
                raise ValueError(f"recipe {self.name!r}: {field} must be at least 1")
        if self.max_per_bridge < 1 or self.max_per_source < 1:
            raise ValueError(f"recipe {self.name!r}: the caps must be at least 1")
        if not 1 <= self.publishability_min_score <= 5:
            raise ValueError(f"recipe {self.name!r}: publishability_min_score must be a score of 1 to 5")
        if not 0.0 < self.near_dup_jaccard <= 1.0:
            raise ValueError(f"recipe {self.name!r}: near_dup_jaccard must be in (0, 1]")

    @property
    def context_size(self) -> int:
        """Paragraphs per question: "2 gold + 8 distractors" (10)."""
        return 2 + self.distractors_k


_DEFAULT = MultihopRecipe(DEFAULT)
RECIPES: dict[str, MultihopRecipe] = {
    DEFAULT: _DEFAULT,
    # "the first-hop judge then the mechanical rules (a year answer with one year; no question that
    # names the document)": filtered is default's rows those two keep
    FILTERED: dataclasses.replace(
        _DEFAULT, name=FILTERED, filters=("first_hop", "mechanical_rules"), parent=DEFAULT
    ),
    # "six binary criteria ... kept only if all six hold"
    FILTERED_QWEN: dataclasses.replace(
        _DEFAULT, name=FILTERED_QWEN, filters=("criteria_annotation",), parent=DEFAULT
    ),
    # "deux juges ciblés sont appliqués l'un après l'autre", then the card's two train-only steps
    # ("score de publiabilité (train)", "contrôle des descripteurs (train)")
    FILTERED_QWEN_V2: dataclasses.replace(
        _DEFAULT,
        name=FILTERED_QWEN_V2,
        filters=("bridge_judge", "language_judge", "publishability_score", "descriptor_check"),
        parent=FILTERED_QWEN,
    ),
    # "the retrieval corpus": every kept abstract, the card's five columns
    CORPUS: dataclasses.replace(_DEFAULT, name=CORPUS),
    # "the abstracts that appear in its contexts (golds and distractors), per split"
    CORPUS_V2: dataclasses.replace(_DEFAULT, name=CORPUS_V2, parent=FILTERED_QWEN_V2),
}
recipes.register(FAMILY, RECIPES)

# The recipe an asset resolves when its run config names none: the config the asset builds.
ASSET_RECIPE = {
    "question_drafts": DEFAULT,
    "question_checks": DEFAULT,
    "distractors": DEFAULT,
    "ablation_verdicts": DEFAULT,
    "multihop_questions": DEFAULT,
    "multihop_audit": DEFAULT,
    "first_hop": FILTERED,
    "mechanical_rules": FILTERED,
    "criteria_annotation": FILTERED_QWEN,
    "review_labels": FILTERED_QWEN,
    "bridge_judge": FILTERED_QWEN_V2,
    "language_judge": FILTERED_QWEN_V2,
    "publishability_score": FILTERED_QWEN_V2,
    "descriptor_check": FILTERED_QWEN_V2,
    "corpus_filtered_qwen_v2": CORPUS_V2,
}


def resolve(asset: str, name: str | None, overrides: dict | None = None) -> MultihopRecipe:
    """The recipe ``name`` (None: the one of the config ``asset`` builds) with ``overrides`` applied.

    Raises:
        KeyError: an unknown recipe name (the message lists the known ones).
        ValueError: an unknown field, a value of the wrong type, or a value the recipe rejects.
    """
    recipe = recipes.resolve(name or ASSET_RECIPE[asset], overrides or {})
    if not isinstance(recipe, MultihopRecipe):
        raise ValueError(f"recipe {recipe.name!r} is not a multihop recipe: one of {recipes.names(FAMILY)}")
    return recipe
