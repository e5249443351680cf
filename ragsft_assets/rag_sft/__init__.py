"""Dagster-free logic of the rag_sft family."""
