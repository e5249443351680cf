"""Dagster wiring of the rag_sft family."""
