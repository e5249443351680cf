"""The Luciole RAG card's "Source data and licenses", per config: what a QA release's card names.

A release of an outside question set (``hotpotqa.en``, ``trust_align.en``) is not built from
Wikipedia abstracts: its card names that set's sources and their licenses as the Luciole RAG card
does, word for word, then the license the card gives the configuration. Dagster-free.
"""

from __future__ import annotations

from ragsft_assets.rag_sft import recipes

# The card's "Source data and licenses" of each config, its bullets and its closing sentence.
SOURCES: dict[str, tuple[str, ...]] = {
    recipes.HOTPOTQA_CITE: (
        "HotpotQA: Yang et al. (2018), HotpotQA: A Dataset for Diverse, Explainable Multi-hop Question "
        "Answering, distributed under CC BY-SA 4.0.",
    ),
    recipes.TRUST_ALIGN: (
        "Trust-Align: Song et al. (2025), Measuring and Enhancing Trustworthiness of LLMs in RAG through "
        "Grounded Attributions and Learning to Refuse, data distributed under Apache 2.0. The GPT-4 "
        "targets are not included.",
        "ASQA: Stelmakh et al. (2022), ASQA: Factoid Questions Meet Long-Form Answers, distributed under "
        "Apache 2.0.",
        "QAMPARI: Amouyal et al. (2023), QAMPARI: A Benchmark for Open-domain Questions with Many "
        "Answers, distributed under CC0 1.0.",
        "Passages: Wikipedia (DPR 2018 dump, used by ALCE), CC BY-SA.",
    ),
}
CONCLUSIONS: dict[str, str] = {
    recipes.HOTPOTQA_CITE: "Since HotpotQA is released under a share-alike license, this dataset is "
    "distributed under CC BY-SA 4.0.",
    recipes.TRUST_ALIGN: "Since the passages are under a share-alike license, this configuration is "
    "distributed under CC BY-SA 4.0.",
}


def license_lines(config: str) -> list[str]:
    """The card's License section body for a QA release of ``config`` (markdown lines).

    Raises:
        KeyError: a config the card names no sources for.
    """
    if config not in SOURCES:
        raise KeyError(f"the Luciole RAG card names no sources for {config!r}: one of {sorted(SOURCES)}")
    return [
        "Source data and licenses, as the Luciole RAG card names them:",
        "",
        *(f"- {line}" for line in SOURCES[config]),
        "",
        CONCLUSIONS[config],
    ]
