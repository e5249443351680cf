"""The published configs, one entry each: the only place a config is named (plain data, Dagster-free).

A config of the release (``load_dataset(folder, NAME)``) is one :class:`PublishedConfig`: the asset
that makes its rows, its parent config, the filters it adds, the stages that apply its recipe, its
release description, its check and its card note. Everything else derives from the entries: the
multihop recipes (``multihop/recipes.py``), the filtered and corpus assets and their checks
(``defs/multihop/filters.py``), the release layout and its run-config names
(``release/layout.py``, ``defs/release/assets.py``), the card (``release/card.py``,
``multihop/card_section.py``), the column descriptions, the CLI's units and choices. Adding a
config is adding an entry (``register``, before those modules are imported: they derive their
tables when imported).

Entries are in release order: the first present config is the one ``load_dataset(folder)`` opens
without a name, and the card lists the configs in this order.
"""

from __future__ import annotations

from dataclasses import dataclass

# The families a config ships under: the release's columns, card sections and lineage per family.
FAMILIES = ("multihop", "corpus", "rag_sft")
# The production's stages that resolve a recipe, in pipeline order: every question config is built
# on them.
PRODUCTION: tuple[str, ...] = (
    "question_drafts",
    "question_checks",
    "distractors",
    "ablation_verdicts",
    "multihop_questions",
)


@dataclass(frozen=True, slots=True)
class PublishedConfig:
    """One published config: what makes it, what it derives from, and the words that describe it."""

    name: str  # the card's config name: the release folder and ``load_dataset(folder, NAME)``
    asset: str  # the asset (store name) whose rows the config ships
    family: str  # one of FAMILIES: the release's columns, card sections and lineage for it
    description: str  # the release's description (provenance/configs.json and the card)
    # the card's words for the config (each "the card:" quote, "ours:" reason), for the recipe's reader
    card: str = ""
    # the config whose rows this one filters (a question config) or whose contexts it draws its
    # abstracts from (a corpus config); None: built from the production or the snapshot itself
    parent: str | None = None
    filters: tuple[str, ...] = ()  # the filter stages it adds on its parent, in the order they run
    stages: tuple[str, ...] = ()  # the other stages that make it, after its parent's and its filters
    also_resolved_by: tuple[str, ...] = ()  # stages that apply its recipe by default without making it
    asset_description: str = ""  # the Dagster description of the asset a filtered or corpus config has
    code_version: str = "1"  # that asset's code version
    check_description: str = ""  # a filtered config's blocking check against its parent
    own_rows_allowed: bool = False  # the check: only rows sharing an id with the parent must be its rows
    card_note: str = ""  # the card's note on how this config differs from the seed card's
    renamable: bool = False  # its shipped name is a field of the release's run config
    unit: str = "rows"  # what one of its rows is (the console's counts)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(
                f"published config {self.name!r}: family {self.family!r} is not one of {FAMILIES}"
            )

    @property
    def is_multihop_recipe(self) -> bool:
        """Whether the multihop family's recipes hold one of this name (the question and corpus configs)."""
        return self.family in ("multihop", "corpus")


