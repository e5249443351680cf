"""Dagster resources by role: snapshots (the source), store, catalog, and the LLM roles."""
