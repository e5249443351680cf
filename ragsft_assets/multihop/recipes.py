"""The multihop family's recipes: the HotpotQA-fr card's values for each published configuration.

One frozen :class:`MultihopRecipe` per question and corpus config of the card (each an entry of
``ragsft_assets.published_configs``, which holds its parent, its filters and the card's words for
it), registered with the shared mechanism (``ragsft_assets.recipes``). Every config carries every
value, because each is built from the same production: a filtered config is ``default``'s
questions seen by more filters.
A run names a recipe (by default the config the asset builds: :data:`ASSET_RECIPE`) and overrides
some fields; the stages receive the resolved object and read nothing else. Each value's comment
says "the card:" with its words (001, quoted), "ours:" with the reason where the card gives no
value, or "derived:" with the arithmetic from the card's figures. Dagster-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ragsft_assets import published_configs, recipes

FAMILY = "multihop"
DEFAULT = "default"  # the production's own config: every other one is built from its questions
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
    # -- the draw
    # the card: "Il reste 1 778 280 arêtes, dont 200 000 paires ont été tirées pour ce jeu."
    # bridge_pairs draws this many (fewer when the graph has fewer) and question_drafts takes them
    # all; a snapshot's snapshot.json ``max_pairs`` (the sample's quick demo) or a run config caps it
    pairs_drawn: int = 200_000
    # -- generation
    # the card: "La génération utilise Mistral-Small-3.2-24B-Instruct-2506-FP8, avec trois questions
    # demandées par paire."
    drafts_per_pair: int = 3
    # the card: "réponse d'au plus dix mots et soixante-dix caractères" (a local check, and the
    # generation's JSON schema)
    answer_max_words: int = 10
    # the card: "réponse d'au plus dix mots et soixante-dix caractères"
    answer_max_chars: int = 70
    # ours: the card names no sampling parameter for the generation; 0.7 varies the three questions
    # of a pair
    generation_temperature: float = 0.7
    # -- distractors
    # the card: "Les huit distracteurs sont les meilleurs résultats d'un tf-idf de bigrammes calculé
    # sur les abstracts du corpus, la question servant de requête."
    retrieval: str = "tfidf"
    # the card: "Les huit distracteurs sont les meilleurs résultats d'un tf-idf de bigrammes"
    distractors_k: int = 8
    # -- before the judge
    # the card: "les plafonds de deux questions par entité-pont et trois par document source
    # (32 900)"; derived: run before the judge, since 281,119 judged + 43,722 removed before the
    # judge = 324,944 generated leaves the 32,900 cap drops among the 43,722
    max_per_bridge: int = 2
    # the card: "les plafonds de deux questions par entité-pont et trois par document source (32 900)"
    max_per_source: int = 3
    # ours: the card says "une déduplication est appliquée avant le juge" without a measure; questions
    # whose word sets overlap at 0.8 (Jaccard) or more are one question
    near_dup_jaccard: float = 0.8
    # -- the ablation judge
    # derived: "Les ablations sont exécutées en cascade"; only this order gives the card's "Appels de
    # juge 590 596": 281,119 + (281,119 - 136,975) + (144,144 - 48,674) + (95,470 - 25,607) =
    # 281,119 + 144,144 + 95,470 + 69,863 = 590,596
    cascade_order: tuple[str, ...] = ("ab", "b", "a", "none")
    # the card: "Une question n'est retenue que si les quatre ablations se comportent comme attendu."
    # (A seul, B seul, aucun: IMPOSSIBLE), so a wrong guess without both documents fails too
    strict_impossible: bool = True
    # the card: "Elle est ensuite soumise à quatre ablations indépendantes, jugées par le même modèle."
    # (the generator's: our judge role)
    ablation_role: str = "judge"
    # derived: "Appels de juge 590 596" / "Jugées 281 119" = 2.10 (the reference a run is shown beside)
    card_judge_calls_per_judged: float = 2.10
    # ours: the card's production released 65,565 questions; one that released none from its drafts
    # failed somewhere, so the blocking checks fail on it. True turns that into a warning (a quick
    # demo on a tiny model; the sample snapshot's snapshot.json sets it the same way)
    allow_empty_output: bool = False
    # -- audit
    # the card: "pour un seuil d'acceptation fixé à 0,62 avant la production"
    surface_auc_bar: float = 0.62
    # -- filters
    # the card: "Juge Mistral-Small-3.2-24B-Instruct-2506-FP8, température 0, un appel par question."
    # (the generation's model: our judge role)
    first_hop_role: str = "judge"
    # ours: the card's annotator is another model ("annotées une par une par Qwen3.8-27B"): the
    # annotator role
    criteria_role: str = "annotator"
    # ours: the card's "Qwen3.8-27B pour pont sur 37 915 questions et Qwen3.5-35B-A3B-FP8 sur les
    # autres" is two models; one role, the judge
    bridge_judge_role: str = "judge"
    # ours: the card's "Qwen3.5-35B-A3B-FP8 pour langue" is one model; the judge role
    language_judge_role: str = "judge"
    # -- the targeted judges' train-only steps (multihop/train_checks.py)
    # ours: the card counts "Écartées par le score de publiabilité (train) 17 197" and names no model;
    # the judge role, as the two targeted judges
    publishability_role: str = "judge"
    # ours: the card counts "Écartées par le contrôle des descripteurs (train) 1 512" and names no
    # model; the judge role, as the two targeted judges
    descriptor_check_role: str = "judge"
    # ours: the card gives no scale nor threshold; a score of 1 to 5, kept from 4 (publishable, at
    # most a minor flaw of style, in our prompt). For comparison, derived: 29,080 + 17,197 + 1,512 +
    # 46 = 47,835 train questions scored by the card, 17,197 / 47,835 = 36.0% dropped there
    publishability_min_score: int = 4
    # the card: "Écartées par le score de publiabilité (train) 17 197": the splits the two steps
    # judge; validation and test keep the two judges' verdicts
    train_only_splits: tuple[str, ...] = ("train",)
    # ours: none in the production itself; each filtered config names its own (the card's sections)
    filters: tuple[str, ...] = ()
    # ours: None for the production itself (``default``); each filtered config names its parent
    parent: str | None = None
    # the card: "id string 24 premiers caractères hexadécimaux du SHA-256 du titre", then title,
    # text, sentences and qid (its corpus schema)
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
        for field in (
            "pairs_drawn",
            "drafts_per_pair",
            "answer_max_words",
            "answer_max_chars",
            "distractors_k",
        ):
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
        """Paragraphs per question: "Chaque contexte contient dix paragraphes : les deux abstracts
        nécessaires à la réponse et huit distracteurs." (10)."""
        return 2 + self.distractors_k


_DEFAULT = MultihopRecipe(DEFAULT)
# Each config's recipe is the card's values with its entry's parent and filters (the card's words for
# each config are its entry's ``card``).
RECIPES: dict[str, MultihopRecipe] = {
    c.name: dataclasses.replace(_DEFAULT, name=c.name, filters=c.filters, parent=c.parent)
    for c in published_configs.configs()
    if c.is_multihop_recipe
}
recipes.register(FAMILY, RECIPES)


# The recipe an asset resolves when its run config names none: the config the asset builds (the
# first config that lists it: a later config with the same filters runs them under its own name).
def _asset_recipes() -> dict[str, str]:
    out: dict[str, str] = {}
    for c in published_configs.configs():
        if c.is_multihop_recipe:
            for asset in (*c.stages, *c.also_resolved_by, *c.filters):
                out.setdefault(asset, c.name)
    return out


ASSET_RECIPE = _asset_recipes()


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


def default_pairs_drawn() -> int:
    """How many pairs ``bridge_pairs`` draws when neither the run nor the snapshot says: the
    ``default`` recipe's ``pairs_drawn`` (the card's 200,000)."""
    return RECIPES[DEFAULT].pairs_drawn
