"""What each column of an asset holds: the descriptions the UI's Columns table shows.

The product tables keep the seeds' schemas, so their columns are described as the seed cards'
schema tables describe them (HotpotQA's fields, the corpus's five columns, the RAG SFT chat rows,
the long-context rows, Recall Rewrite's ``-sft`` and ``-full`` fields), with what this project
adds (``split``, ``pair_id``, the ids' formula). Dagster-free: ``defs/metadata.py`` turns them into
``TableColumn`` descriptions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ragsft_assets import published_configs

_SPLIT = "The split: train, validation or test (drawn per document from the seed, before any graph)."
_MESSAGES_RAG = (
    "The chat: system (the instructions and the documents as OpenRAG `[Source N]` blocks), user (the"
    ' question), assistant (the answer citing its sources as `<ref id="N">excerpt</ref>`, each'
    " excerpt verbatim in document N, or a refusal when the documents do not answer)."
)

# The HotpotQA card's fields, in the Hugging Face `hotpot_qa` layout (the HotpotQA-fr configs keep it).
HOTPOTQA: dict[str, str] = {
    "id": "Question id: 24 hex characters of SHA-256 of (source document id, bridge document id, draft index).",
    # the card's name of the key in the published configs ("_id string identifiant hexadécimal de 24 caractères")
    "_id": "Question id (the card's `_id`): 24 hex characters of SHA-256 of (source document id, bridge document id, draft index).",
    "question": "The question: its first hop goes through the source document A, its answer is in the bridge document B.",
    "answer": "The answer: a short span that appears verbatim in the bridge document.",
    "type": "The question type: `bridge` (through a bridge entity) or `comparison`; this project writes bridge questions.",
    "level": "The difficulty: easy, medium or hard.",
    "supporting_facts": "The supporting sentences: `title` of the document and `sent_id`, the index of the sentence in its `sentences`.",
    "context": "The paragraphs shown with the question: `title` and `sentences` of the 2 gold and up to 8 distractor documents, shuffled.",
    "split": _SPLIT,
}

# The corpus configs' five columns (HotpotQA-fr card), and what the abstracts asset adds.
CORPUS: dict[str, str] = {
    "id": "Document id: 24 hex characters of SHA-256 of the title.",
    "title": "The Wikipedia article's title.",
    "text": "The article's abstract (its lead section) as plain text.",
    "sentences": "The abstract cut into sentences; `supporting_facts.sent_id` indexes this list.",
    "qid": "The article's Wikidata item id (Q...).",
}
ABSTRACTS: dict[str, str] = {
    **CORPUS,
    "identifier": "The Wikipedia page id.",
    "url": "The article's URL.",
    "revision": "The article's revision id in the snapshot.",
    "links": "The abstract's links to other articles: target title and id, anchor text, index of the sentence holding it.",
    "split": _SPLIT,
}

# The Luciole RAG card's chat rows.
RAG_SFT: dict[str, str] = {
    "id": "Example id: 24 hex characters of SHA-256 of the question id and the kind (answerable or unanswerable twin).",
    "pair_id": "Twin pair id, from the question id: an answerable example and its unanswerable twin (golds removed) share it.",
    "messages": _MESSAGES_RAG,
    "supporting_facts_titles": "Titles of the gold documents that support the answer (empty for an unanswerable example).",
    "chunks_total": "How many documents (`[Source N]` blocks) the prompt holds.",
    "split": "The split of the question the example was built from.",
}

# The Synth-Long-SFT32K card's rows (the three variants share the first columns).
LONG_CONTEXT: dict[str, str] = {
    "id": "Row id, derived from the variant and the source example's id (and the question for syntactic rows).",
    "variant": "raft, raft_syntactic, clustered or raft_translated.",
    "source_id": "The id of the source example (question, answer, oracle passages).",
    "messages": "The chat: system (instructions and the `Document N:` blocks), then the user and assistant turns.",
    "oracle_positions": "0-based positions of the oracle passages among the documents shown.",
    "distractor_ids": "Ids of the distractor passages, nearest first.",
    "distractor_scores": "Their inner-product similarity to the oracle, in the same order.",
    "num_tokens": "Tokens of the whole conversation under the trained model's chat template (at most the budget).",
    "question_type": "The syntactic question: word_occurs, word_count, phrase_occurs, phrase_count or word_position.",
    "target": "The word or phrase the syntactic question asks about.",
    "qa_source_ids": "Ids of the other examples whose QA pairs the clustered context holds.",
    "passage_cluster": "The example's k-means cluster over passage embeddings.",
    "question_cluster": "The example's k-means cluster over question embeddings.",
}

# The Recall Rewrite card's -sft and -full fields.
RECALL: dict[str, str] = {
    "id": "Example id: oasst1-NNNN, the position of the kept pair in OASST1's order.",
    "base_model": "The base model whose knowledge decided which claims stay.",
    "prompt": "The user's first turn of the OASST1 conversation tree.",
    "response": "The training target: the rewritten response, or the refusal.",
    "is_refusal": "True when the response became the fixed refusal (no known claim was left to answer with).",
    "messages": "The chat: the prompt as user turn, the response as assistant turn.",
    "original_response": "The rank-0 human reply of the tree.",
    "rewritten_response": "The reply with the unknown claims removed (the refusal when nothing is left).",
    "filter": "The thresholds j_e/k_e/j_c/k_c the known-claim verdicts were made under.",
    "num_claims": "Atomic claims in the original response.",
    "num_knowledge_dependent_claims": "Of them, those that depend on knowledge (the audit's verdict).",
    "num_known_claims": "Knowledge-dependent claims the base model knows under the thresholds.",
    "num_unknown_claims": "Knowledge-dependent claims it does not know (removed by the rewrite).",
    "claims": "Every claim: claim_id, text, the audit, is_known, is_removed, the answer counts, the probes with the base model's answers and their labels.",
    "claim_id": "The claim's index in the response.",
    "text": "The claim's text.",
}

# Recall Rewrite's stage tables hold one JSON record per example, filled stage by stage.
RECALL_STAGE: dict[str, str] = {
    "id": RECALL["id"],
    "record": "The example as JSON: the card's -full fields this stage and the ones before it have filled (claims, audit, probes, answers, labels, verdicts, rewrite).",
}
RECALL_STAGES = (
    "oasst_pairs",
    "claims",
    "claim_audit",
    "probes",
    "probe_answers",
    "probe_labels",
    "known_claims",
)

# Each published config's asset by its family (``published_configs``); the corpus config of the
# abstracts themselves ships five of their columns, the asset has more.
BY_FAMILY: dict[str, Mapping[str, str]] = {"multihop": HOTPOTQA, "corpus": CORPUS, "rag_sft": RAG_SFT}
# Asset key (as the UI writes it; a `qa/` chain's assets share their snapshot twin's) -> columns.
BY_ASSET: dict[str, Mapping[str, str]] = {
    **{c.asset: BY_FAMILY[c.family] for c in published_configs.configs()},
    "abstracts": ABSTRACTS,
    "qa/questions": HOTPOTQA,
    "long_context/raft": LONG_CONTEXT,
    "long_context/raft_syntactic": LONG_CONTEXT,
    "long_context/clustered": LONG_CONTEXT,
    "long_context/raft_translated": LONG_CONTEXT,
    "recall_release": RECALL,
    **dict.fromkeys(RECALL_STAGES, RECALL_STAGE),
    "rewrites": RECALL,  # stored in the -full schema itself
}

# Columns that mean the same wherever they appear (stage tables, ledgers).
SHARED: dict[str, str] = {
    "split": "The split: train, validation or test.",
    "verdict": "The stage's decision for the candidate.",
    "reason": "Why the candidate was kept or dropped (a counted reason).",
    "cache_key": "The LLM cache key of the call behind this row (`ragsft cache show KEY`).",
    "template_version": "The version hash of the prompt template.",
    "raw": "The model's raw reply, kept as it came.",
    "pair_id": "Id of the pair the row belongs to.",
    "question_id": "Id of the question the row was built from.",
}


def for_asset(asset: str | None) -> Mapping[str, str]:
    """The column descriptions of ``asset`` (``qa/rag_sft`` -> those of ``rag_sft``); {} when none."""
    if not asset:
        return {}
    if asset in BY_ASSET:
        return BY_ASSET[asset]
    return BY_ASSET.get(asset.removeprefix("qa/"), {}) if asset.startswith("qa/") else {}


def describe(asset: str | None, columns: Iterable[str]) -> dict[str, str]:
    """``{column: description}`` for the columns of ``asset`` that have one (the asset's own, then SHARED)."""
    own = for_asset(asset)
    out: dict[str, str] = {}
    for name in columns:
        text = own.get(name) or SHARED.get(name)
        if text:
            out[name] = text
    return out