_CONFIGS: list[PublishedConfig] = [
    PublishedConfig(
        "default",
        "multihop_questions",
        "multihop",
        "Multi-hop bridge questions in the HotpotQA (hotpot_qa) layout: 2 gold + distractor paragraphs.",
        stages=PRODUCTION,
        also_resolved_by=("multihop_audit",),
        unit="questions",
    ),
    PublishedConfig(
        "filtered",
        "multihop_filtered",
        "multihop",
        "The rows of `default` kept by the first-hop judge and the mechanical rules, unchanged.",
        card=(
            'the card: "La configuration filtered est un sous-ensemble strict de la configuration par '
            'défaut, obtenu par deux filtres décrits plus bas." (Filtre 1, the first hop; Filtre 2, two rules)'
        ),
        parent="default",
        filters=("first_hop", "mechanical_rules"),
        asset_description=(
            "The `filtered` configuration: the rows of `default` that first_hop and mechanical_rules keep, "
            "unchanged; provenance/verdicts.parquet holds every filter's verdict."
        ),
        code_version="2",
        check_description="Every row of `filtered` is a row of `default`, same split, byte-identical; no duplicates.",
        renamable=True,
        unit="questions",
    ),
    PublishedConfig(
        "filtered_qwen",
        "multihop_filtered_qwen",
        "multihop",
        "The rows of `default` whose six criteria all hold for the annotator (same production as `default`).",
        card=(
            'the card: "Une question n\'est retenue que si les six critères sont satisfaits." ours: on '
            "default's production (the card's \"provient d'une production ultérieure et plus large\")"
        ),
        parent="default",
        filters=("criteria_annotation",),
        also_resolved_by=("review_labels",),
        asset_description=(
            "The `filtered_qwen` configuration: the rows of `default` whose six criteria all hold (same "
            "production as `default`; the card's comes from a larger, later one)."
        ),
        code_version="2",
        # The card: filtered_qwen "n'est pas un sous-ensemble de la configuration par défaut", but "Pour
        # ces identifiants communs le contenu est identique à l'octet près".
        check_description=(
            "Every row of `filtered_qwen` whose id is in `default` is that row of `default`, same split, "
            "byte-identical; no duplicates (the card's filtered_qwen is not a subset of default)."
        ),
        own_rows_allowed=True,
        card_note=(
            "In the HotpotQA-fr card `filtered_qwen` comes from a larger, later production; here it is a "
            "subset of `default` from the same production."
        ),
        renamable=True,
        unit="questions",
    ),
    PublishedConfig(
        "filtered_qwen_v2",
        "multihop_filtered_qwen_v2",
        "multihop",
        "The rows of `filtered_qwen` that the bridge judge and then the language judge keep, less the "
        "train questions the publishability score and the descriptor check drop.",
        card=(
            "the card: \"Plutôt qu'un juge généraliste, deux juges ciblés sont appliqués l'un après "
            'l\'autre.", then its two train-only steps ("score de publiabilité (train)", "contrôle des '
            'descripteurs")'
        ),
        parent="filtered_qwen",
        filters=("bridge_judge", "language_judge", "publishability_score", "descriptor_check"),
        asset_description=(
            "`filtered_qwen_v2`: the rows of `filtered_qwen` that bridge_judge then language_judge keep, "
            "less the train questions the card's two train-only steps (publishability_score, then "
            "descriptor_check) do not keep."
        ),
        code_version="4",
        check_description=(
            "Every row of `filtered_qwen_v2` is a row of `filtered_qwen` (the config it filters), unchanged."
        ),
        card_note=(
            "The HotpotQA-fr card's two train-only steps, a publishability score and a descriptor check, "
            "run on the train questions the two judges keep; the card gives neither prompt nor threshold, "
            "so both are ours (a score of 1 to 5, kept from the recipe's `publishability_min_score`). "
            "See docs/cards.md."
        ),
        renamable=True,
        unit="questions",
    ),
    PublishedConfig(
        "corpus_filtered_qwen_v2",
        "corpus_filtered_qwen_v2",
        "corpus",
        "The abstracts in the contexts (golds and distractors) of `filtered_qwen_v2`, per split.",
        card=(
            'the card: "Sous-ensemble de corpus réduit aux abstracts qui apparaissent dans les contextes '
            'de filtered_qwen_v2, documents gold et distracteurs, avec le même schéma."'
        ),
        parent="filtered_qwen_v2",
        stages=("corpus_filtered_qwen_v2",),
        asset_description=(
            "The abstracts in the contexts (golds and distractors) of ``filtered_qwen_v2``, per split, with\n"
            "the card's corpus columns (``id, title, text, sentences, qid``); counts of gold and\n"
            "distractor-only abstracts per split."
        ),
        code_version="2",
        renamable=True,
        unit="abstracts",
    ),
    PublishedConfig(
        "corpus",
        "abstracts",
        "corpus",
        "The retrieval corpus: one row per kept Wikipedia abstract, with its sentences.",
        card=(
            'the card: "La configuration corpus contient les 822 270 abstracts dont sont tirés tous les '
            'documents gold et distracteurs du jeu."'
        ),
        unit="abstracts",
    ),
    PublishedConfig(
        "hotpotqa_cite",
        "rag_sft",
        "rag_sft",
        "RAG SFT chat examples with verified inline citations and unanswerable twins.",
        unit="SFT examples",
    ),
]
_read = False  # set once a family derived its tables: a config registered later would be missed


def configs() -> tuple[PublishedConfig, ...]:
    """Every published config, in release order. A module that derives a table from them at import
    calls this, after which :func:`register` refuses (the table would miss the new entry)."""
    global _read
    _read = True
    return tuple(_CONFIGS)


def of_family(*families: str) -> tuple[PublishedConfig, ...]:
    """The configs of ``families``, in release order."""
    return tuple(c for c in configs() if c.family in families)


def by_name(name: str) -> PublishedConfig:
    """The config named ``name`` (the card's name).

    Raises:
        KeyError: no such config (the message lists them).
    """
    for c in configs():
        if c.name == name:
            return c
    raise KeyError(f"no published config named {name!r}: {[c.name for c in _CONFIGS]}")


def by_asset(asset: str) -> PublishedConfig:
    """The config that ships the rows of ``asset`` (a store name, e.g. ``rag_sft``): code names a
    config by its role this way, not by spelling its name.

    Raises:
        KeyError: no config ships that asset (the message lists the assets).
    """
    for c in configs():
        if c.asset == asset:
            return c
    raise KeyError(f"no published config ships asset {asset!r}: {[c.asset for c in _CONFIGS]}")


def filtered_configs() -> tuple[PublishedConfig, ...]:
    """The question configs that filter a parent's rows (each has an asset of its own and a check)."""
    return tuple(c for c in of_family("multihop") if c.filters)


def register(config: PublishedConfig, before: str | None = None) -> None:
    """Add ``config`` (in release order before the config ``before``, else last). Call it before
    importing the families (``ragsft_assets.definitions``, ``release``...): they derive their
    tables from the entries when imported.

    Raises:
        RuntimeError: a family already derived its tables from the entries.
        ValueError: a name or asset already taken, or a parent that is no config.
    """
    if any(c.name == config.name or c.asset == config.asset for c in _CONFIGS):
        raise ValueError(f"published config {config.name!r} (asset {config.asset!r}): name or asset taken")
    if config.parent is not None and config.parent not in {c.name for c in _CONFIGS}:
        raise ValueError(f"published config {config.name!r}: parent {config.parent!r} is no config")
    if _read:
        raise RuntimeError(
            f"register {config.name!r} before importing the families: the published configs were already read"
        )
    names = [c.name for c in _CONFIGS]
    _CONFIGS.insert(names.index(before) if before in names else len(_CONFIGS), config)
