"""The rag_sft family's recipes: the Luciole RAG card's values for each published configuration.

One frozen :class:`RagSftRecipe` per config (``hotpotqa_cite``, ``hotpotqa_fr_abstracts_v2``,
``trust_align``), registered with the shared mechanism (``ragsft_assets.recipes``). A run names a
recipe (or takes its partition's: :func:`default_recipe`) and overrides some fields; the chain's
stages receive the resolved object and read nothing else. Each value's comment names the card
sentence it comes from ("the card:"), the arithmetic ("derived:") or why the value is ours
("ours:"). Dagster-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ragsft_assets import published_configs, recipes

FAMILY = "rag_sft"
# The citation config's recipe is named after it: the published config that ships the rag_sft rows.
HOTPOTQA_CITE = published_configs.by_asset("rag_sft").name
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
    judges_thinking: bool  # the refusal and language judges' thinking mode (the card's, per config)
    factual_rubric: str  # the factual judge's prompt task
    factual_judge_thinking: bool  # the factual judge reasons before its verdict
    factual_judge_max_tokens: int  # the verdict's budget without thinking
    factual_judge_thinking_max_tokens: int  # the budget of a call that thinks (reasoning + verdict)
    judges_thinking_max_tokens: int  # the refusal and language judges' budget when they think
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


# Every value's comment says where it comes from: "the card:" quotes the Luciole RAG card (000) word
# for word, between double quotes; "derived:" gives the arithmetic from the card's figures; "ours:"
# is a value the card does not state, with the reason (test_cards_000 checks all three).
HOTPOTQA_CITE_RECIPE = RagSftRecipe(
    name=HOTPOTQA_CITE,
    # the card: "All 90,447 questions of the HotpotQA training set, distractor setting"; ours: a
    # snapshot's HotpotQA-layout questions (`default`) stand for that set
    questions="default",
    # the card: "There is a single split" and "All 90,447 questions of the HotpotQA training set"
    questions_splits=("train",),
    # the card: "The prompt is the one OpenRAG sends at inference: same system instructions"
    instructions_language="en",
    twin_share=0.22,  # the card: "22% of the questions get a twin without sufficient evidence"
    # ours: the card gives the split only after the filter ("In the final data, 60.8% of the
    # refusals have no gold paragraph left and 39.2% keep one"); 0.6 draws it before
    twin_both_share=0.6,
    references_share=0.04,  # the card: "(References with probability 0.04)"
    # the card: "The strict variant is given to about 5% of the examples, answerable or not"
    strict_share=0.05,
    # the card: "Up to 70% of the distractors are dropped at random and the documents are shuffled"
    max_drop_fraction=0.7,
    # ours: the card states a token budget for hotpotqa_fr_abstracts_v2 only ("the 8,192-token
    # budget"); 0 = none
    document_token_budget=0,
    # the card: "Unanswerable examples are minimal pairs" and "citation F1 = 1"
    multi_answer=False,
    temperature=0.1,  # the card: "Qwen3.6-35B-A3B without thinking mode, temperature 0.1"
    # ours: the card states no generation budget; 512 tokens hold its longest responses with room
    # ("median 90, p90 180" words for refusals)
    max_tokens=512,
    generation_thinking=False,  # the card: "Qwen3.6-35B-A3B without thinking mode"
    # ours: the card names the judge ("Mistral-Small-3.2-24B-Instruct-2506 as judge, plus
    # deterministic checks") and no thinking mode for it, unlike trust_align's "(thinking mode)"
    judges_thinking=False,
    # the card: "correct answer, all supporting facts used, sound reasoning; the judge sees the gold
    # answer and the supporting fact titles"
    factual_rubric="rag_judge_factual",
    # ours: as judges_thinking, no thinking mode named for "Mistral-Small-3.2-24B-Instruct-2506 as judge"
    factual_judge_thinking=False,
    # ours: the verdict is one JSON object, a score and a one-sentence reason
    factual_judge_max_tokens=160,
    # ours: a judge that thinks writes its reasoning first; 2,048 tokens hold it and the verdict
    factual_judge_thinking_max_tokens=2048,
    # ours: the same room for the refusal and language judges when they think
    judges_thinking_max_tokens=2048,
    # the card: "it is accepted when each fragment is verbatim in the cited document and the
    # fragments appear in order"; ours: the stricter rules only flag
    citation_check="flag",
    min_quote_words=3,  # ours: too_short under 3 words (flagged in the ledger, not dropped)
    # ours: the card's hotpotqa_cite data is English and has no language judge; the judge reads only
    # non-English examples, so the scope changes nothing here
    language_judge_scope="all",
    # the card: "an ellipsis that skips no word of the source (a trailing ..., or fragments adjacent
    # in the document) is removed from the excerpt"
    remove_idle_ellipses=True,
    # the card: "126 whose answer names a [Source N] it does not cite with a tag"
    untagged_source_scope="answers",
    # ours: the card's step 7 ("Refusal openings") is hotpotqa_fr_abstracts_v2's only
    rewrite_refusals=False,
    # ours: the card's cleanup of hotpotqa_cite drops 126 and 274 questions, none for this reason
    drop_answer_only_in_ref=False,
    drop_wrong_language=False,  # ours: English data, the card's cleanup drops none for its language
    commitment_refusal_share=0.10,  # the card: "measured on the 10% refusal mix"
)

# The same card, section hotpotqa_fr_abstracts_v2 ("Same three fields and same document layout as
# hotpotqa_cite"): every field is listed, so that each carries its own comment.
FR_V2_RECIPE = replace(
    HOTPOTQA_CITE_RECIPE,
    name=FR_V2,
    # the card: "The train split of the filtered_qwen_v2 configuration of Mvanypersele/hotpotqa-fr-abstracts"
    questions="filtered_qwen_v2",
    questions_splits=("train",),  # the card: "The train split of the filtered_qwen_v2 configuration"
    # the card: "The system instructions are the English OpenRAG prompt of hotpotqa_cite"
    instructions_language="en",
    twin_share=0.22,  # the card: "22% of the questions (6,396) get a twin"
    twin_both_share=1.0,  # the card: "a twin from which both gold abstracts are removed"
    # ours: the card gives the result ("in 3.3% of the examples, a final References section"), not
    # the draw; hotpotqa_cite's draw ("References with probability 0.04") gives 3.1% there
    references_share=0.04,
    # ours: the card gives the kept share ("the strict variant (one of five dictated exact refusal
    # phrases) for 5.2%"); drawn at hotpotqa_cite's "about 5%" before the filter
    strict_share=0.05,
    # derived: "5 to 10 documents per prompt" from 2 gold abstracts + 8 distractors: at most 5 of
    # the 8 dropped, floor(0.7 x 8) = 5, as hotpotqa_cite's "Up to 70% of the distractors"
    max_drop_fraction=0.7,
    # the card: "4 questions whose documents exceed the 8,192-token budget are dropped"
    document_token_budget=8192,
    # the card: "Unanswerable examples are minimal pairs" and "citation F1 = 1"
    multi_answer=False,
    temperature=0.1,  # the card: "Qwen3.6-35B-A3B without thinking mode, temperature 0.1"
    max_tokens=512,  # ours: as hotpotqa_cite ("median 82, p90 131" words for refusals)
    generation_thinking=False,  # the card: "Qwen3.6-35B-A3B without thinking mode"
    # ours: the card names the judge ("Mistral-Small-3.2-24B-Instruct-2506 as judge, plus
    # deterministic checks") and no thinking mode for it
    judges_thinking=False,
    factual_rubric="rag_judge_factual",  # the card: "the same verification" as hotpotqa_cite
    factual_judge_thinking=False,  # ours: as judges_thinking
    factual_judge_max_tokens=160,  # ours: one JSON verdict, as hotpotqa_cite
    factual_judge_thinking_max_tokens=2048,  # ours: as hotpotqa_cite
    judges_thinking_max_tokens=2048,  # ours: as hotpotqa_cite
    # the card: "every <ref> excerpt is found in the cited document"; ours: the stricter rules flag
    citation_check="flag",
    min_quote_words=3,  # ours: as hotpotqa_cite
    # the card: "An answerable example is kept when the factual judge gives 5/5, a French-quality
    # judge gives 5/5"
    language_judge_scope="answerable",
    remove_idle_ellipses=True,  # the card: "An ellipsis that skips no word of the source is removed"
    # ours: the card has no such drop here ("46% of the refusals name a document by its number
    # outside a tag")
    untagged_source_scope="off",
    # the card: "every refusal written under the generic rule goes through a deterministic rewrite"
    rewrite_refusals=True,
    drop_answer_only_in_ref=True,  # the card: "8 rows whose answer appears only inside a <ref> tag"
    # the card: "1 question whose response is in English is dropped with its twin"
    drop_wrong_language=True,
    commitment_refusal_share=0.10,  # the card: "measured on the 10% refusal mix"
)

# The same card, section trust_align: every field is listed, so that each carries its own comment.
TRUST_ALIGN_RECIPE = replace(
    HOTPOTQA_CITE_RECIPE,
    name=TRUST_ALIGN,
    # ours: unused, the QA chain reads its one input (qa/questions, sources/trust_align.py)
    questions="default",
    questions_splits=(),  # ours: unused, as questions (the source reader makes train and validation)
    # the card: "The system prompt, the document layout ([Source N] blocks) and the citation format
    # are those of hotpotqa_cite"
    instructions_language="en",
    twin_share=0.0,  # the card: "Unanswerable examples are not twins of answerable ones"
    twin_both_share=0.0,  # the card: "Unanswerable examples are not twins of answerable ones"
    references_share=0.0,  # the card: "All examples use inline citations (no References section)"
    # derived: the card's strict rule "is used by 18 of the 280 training refusals" and "by 59 of
    # the 1,457 answerable training examples": (18 + 59) / (280 + 1,457) = 77 / 1,737 = 0.044
    strict_share=0.044,
    # the card: "up to 70% of the non-supporting documents are dropped at random"
    max_drop_fraction=0.7,
    document_token_budget=0,  # ours: the card states no token budget for trust_align
    # the card: "There is no citation F1 requirement" and "questions with several answers"
    multi_answer=True,
    temperature=0.1,  # the card: "Qwen3.5-35B-A3B (FP8) without thinking mode, temperature 0.1"
    max_tokens=512,  # ours: as hotpotqa_cite ("median 136, p90 255" words for answers)
    generation_thinking=False,  # the card: "Qwen3.5-35B-A3B (FP8) without thinking mode"
    # the card: "Qwen3.8-27B as judge (thinking mode)": the refusal judge thinks too
    judges_thinking=True,
    # the card: "every reference answer is given, each statement is supported by the documents"
    factual_rubric="rag_judge_factual_multi",
    factual_judge_thinking=True,  # the card: "Qwen3.8-27B as judge (thinking mode)"
    factual_judge_max_tokens=160,  # ours: one JSON verdict, as hotpotqa_cite
    factual_judge_thinking_max_tokens=2048,  # ours: as hotpotqa_cite
    judges_thinking_max_tokens=2048,  # ours: as hotpotqa_cite
    # the card: "every <ref> points to an existing document and its excerpt is verbatim in it"
    citation_check="flag",
    min_quote_words=3,  # ours: as hotpotqa_cite
    language_judge_scope="all",  # ours: English data, the card has no language judge here
    # ours: the card splits elided excerpts ("split into consecutive tags"); an idle ellipsis (one
    # that skips no word) goes first, as in hotpotqa_cite
    remove_idle_ellipses=True,
    # the card: "Responses that name a document by number outside a tag"
    untagged_source_scope="all",
    rewrite_refusals=False,  # ours: the card's refusal-opening rewrite is hotpotqa_fr_abstracts_v2's
    drop_answer_only_in_ref=False,  # ours: the card's cleanup of trust_align has no such drop
    drop_wrong_language=False,  # ours: English data, no such drop in the card
    # ours: the card's table is for the two HotpotQA configs ("measured on the 10% refusal mix");
    # the same mix here
    commitment_refusal_share=0.10,
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
