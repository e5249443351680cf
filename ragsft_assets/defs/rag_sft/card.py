"""The RAG SFT statistics a release card prints, read from a chain's artifacts.

Shared by the QA chain's release (``qa.py``) and the snapshot release's card
(``defs/release/assets.py``), below both.
"""

from ragsft_assets.defs.rag_sft.assets import QA_INPUT_ASSET
from ragsft_assets.resources.store import ArtifactStore


def card_statistics(store: ArtifactStore, partition: str, questions_store: str = QA_INPUT_ASSET) -> dict:
    """A release card's RAG SFT statistics: those ``rag_sft`` computed with the run's recipe and
    tokenizer (``_statistics.json`` beside its files), else recomputed from the chain's artifacts
    (``statistics.chain_statistics``, whitespace words, no recipe statistics).

    ``questions_store`` holds the questions' type and level: ``questions`` for the QA chain,
    ``multihop_questions`` for the snapshot chain (a superset of every filtered config, rows
    unchanged).
    """
    import orjson

    from ragsft_assets.defs.rag_sft.assets import STATISTICS_FILE
    from ragsft_assets.rag_sft import statistics
    from ragsft_assets.rag_sft.examples import refusal_phrases

    saved = store.path(partition, "rag_sft").parent / STATISTICS_FILE
    if saved.is_file():
        return orjson.loads(saved.read_bytes())
    rows = store.read(partition, "rag_sft").to_pylist()
    prompts = store.read(partition, "rag_prompts").select(["id", "question_id", "language"]).to_pylist()
    langs = sorted({p["language"] for p in prompts})
    source = store.read(partition, questions_store).select(["id", "type", "level"]).to_pylist()
    return statistics.chain_statistics(
        rows,
        {q["id"]: (q["type"], q["level"]) for q in source},
        {p["id"]: p["question_id"] for p in prompts},
        statistics.whitespace_counter,
        "whitespace",
        strict_phrases=[ph for lang in langs for ph in refusal_phrases(lang)],
    )
