"""Dagster wiring of the rag_sft family: prompts -> responses -> verdicts -> rag_sft (snapshot and QA chains)."""

import dagster as dg

from ragsft_assets.defs.rag_sft import assets as chain
from ragsft_assets.defs.rag_sft import qa
from ragsft_assets.defs.rag_sft.assets import RagSftConfig

# rag_sft's checks are declared on the asset (check_specs) and computed in its materialization.
# Two chains from one factory: the snapshot chain (today's keys) and the QA chain (qa/ prefix).
defs = dg.Definitions(
    assets=[
        chain.rag_prompts,
        chain.rag_responses,
        chain.rag_verdicts,
        chain.rag_sft,
        qa.questions,
        chain.qa_rag_prompts,
        chain.qa_rag_responses,
        chain.qa_rag_verdicts,
        chain.qa_rag_sft,
        qa.release,
    ],
    asset_checks=[],
)

__all__ = ["RagSftConfig", "defs"]
