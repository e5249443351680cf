"""The rag_sft family's recipes: the Luciole RAG card's values for each published configuration.

One frozen :class:`RagSftRecipe` per config (``hotpotqa_cite``, ``hotpotqa_fr_abstracts_v2``,
``trust_align``), registered with the shared mechanism (``ragsft_assets.recipes``). A run names a
recipe (or takes its partition's: :func:`default_recipe`) and overrides some fields; the chain's
stages receive the resolved object and read nothing else. Each value's comment names the card
sentence it comes from. Dagster-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ragsft_assets import recipes

FAMILY = "rag_sft"
HOTPOTQA_CITE = "hotpotqa_cite"
FR_V2 = "hotpotqa_fr_abstracts_v2"
TRUST_ALIGN = "trust_align"
TRUST_ALIGN_SOURCE = "trust_align"  # the qa_source whose keys (trust_align.<lang>) take that recipe

# The citation check's two modes for the stricter quoting rules (partial_word, too_short):
# "flag" records them in the ledger and keeps the row (the card's check: verbatim, or fragments in
# order around an ellipsis); "drop" fails the tag like not_found.
CITATION_CHECK_MODES = ("flag", "drop")
LANGUAGE_SCOPES = ("all", "answerable")
# Which responses cleanup step 6 (a [Source N] named in the text but not cited with a tag) drops.
UNTAGGED_SOURCE_SCOPES = ("answers", "all", "off")


@dataclass(frozen=True, slots=True)
class RagSftRecipe:
    """Every value a Luciole RAG card fixes for one configuration."""

    name: str
    # -- input (the snapshot chain; the QA chain reads its one qa/questions asset)
    questions: str  # the snapshot's question configuration read
    questions_splits: tuple[str, ...]  # its splits; () = every split
    # -- prompts
    instructions_language: str  # the language of the system instructions (OpenRAG's are English)
    twin_share: float  # questions that get an unanswerable twin
    twin_both_share: float  # of twins, the share losing both golds (else one)
    references_share: float  # pairs asked for a final References section instead of inline tags
    strict_share: float  # pairs under the strict refusal rule (one dictated phrase)
    max_drop_fraction: float  # distractors dropped: uniform in 0..floor(this x distractors)
    document_token_budget: int  # questions whose documents exceed this many tokens go; 0 = no budget
    multi_answer: bool  # multi-answer rows with their own unanswerable label, no twins, no citation F1
    # -- generation
    temperature: float
    max_tokens: int
    generation_thinking: bool  # the generator's thinking mode (the task's default; a role's setting wins)
    # -- verdicts
    judges_thinking: bool  # the refusal and language judges' thinking mode
    factual_rubric: str  # the factual judge's prompt task
    factual_judge_thinking: bool  # the factual judge reasons before its verdict
    factual_judge_max_tokens: int  # the verdict's budget without thinking
    factual_judge_thinking_max_tokens: int  # the budget of a call that thinks (reasoning + verdict)
    citation_check: str  # "flag" | "drop": the stricter quoting rules (CITATION_CHECK_MODES)
    min_quote_words: int  # too_short below this many words per fragment
    language_judge_scope: str  # which non-English examples the language judge gates
    # -- formatting (the card's cleanup steps)
    remove_idle_ellipses: bool  # step 5
    untagged_source_scope: str  # step 6 (UNTAGGED_SOURCE_SCOPES)
    rewrite_refusals: bool  # step 7, the refusal-opening rewrite
    drop_answer_only_in_ref: bool
    drop_wrong_language: bool
    # -- statistics
    commitment_refusal_share: float  # the mix the commitment table is measured on

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("citation_check", self.citation_check, CITATION_CHECK_MODES),
            ("language_judge_scope", self.language_judge_scope, LANGUAGE_SCOPES),
            ("untagged_source_scope", self.untagged_source_scope, UNTAGGED_SOURCE_SCOPES),
        ):
            if value not in allowed:
                raise ValueError(f"recipe {self.name!r}: {name} must be one of {allowed}, not {value!r}")
        for name in (
            "twin_share",
            "twin_both_share",
            "references_share",
            "strict_share",
            "max_drop_fraction",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"recipe {self.name!r}: {name} must be in [0, 1]")

    @property
    def strict_quotes_drop(self) -> bool:
        """Whether partial_word / too_short fail a tag (else they are flagged only)."""
        return self.citation_check == "drop"


# Comments paraphrase the Luciole RAG card (the card: ...); quotation marks mark its own words.
HOTPOTQA_CITE_RECIPE = RagSftRecipe(
    name=HOTPOTQA_CITE,
    questions="default",  # the card: HotpotQA-format questions with their distractor paragraphs
    questions_splits=(),
    instructions_language="en",  # the card: the prompt "the one OpenRAG sends at inference"
    twin_share=0.22,  # the card: 22% of questions get an unanswerable twin
    twin_both_share=0.6,  # the card: both golds removed in 60% of twins, one in 40%
    references_share=0.04,  # the card: 4% of pairs cite in a final References section
    strict_share=0.05,  # the card: the strict refusal rule on 5% of pairs
    max_drop_fraction=0.7,  # the card: up to 70% of the distractors dropped, the rest shuffled
    document_token_budget=0,  # the card sets no token budget for this config
    multi_answer=False,
    temperature=0.1,  # the card's generator sampling
    max_tokens=512,
    generation_thinking=False,  # the card: responses generated "without thinking mode"
    judges_thinking=False,  # the card's judges run without thinking, but for trust_align's factual judge
    # the card: "correct answer, all supporting facts used, sound reasoning; the judge sees the gold
    # answer and the supporting fact titles"
    factual_rubric="rag_judge_factual",
    factual_judge_thinking=False,
    factual_judge_max_tokens=160,
    factual_judge_thinking_max_tokens=2048,
    citation_check="flag",  # the card: verbatim, or fragments verbatim and in order around an ellipsis
    min_quote_words=3,  # ours: too_short under 3 words (flagged in the ledger, not dropped)
    language_judge_scope="all",
    remove_idle_ellipses=True,  # step 5: "an ellipsis that skips no word of the source ... is removed"
    untagged_source_scope="answers",  # step 6: an answer naming a [Source N] it does not cite goes
    rewrite_refusals=False,  # the card has no refusal rewrite for this config
    drop_answer_only_in_ref=False,
    drop_wrong_language=False,
    commitment_refusal_share=0.10,
)

# The same card: the values not listed are hotpotqa_cite's.
FR_V2_RECIPE = replace(
    HOTPOTQA_CITE_RECIPE,
    name=FR_V2,
    questions="filtered_qwen_v2",  # the card: built from filtered_qwen_v2's train split
    questions_splits=("train",),
    twin_both_share=1.0,  # the card: a twin always loses both golds
    document_token_budget=8192,  # the card: questions whose documents exceed 8,192 tokens are dropped
    language_judge_scope="answerable",  # the card: the French-quality judge gates the answers
    untagged_source_scope="off",  # the card has no step 6: 46% of its refusals name a document by number
    rewrite_refusals=True,  # step 7: the refusal-opening rewrite
    drop_answer_only_in_ref=True,  # the card: an answer given only inside a <ref> is dropped
    drop_wrong_language=True,  # the card: a response not in the data's language is dropped
)

TRUST_ALIGN_RECIPE = replace(
    HOTPOTQA_CITE_RECIPE,
    name=TRUST_ALIGN,
    twin_share=0.0,  # the card: no twins, the source brings its own unanswerable rows
    twin_both_share=0.0,
    references_share=0.0,  # the card: inline citations only
    strict_share=0.04,  # the card: the strict refusal rule on about 4% of examples
    multi_answer=True,  # ASQA/QAMPARI: several answers per question, no citation F1
    # the card: every answer given and "each statement is supported by the documents"
    factual_rubric="rag_judge_factual_multi",
    factual_judge_thinking=True,  # the card's judge thinks before its verdict
    untagged_source_scope="all",  # the card: a response naming a document outside a tag is dropped
)

RECIPES: dict[str, RagSftRecipe] = {
    r.name: r for r in (HOTPOTQA_CITE_RECIPE, FR_V2_RECIPE, TRUST_ALIGN_RECIPE)
}
recipes.register(FAMILY, RECIPES)


STAGES = ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")


def chain_record(stage_records: Mapping[str, Mapping[str, Any]], last: Mapping[str, Any]) -> dict[str, Any]:
    """One record for the whole chain (what the card says): ``last`` (the final stage's record)
    with the fields any stage changed, since each stage resolves the recipe from its own config.

    A field changed in one stage only (e.g. ``twin_share`` on ``rag_prompts``) is a difference of
    the data all the same. Records of other assets in ``stage_records`` are ignored; a stage that
    ran another recipe than ``last`` is listed under ``other_recipes``.
    """
    changed: dict[str, Any] = {}
    others: dict[str, str] = {}
    for stage in STAGES:
        rec = stage_records.get(stage)
        if not rec:
            continue
        if rec.get("recipe") != last.get("recipe"):
            others[stage] = str(rec.get("recipe"))
            continue
        changed.update(rec.get("changed") or {})
    changed.update(last.get("changed") or {})
    out = {**last, "changed": dict(sorted(changed.items()))}
    if others:
        out["other_recipes"] = others
    return out


def is_trust_align_partition(partition: str) -> bool:
    """Whether a partition key is a Trust-Align source (``trust_align.<lang>``)."""
    return partition.split(".", 1)[0] == TRUST_ALIGN_SOURCE


def default_recipe(lang: str, partition: str = "") -> str:
    """The recipe a partition builds when the run names none: ``trust_align`` for a
    ``trust_align.<lang>`` source, ``hotpotqa_fr_abstracts_v2`` for French data, else ``hotpotqa_cite``."""
    if is_trust_align_partition(partition):
        return TRUST_ALIGN
    return FR_V2 if lang == "fr" else HOTPOTQA_CITE


def resolve(name: str | None, overrides: dict | None, lang: str, partition: str) -> RagSftRecipe:
    """The run's recipe: ``name`` (or the partition's, :func:`default_recipe`) with ``overrides``.

    Raises:
        KeyError: an unknown recipe name.
        ValueError: an override that names no field or does not fit its type or range.
    """
    resolved = recipes.resolve(name or default_recipe(lang, partition), overrides or {})
    if not isinstance(resolved, RagSftRecipe):
        raise ValueError(f"recipe {resolved.name!r} is not a rag_sft recipe (one of {', '.join(RECIPES)})")
    return resolved
