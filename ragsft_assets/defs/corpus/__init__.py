"""Dagster wiring of the corpus family."""
