"""Dagster wiring of the rag_sft family: prompts -> responses -> verdicts -> rag_sft."""

import dagster as dg

from ragsft_assets.defs.rag_sft.assets import RagSftConfig, rag_prompts, rag_responses, rag_sft, rag_verdicts

# rag_sft's checks are declared on the asset (check_specs) and computed in its materialization.
defs = dg.Definitions(assets=[rag_prompts, rag_responses, rag_verdicts, rag_sft], asset_checks=[])

__all__ = ["RagSftConfig", "defs"]
